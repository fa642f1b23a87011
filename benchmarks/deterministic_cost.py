"""What ``train_eval.deterministic`` costs: training env steps/s with and without it, per agent.

Deterministic mode (docs/training.md, "Deterministic mode") turns on TensorFlow's
deterministic kernels for the whole process, so every measurement is its own
process. For each workload and mode, ``--repeats`` processes alternate
(default, deterministic, default, ...) so that a slow spell of a noisy host
hits both modes. Each process trains with ``harness.train_eval`` on the
workload's config for ``--env_steps`` and reports the median of its
per-iteration ``SPS`` (the first iteration, tracing, left out:
``demo.training_speed``). The table gives the median over the repeats and
the ratio deterministic / default, measured in this run.

Workloads: ``ppo_lavacrossing_sit`` (Table 4's SiT, configs/minigrid/
lavacrossing_sit_corners.gin), ``sac_dmc_state`` (configs/dmc/
cartpole_swingup_state.gin), ``dqn_cartpole`` (CartPole with an MLP, n-step
replay).

Usage::

    python benchmarks/deterministic_cost.py [--workloads ppo_lavacrossing_sit,sac_dmc_state,dqn_cartpole]
        [--repeats 3] [--out benchmarks/results/deterministic_cost.json] [--quick]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    training_speed,
    write_report,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "deterministic_cost.json"
MODES = ("default", "deterministic")
# (gin file, bindings, env steps of a full measurement, of a --quick one)
WORKLOADS: dict[str, tuple[str, list[str], int, int]] = {
    "ppo_lavacrossing_sit": (
        "configs/minigrid/lavacrossing_sit_corners.gin",
        ["ppo.collect_steps_per_env = 128", "ppo.num_minibatches = 8"],
        5 * 16 * 128,
        2 * 16 * 128,
    ),
    "sac_dmc_state": (
        "configs/dmc/cartpole_swingup_state.gin", ["sac.initial_collect_steps = 1000"], 4000, 2200,
    ),
    "dqn_cartpole": (
        "",
        [
            "train_eval.agent = 'dqn'", "train_eval.env_name = 'gymnasium:CartPole-v1'",
            "train_eval.encoder = 'mlp'", "train_eval.encoder_kwargs = {'units': (64, 64)}",
            "dqn.algorithm = 'dqn'", "dqn.min_replay_size = 500", "dqn.n_step = 3", "dqn.batch_size = 64",
            "train_eval.log_interval = 500",
        ],
        5000,
        1500,
    ),
}  # fmt: skip
COMMON = [
    "train_eval.progress = False", "train_eval.num_eval_episodes = 0", "train_eval.policy_save_interval = 0",
]  # fmt: skip


def measure(workload: str, deterministic: bool, env_steps: int) -> dict[str, Any]:
    """One process training ``workload``: its median env steps/s over the timed iterations."""
    gin_file, bindings, _, _ = WORKLOADS[workload]
    bindings = [*COMMON, *bindings, f"train_eval.total_env_steps = {env_steps}"]
    try:
        return training_speed([ROOT / gin_file] if gin_file else [], bindings, deterministic, cwd=ROOT)
    except RuntimeError as error:
        raise RuntimeError(f"{workload} ({MODES[deterministic]}): {error}") from None


def run(workloads: Sequence[str], repeats: int, quick: bool) -> dict[str, Any]:
    started, commit = time.time(), current_commit()
    measured: dict[str, dict[str, list[dict[str, Any]]]] = {w: {m: [] for m in MODES} for w in workloads}
    for workload in workloads:
        env_steps = WORKLOADS[workload][3 if quick else 2]
        for repeat in range(repeats):
            for deterministic in (False, True):
                result = measure(workload, deterministic, env_steps)
                measured[workload][MODES[deterministic]].append(result)
                mode = MODES[deterministic]
                print(f"{workload} {mode} #{repeat + 1}: {result['sps']:.1f} env steps/s", flush=True)
    table = {}
    for workload, modes in measured.items():
        medians = {mode: statistics.median(r["sps"] for r in runs) for mode, runs in modes.items()}
        table[workload] = {
            "env_steps_per_second": medians,
            "deterministic_over_default": medians["deterministic"] / medians["default"],
        }
    return {
        "what": "training env steps/s, train_eval.deterministic off and on (medians, alternating processes)",
        "command": command_line("deterministic_cost.py", None),
        "commit": commit,
        "repeats": repeats,
        "quick": quick,
        "workloads": {w: {"gin_file": WORKLOADS[w][0], "bindings": WORKLOADS[w][1]} for w in workloads},
        "table": table,
        "runs": measured,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=name_list(list(WORKLOADS), "workload"), default=list(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3, help="processes per workload and mode")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat: a smoke test")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}.")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the measurements; returns the exit code (2 on a bad argument)."""
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    report = run(args.workloads, 1 if args.quick else args.repeats, args.quick)
    print(f"{'workload':24s} {'default':>10s} {'determ.':>10s} {'ratio':>7s}")
    for workload, row in report["table"].items():
        speeds = row["env_steps_per_second"]
        print(
            f"{workload:24s} {speeds['default']:10.1f} {speeds['deterministic']:10.1f} "
            f"{row['deterministic_over_default']:7.2f}"
        )
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
