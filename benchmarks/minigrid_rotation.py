"""The SiT paper's Table 4 at a CPU budget: MiniGrid LavaCrossing, trained on N1 + N2.

For each model config (``configs/minigrid/lavacrossing_<model>.gin``) and seed,
PPO trains for ``--env_steps`` environment steps on LavaCrossing S9N1 and S9N2
(half of the environments each), then the policy is evaluated on the rows of
Table 4:

    train: easy-N1, train: medium-N2, hard-N3      (upright)
    rotations average                               (N1, observations rotated 90/180/270)
    goal top-right, goal bottom-left, random goal   (N1, goal moved)

Every model gets the same CNN critic (``ppo.value_encoder``): only the policy's
encoder differs. The table gives the success rate, mean +- std over seeds,
of the sampling policy (``--greedy`` for the most likely action). The paper
trains for 20M steps (its Table 4: SiT 0.94 on N1 and 0.91 rotated, CNN 0.96
and 0.00); a CPU budget is far smaller, so say which budget a table is for.

Usage (slow: about ``env_steps / 250`` seconds per SiT run on 2 cores)::

    python benchmarks/minigrid_rotation.py --models sit_small,cnn,vit --seeds 0,1,2 \\
        --env_steps 300000 --out benchmarks/results/minigrid_rotation.json
    python benchmarks/minigrid_rotation.py --quick     # smoke run, a minute
"""

from __future__ import annotations

import sit_keras  # noqa: F401  (selects Keras 2 before TensorFlow is imported)

# isort: split

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin

from sit_keras.agents import evaluate, train
from sit_keras.benchmarking import environment, write_report

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "minigrid_rotation.json"
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "minigrid"
CRITIC = [
    "ppo.value_encoder = 'cnn'",
    "ppo.value_encoder_kwargs = {'filters': (16, 32), 'strides': 1}",
]
# The rows below are the evaluation: the trainer's own (eval/) is off, so that train_wall_s is
# training alone (--gin_bindings 'train_eval.num_eval_episodes = 10' turns it back on).
NO_TRAINER_EVALUATION = ["train_eval.num_eval_episodes = 0"]

# Table 4 row -> (environment, transforms, load keyword arguments).
ROWS: dict[str, tuple[str, tuple[str | None, ...], dict[str, Any]]] = {
    "train: easy-N1": ("minigrid:LavaCrossingS9N1", (None,), {}),
    "train: medium-N2": ("minigrid:LavaCrossingS9N2", (None,), {}),
    "hard-N3": ("minigrid:LavaCrossingS9N3", (None,), {}),
    "rotations average": ("minigrid:LavaCrossingS9N1", ("rot90", "rot180", "rot270"), {}),
    "goal top-right": ("minigrid:LavaCrossingS9N1", (None,), {"goal": "top_right"}),
    "goal bottom-left": ("minigrid:LavaCrossingS9N1", (None,), {"goal": "bottom_left"}),
    "random goal": ("minigrid:LavaCrossingS9N1", (None,), {"goal": "random"}),
}


def train_one(
    model: str, seed: int, env_steps: int, root: Path, bindings: Sequence[str]
) -> tuple[str, float]:
    """Trains ``lavacrossing_<model>.gin`` with ``seed``; returns the run folder and the wall time."""
    root_dir = root / f"{model}_seed{seed}"
    gin.clear_config()
    train.parse_gin(
        [str(CONFIGS / f"lavacrossing_{model}.gin")],
        [
            *CRITIC,
            *NO_TRAINER_EVALUATION,
            f"train_eval.total_env_steps = {env_steps}",
            f"train_eval.seed = {seed}",
            *bindings,
        ],
    )
    start = time.perf_counter()
    try:
        train.train_eval(str(root_dir))
    finally:
        gin.clear_config()
    return str(root_dir), time.perf_counter() - start


def evaluate_rows(root_dir: str, greedy: bool, num_episodes: int) -> dict[str, dict[str, float]]:
    """Success rate and mean return of one trained run on every Table 4 row."""
    policy = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy" if greedy else "policy"))
    rows = {}
    for row, (env_name, transforms, kwargs) in ROWS.items():
        results = evaluate.evaluate(
            policy, env_name, transforms, num_episodes=num_episodes, env_kwargs=kwargs
        )
        rows[row] = {
            "success_rate": statistics.mean(r["success_rate"] for r in results.values()),
            "mean_return": statistics.mean(r["mean_return"] for r in results.values()),
        }
    return rows


def _mean_std(values: Sequence[float]) -> str:
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def format_table(per_model: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    models = list(per_model)
    lines = ["| test task | " + " | ".join(models) + " |", "| --- |" + " ---: |" * len(models)]
    for row in ROWS:
        cells = [_mean_std([run[row]["success_rate"] for run in per_model[m]]) for m in models]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", default="sit_small,cnn,vit", help="configs/minigrid/lavacrossing_<name>.gin"
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--env_steps", type=int, default=300_000)
    parser.add_argument("--num_episodes", type=int, default=100, help="per row (and per rotation)")
    parser.add_argument("--greedy", action="store_true", help="evaluate the greedy policies")
    parser.add_argument("--root", default="runs/minigrid_rotation", help="training runs go here (resumable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra bindings for every run")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="smoke run: cnn, 1 seed, 2048 steps, 4 episodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.seeds, args.env_steps, args.num_episodes = "cnn", "0", 2048, 4
    seeds = [int(s) for s in args.seeds.split(",")]

    per_model: dict[str, list[dict[str, dict[str, float]]]] = {}
    runs = []
    for model in args.models.split(","):
        per_model[model] = []
        for seed in seeds:
            print(f"== {model}, seed {seed}: {args.env_steps} steps", flush=True)
            root_dir, seconds = train_one(model, seed, args.env_steps, Path(args.root), args.gin_bindings)
            rows = evaluate_rows(root_dir, args.greedy, args.num_episodes)
            per_model[model].append(rows)
            runs.append(
                {"model": model, "seed": seed, "root_dir": root_dir, "train_wall_s": seconds, "rows": rows}
            )
    table = format_table(per_model)
    print(
        f"\nSuccess rate ({'greedy' if args.greedy else 'sampling'} policy), mean ± std over seeds {seeds}, "
        f"after {args.env_steps} steps:\n\n{table}"
    )
    report = {
        "benchmark": "minigrid_rotation",
        "machine": environment(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": runs,
        "table": table,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
