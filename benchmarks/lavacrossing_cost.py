"""What a LavaCrossing encoder costs per environment step in PPO: env steps/s per model and their ratios.

SiT's issue allows a fixed encoder at most 1.5x SiT-small's cost *per
environment step* (collection and learning together), which a train-step
timing alone does not give. For each model, ``--repeats`` processes train
PPO with ``configs/minigrid/lavacrossing_<model>.gin`` and Table 4's
protocol bindings (``benchmarks/minigrid_rotation.py``: 16 environments x
128 steps, 8 minibatches, and the same CNN critic for every model whose
value head is not on its actor's torso, so that only the policy's encoder
differs, as in the runs) for ``--env_steps`` steps, without evaluation;
the models alternate within each repeat so that a slow spell of a noisy
host hits all of them. Each process reports the median of its per-iteration
env steps/s (the first iteration, tracing, left out); the table gives the
median over the repeats and each model's cost relative to the first model
(its env steps/s over the model's), measured in this run.

Usage::

    python benchmarks/lavacrossing_cost.py [--models sit_small,sit_chiral,sit_corners,cnn]
        [--repeats 3] [--env_steps 10240] [--out benchmarks/results/lavacrossing_cost.json] [--quick]
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from minigrid_rotation import model_bindings  # noqa: E402  (the protocol's critic, from its one home)

CONFIGS = ROOT / "configs" / "minigrid"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "lavacrossing_cost.json"
MODELS = sorted(p.stem.removeprefix("lavacrossing_") for p in CONFIGS.glob("lavacrossing_*.gin"))
PROTOCOL = ["ppo.collect_steps_per_env = 128", "ppo.num_minibatches = 8"]  # table4_lavacrossing_3m.json
COMMON = [
    "train_eval.progress = False", "train_eval.num_eval_episodes = 0", "train_eval.policy_save_interval = 0",
]  # fmt: skip
ITERATION = 16 * 128  # env steps per PPO iteration under PROTOCOL


def measure(model: str, env_steps: int) -> dict[str, Any]:
    """One process training ``model`` for ``env_steps``: its median env steps/s."""
    config = CONFIGS / f"lavacrossing_{model}.gin"
    bindings = [*COMMON, *protocol(model), f"train_eval.total_env_steps = {env_steps}"]
    return training_speed([config], bindings, cwd=ROOT)


def protocol(model: str) -> list[str]:
    """Table 4's bindings for ``model``: ``PROTOCOL`` and the CNN critic unless its torso is shared."""
    return [*PROTOCOL, *model_bindings("lavacrossing", str(CONFIGS / f"lavacrossing_{model}.gin"), PROTOCOL)]


def run(models: Sequence[str], repeats: int, env_steps: int) -> dict[str, Any]:
    started, commit = time.time(), current_commit()
    measured: dict[str, list[dict[str, Any]]] = {m: [] for m in models}
    for repeat in range(repeats):
        for model in models:
            result = measure(model, env_steps)
            measured[model].append(result)
            print(f"{model} #{repeat + 1}: {result['sps']:.1f} env steps/s", flush=True)
    medians = {m: statistics.median(r["sps"] for r in runs) for m, runs in measured.items()}
    first = models[0]
    return {
        "what": "PPO env steps/s on LavaCrossing per model (medians of alternating processes) and the cost "
        "per env step relative to the first model",
        "relative_to": first,
        "command": command_line("lavacrossing_cost.py", None),
        "commit": commit,
        "repeats": repeats,
        "env_steps_per_process": env_steps,
        "bindings": {m: protocol(m) for m in models},
        "table": {
            m: {"env_steps_per_second": medians[m], "cost_per_env_step": medians[first] / medians[m]}
            for m in models
        },
        "runs": measured,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=name_list(MODELS, "model"), default=["sit_small", "sit_chiral"])
    parser.add_argument("--repeats", type=int, default=3, help="processes per model")
    parser.add_argument("--env_steps", type=int, default=5 * ITERATION, help="env steps per process")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="two iterations, one repeat: a smoke test")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}.")
    if args.env_steps < 2 * ITERATION:
        raise UsageError(f"--env_steps must be >= {2 * ITERATION} (two iterations), got {args.env_steps}.")
    if args.quick:
        args.repeats, args.env_steps = 1, 2 * ITERATION
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the measurements; returns the exit code (2 on a bad argument)."""
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    report = run(args.models, args.repeats, args.env_steps)
    first = args.models[0]
    print(f"{'model':16s} {'env steps/s':>12s} {'cost x ' + first:>20s}")
    for model, row in report["table"].items():
        print(f"{model:16s} {row['env_steps_per_second']:12.1f} {row['cost_per_env_step']:20.2f}")
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
