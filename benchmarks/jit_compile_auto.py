"""What ``--jit_compile auto`` (and ``--precision auto``) choose for each training config on this host.

For each gin file, the measurement ``sit-train`` makes when a run starts with
``jit_compile="auto"`` (``agents/training/auto_settings.py``): one train step of the
config's encoder with a value head (forward, backward and Adam, random observations
of the environment's spec, the algorithm's minibatch size, float32), with XLA and
without, each timed in ``ROUNDS`` rounds in a new order after a warm-up. With
``--questions jit_compile,precision`` also the one a run makes with ``precision="auto"``:
the same graph-mode step in float32 and in ``mixed_bfloat16``. Nothing is read from or
written to the user's cache: every config is measured now, in turn.

Printed and written per config and question: the median seconds of each step, the
other candidate's time over the default's (the median of the per-round ratios) and the
choice (the other candidate only when that ratio is below ``MARGIN``).

    python benchmarks/jit_compile_auto.py --out benchmarks/reference/jit_compile_auto.json
    python benchmarks/jit_compile_auto.py --gin_files configs/demo/cnn.gin     # one config
    python benchmarks/jit_compile_auto.py --questions precision --out auto_precision.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (drops TensorFlow's start-up chatter)

# isort: split

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin
from tf_agents.specs import tensor_spec

from sit_keras import measured_choice
from sit_keras.agents import train
from sit_keras.agents.environments import load
from sit_keras.agents.training import auto_settings, harness
from sit_keras.benchmarking import (
    SentenceParser,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_GIN_FILES = (
    "configs/demo/cnn.gin",
    "configs/demo/sit.gin",
    "configs/minigrid/lavacrossing_cnn.gin",
    "configs/minigrid/lavacrossing_sit_small.gin",
    "configs/minigrid/lavacrossing_sit_chiral.gin",
    "configs/minigrid/lavacrossing_vit.gin",
    "configs/procgen/caveflyer_impala_cnn.gin",
    "configs/procgen/caveflyer_sit.gin",
    "configs/procgen/caveflyer_vit.gin",
    "configs/dmc/cartpole_swingup_mlp.gin",
    "configs/cartpole/swingup_harder_pi.gin",
)


def _gin_files(text: str) -> list[str]:
    files = [name.strip() for name in text.split(",") if name.strip()]
    if not files:
        raise argparse.ArgumentTypeError("give at least one gin file")
    for name in files:
        if not os.path.isfile(REPOSITORY / name) and not os.path.isfile(name):
            raise argparse.ArgumentTypeError(f"{name} is not a file")
    return files


QUESTIONS = ("jit_compile", "precision")


def _questions(text: str) -> list[str]:
    questions = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in questions if name not in QUESTIONS]
    if not questions or unknown:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(QUESTIONS)}; got {text!r}")
    return questions


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gin_files", type=_gin_files, default=list(DEFAULT_GIN_FILES),
                        help="comma-separated training configs (default: the main ones)")  # fmt: skip
    parser.add_argument("--questions", type=_questions, default=["jit_compile"],
                        help="comma-separated: jit_compile, precision (default: jit_compile)")  # fmt: skip
    parser.add_argument("--out", default=None, help="write the report (JSON) to this file")
    args = parser.parse_args(argv)
    check_out_file(args.out)
    return args


def measure(gin_file: str, questions: Sequence[str] = ("jit_compile",)) -> dict[str, Any]:
    """The ``auto`` measurements of one config for ``questions``, measured now."""
    path = gin_file if os.path.isfile(gin_file) else str(REPOSITORY / gin_file)
    gin.clear_config()
    train.parse_gin([path], [])
    module, run_settings, settings = harness._settings({}, None)  # the run's checks, nothing built
    env = load(run_settings.env_name, num_envs=1, seed=0, **dict(run_settings.env_kwargs or {}))
    try:
        spec = tensor_spec.from_spec(env.observation_spec())
    finally:
        env.close()
    minibatch = module.minibatch_size(run_settings, settings)
    row = {"gin_file": gin_file, "agent": run_settings.agent, "encoder": run_settings.encoder,
           "minibatch_size": minibatch}  # fmt: skip
    head = f"{gin_file}: {run_settings.encoder}, minibatch {minibatch}"
    if "jit_compile" in questions:
        start = time.perf_counter()
        choice = auto_settings.choose_jit_compile(run_settings, "float32", spec, minibatch)
        row.update(
            seconds=choice.seconds, xla_over_graph=choice.ratio_to_default["on"], choice=choice.value,
            measurement_s=round(time.perf_counter() - start, 1),
        )  # fmt: skip
        graph_ms, xla_ms = choice.seconds["off"] * 1e3, choice.seconds["on"] * 1e3
        print(
            f"{head}: graph {graph_ms:.1f} ms, XLA {xla_ms:.1f} ms, XLA / graph {row['xla_over_graph']:.2f} "
            f"-> {choice.value} ({row['measurement_s']} s)",
            flush=True,
        )
    if "precision" in questions:
        start = time.perf_counter()
        choice = auto_settings.choose_precision(run_settings, spec, minibatch)
        row["precision"] = {
            "seconds": choice.seconds,
            "bfloat16_over_float32": choice.ratio_to_default["mixed_bfloat16"],
            "choice": choice.value,
            "measurement_s": round(time.perf_counter() - start, 1),
        }
        float32_ms, bfloat16_ms = (choice.seconds[name] * 1e3 for name in ("float32", "mixed_bfloat16"))
        print(
            f"{head}: float32 {float32_ms:.1f} ms, mixed_bfloat16 {bfloat16_ms:.1f} ms, mixed_bfloat16 / "
            f"float32 {row['precision']['bfloat16_over_float32']:.2f} -> {choice.value} "
            f"({row['precision']['measurement_s']} s)",
            flush=True,
        )
    gin.clear_config()
    return row


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(_parse, argv)
    if args is None:
        return 2
    commit, started = current_commit(), time.time()
    os.environ.pop(measured_choice.NO_MEASURE_VARIABLE, None)  # measuring is this script's job
    rows = []
    for gin_file in args.gin_files:
        # An empty cache per config: each is measured now (two configs may share a model), and the
        # user's cache is neither read nor written.
        with tempfile.TemporaryDirectory() as cache:
            os.environ[measured_choice.CACHE_DIR_VARIABLE] = cache
            rows.append(measure(gin_file, args.questions))
    report = {
        "benchmark": "jit_compile_auto",
        "questions": args.questions,
        "command": command_line("jit_compile_auto.py", argv),
        "commit": commit,
        "wall_time_s": round(time.time() - started, 1),
        "rounds": measured_choice.ROUNDS,
        "calls_per_round": measured_choice.CALLS_PER_ROUND,
        "margin": measured_choice.MARGIN,
        "environment": environment(),
        "configs": rows,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
