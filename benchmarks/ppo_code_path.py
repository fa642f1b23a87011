"""How many lines of this project a PPO run executes, from ``sit-train`` to the learner and back.

Issue 23 measures the training side's weight by the code one PPO run goes
through (TF-Agents' PPO example is about 440 lines over its library, CleanRL's
PPO one file of about 330). This script runs ``sit-train``'s ``main`` in this
process on a tiny PPO configuration (MiniGrid LavaGapS5, two environments, the
small CNN, 64 environment steps: two collect-and-learn iterations, a
checkpoint, a policy save and an evaluation), under coverage.py, and counts
the executed statements of every project file, per folder and per file.

Every module the run needs is imported before measuring, so a file's
module-level statements (imports, ``def`` and ``class`` lines) do not count:
what is counted is the code that runs. The encoder's own lines
(``sit_keras/models``, ``sit_keras/layers``) are reported apart, as the
comparisons above leave the network out.

    .venv/bin/python benchmarks/ppo_code_path.py --out benchmarks/results/ppo_code_path.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import contextlib
import io
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import coverage
import gin

from sit_keras.benchmarking import SentenceParser, current_commit, parse_or_say_why, write_report

REPOSITORY = Path(__file__).resolve().parent.parent
# The folders the design names: the core, and agents/, export/, commands/ (installed under sit_keras).
FOLDERS = ("sit_keras", "agents", "export", "commands")
ENCODER_FOLDERS = ("sit_keras/models", "sit_keras/layers")
TINY_PPO = [
    "train_eval.agent = 'ppo'", "train_eval.env_name = 'minigrid:LavaGapS5'", "train_eval.num_envs = 2",
    "train_eval.encoder = 'cnn'",
    "train_eval.encoder_kwargs = {'filters': (4,), 'strides': 1, 'output_dim': 8}",
    "ppo.collect_steps_per_env = 16", "ppo.num_minibatches = 2", "ppo.drac_coef = 0.0",
    "train_eval.total_env_steps = 64", "train_eval.num_eval_episodes = 2",
    "train_eval.checkpoint_interval = 32", "train_eval.policy_save_interval = 32",
]  # fmt: skip


def _silenced() -> contextlib.ExitStack:
    """Drops the runs' progress bars and summary lines: the report is what this script prints."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def _warm_imports() -> None:
    """Imports what the run imports lazily, so that module-level lines stay out of the count."""
    from sit_keras.agents import train
    from sit_keras.agents.training import harness, run_settings

    run_settings.import_algorithms()
    train.parse_gin([], TINY_PPO)
    with tempfile.TemporaryDirectory() as root:
        # One run outside the measurement imports the environment, network and policy modules.
        with _silenced():
            harness.train_eval(root)
    gin.clear_config(clear_constants=True)  # the run locked it; the measured run parses it again


def executed_lines(root_dir: str) -> dict[str, int]:
    """Repository-relative path -> executed statements, for one tiny ``sit-train`` PPO run."""
    from sit_keras.agents import train

    measure = coverage.Coverage(data_file=None, source_pkgs=["sit_keras"], config_file=False)
    # sit_keras is imported before measuring on purpose (module docstring).
    measure.set_option("run:disable_warnings", ["module-not-measured"])
    argv = ["sit-train", "--root_dir", root_dir, *[a for b in TINY_PPO for a in ("--gin_bindings", b)]]
    measure.start()
    try:
        with _silenced(), contextlib.suppress(SystemExit):
            train.main(argv)
    finally:
        measure.stop()
    data = measure.get_data()
    counts = {}
    for filename in data.measured_files():
        path = Path(filename).resolve()
        if not path.is_relative_to(REPOSITORY):
            continue
        counts[path.relative_to(REPOSITORY).as_posix()] = len(data.lines(filename) or ())
    return counts


def summarise(counts: dict[str, int]) -> dict[str, object]:
    by_folder: Counter[str] = Counter()
    for path, lines in counts.items():
        folder = next((f for f in ENCODER_FOLDERS if path.startswith(f + "/")), path.split("/")[0])
        by_folder[folder] += lines
    encoder = sum(by_folder[f] for f in ENCODER_FOLDERS)
    total = sum(counts.values())
    return {
        "executed_lines_without_the_encoder": total - encoder,
        "executed_lines_of_the_encoder": encoder,
        "by_folder": dict(sorted(by_folder.items())),
        "by_file": dict(sorted(counts.items(), key=lambda item: -item[1])),
    }


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/ppo_code_path.json", help="JSON report")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(_parse, argv)
    if args is None:
        return 2
    _warm_imports()
    with tempfile.TemporaryDirectory() as root:
        counts = executed_lines(str(Path(root) / "run"))
    if not counts:
        print("The PPO run executed no project line: is sit_keras installed from this repository?")
        return 1
    summary = summarise(counts)
    print(
        f"PPO end to end, sit-train to the learner: {summary['executed_lines_without_the_encoder']} "
        f"executed lines of this project, plus {summary['executed_lines_of_the_encoder']} in the encoder."
    )
    for path, lines in list(summary["by_file"].items())[:15]:
        print(f"  {lines:5d}  {path}")
    write_report(
        {"what": __doc__.splitlines()[0], "command": "python benchmarks/ppo_code_path.py",
         "commit": current_commit(), "bindings": TINY_PPO, **summary},
        args.out,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
