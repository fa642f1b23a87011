"""SAC on DMC walker-walk from pixels (SiT paper appendix F.3) at a CPU budget.

Two parts, both with ``configs/dmc/walker_walk_<encoder>.gin`` (64x64 RGB,
3 stacked frames, action repeat 4, SAC of Hansen & Wang 2021, no augmentation):

1. speed (``--speed_encoders``): a short run per encoder, ``--speed_steps``
   random steps and then ``--speed_blocks`` blocks of ``--speed_iterations``
   SAC iterations (one environment step and one gradient step of batch 128
   each). The first block includes tracing; the medians over the other
   blocks are the training speed: environment steps per second (collection
   and learning), the learner's train steps per second (gradient steps over
   the learner's own time) and the shares of wall time of the learner, the
   policy and the environment (its rendering). Each block's numbers are kept.
2. training (``--encoders``, ``--seeds``): ``--env_steps`` environment steps
   (agent steps; each is 4 simulator steps), then the greedy policy's return
   over ``--num_eval_episodes`` episodes (1000 simulator steps each).

The SiT paper trains for 500k steps and gives no walker-walk number: F.3 says
only that SieT "has comparable performance to the ViT baseline with > 1M
weights (Hansen & Wang, 2021)". The table says so beside ours; a CPU budget
is far smaller than 500k steps, so say which budget a table is for.

Usage (slow: minutes per 1k steps of the attention encoders on 2 cores)::

    python benchmarks/dmc_walker.py --encoders cnn --env_steps 3000 \\
        --speed_encoders siet,sit,vit,cnn --out benchmarks/results/dmc_walker.json
    python benchmarks/dmc_walker.py --quick     # smoke run, a few minutes
    python benchmarks/dmc_walker.py --encoders '' --speed_encoders siet \
        --speed_steps 200 --speed_iterations 20 --speed_blocks 4   # SieT speed only
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin

from sit_keras.agents import train
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_gin_bindings,
    check_out_file,
    environment,
    name_list,
    parse_or_say_why,
    seed_list,
    write_report,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "dmc_walker.json"
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "dmc"
ENCODERS = ("siet", "sit", "vit", "cnn")
PAPER = "not reported (F.3: SieT 'comparable' to Hansen & Wang's ViT)"


def _parse(encoder: str, bindings: Sequence[str]) -> None:
    """Parses ``configs/dmc/walker_walk_<encoder>.gin`` and ``bindings`` with sit-train's parser."""
    gin.clear_config()
    train.parse_gin([str(CONFIGS / f"walker_walk_{encoder}.gin")], list(bindings))


def _run(encoder: str, root_dir: Path, bindings: Sequence[str]) -> tuple[dict[str, Any], float]:
    _parse(encoder, bindings)
    start = time.perf_counter()
    try:
        results = train.train_eval(str(root_dir))
    finally:
        gin.clear_config()
    return results, time.perf_counter() - start


def measure_speed(encoder: str, random_steps: int, iterations: int, blocks: int = 2) -> dict[str, Any]:
    """Speed of SAC training with ``encoder``: medians over the logged blocks after the first.

    The run goes to a temporary folder (a speed run must not resume an
    earlier one). Per block of ``iterations`` SAC iterations,
    ``steps_per_second`` is environment steps over the time of collection
    and learning (the harness's ``SPS``) and ``train_steps_per_second`` is
    gradient steps over the learner's share of that time.

    Raises:
      ValueError: fewer than 2 blocks (the first one includes tracing).
    """
    if blocks < 2:
        raise ValueError(f"speed_blocks must be >= 2 (the first includes tracing). Received: {blocks}")
    total_steps = random_steps + blocks * iterations
    with tempfile.TemporaryDirectory(prefix=f"dmc_walker_speed_{encoder}_") as root_dir:
        results, seconds = _run(
            encoder,
            Path(root_dir),
            [
                f"train_eval.total_env_steps = {total_steps}",
                f"sac.initial_collect_steps = {random_steps}",
                f"train_eval.log_interval = {iterations}",
                f"sac.replay_capacity = {total_steps}",
                "train_eval.num_eval_episodes = 0",  # no evaluation
                "train_eval.policy_save_interval = 0",
                f"train_eval.checkpoint_interval = {10 * total_steps}",
                "train_eval.checkpoint_replay_buffer = False",
                "train_eval.progress = False",
            ],
        )
    history = results["history"]
    timed = block_speeds(history)

    def median(name: str) -> float:
        return statistics.median(block[name] for block in timed)

    return {
        "steps_per_second": median("steps_per_second"),
        "seconds_per_iteration": 1.0 / median("steps_per_second"),
        "train_steps_per_second": median("train_steps_per_second"),
        "train_fraction": median("train_fraction"),
        "policy_fraction": median("policy_fraction"),
        "env_fraction": median("env_fraction"),
        "first_block_steps_per_second": history[0]["SPS"],
        "blocks": timed,
        "wall_s": seconds,
    }


def block_speeds(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The speeds of each block of ``train_eval``'s ``history`` after the first.

    A block's ``SPS`` is its environment steps over its collection and
    learning seconds and ``train_fraction`` the learner's share of those, so
    the learner's seconds are ``train_fraction * env_steps / SPS``. The first
    block has no predecessor to count its steps from (and includes tracing).
    """
    speeds = []
    for previous, entry in zip(history[:-1], history[1:], strict=True):
        env_steps = entry["env_steps"] - previous["env_steps"]
        train_steps = entry["train_step"] - previous["train_step"]
        learner_seconds = entry["train_fraction"] * env_steps / entry["SPS"]
        speeds.append(
            {
                "env_steps": env_steps,
                "train_steps": train_steps,
                "steps_per_second": entry["SPS"],
                "train_steps_per_second": train_steps / learner_seconds,
                "train_fraction": entry["train_fraction"],
                "policy_fraction": entry["policy_fraction"],
                "env_fraction": entry["env_fraction"],
            }
        )
    return speeds


def train_one(
    encoder: str, seed: int, env_steps: int, num_eval_episodes: int, root: Path, bindings: Sequence[str]
) -> dict[str, Any]:
    """Trains ``walker_walk_<encoder>.gin`` for ``env_steps`` and evaluates the greedy policy at the end."""
    root_dir = root / f"{encoder}_seed{seed}"
    results, seconds = _run(
        encoder,
        root_dir,
        [
            f"train_eval.total_env_steps = {env_steps}",
            f"train_eval.seed = {seed}",
            # 1000 random steps (Hansen & Wang), fewer only for budgets under 2000 steps.
            f"sac.initial_collect_steps = {min(1000, env_steps // 2)}",
            f"sac.replay_capacity = {min(env_steps, 100_000)}",
            # The final evaluation only (eval/ and evaluations.json).
            "train_eval.eval_interval = 0",
            f"train_eval.num_eval_episodes = {num_eval_episodes}",
            f"train_eval.log_interval = {max(env_steps // 10, 1)}",
            f"train_eval.checkpoint_interval = {env_steps}",
            "train_eval.policy_save_interval = 0",
            "train_eval.progress = False",
            *bindings,
        ],
    )
    history = results.pop("history")
    evaluation = results["evaluations"][-1]  # the final one, at env_steps
    return {
        "encoder": encoder,
        "seed": seed,
        "root_dir": str(root_dir),
        "train_wall_s": seconds,
        "env_steps": results["env_steps"],
        "eval_mean_return": evaluation["mean_return"],
        "eval_std_return": evaluation["std_return"],
        "train_average_return": results["AverageReturn"],
        "history": history,
    }


def format_tables(speeds: dict[str, dict[str, float]], runs: list[dict[str, Any]]) -> str:
    lines = []
    if speeds:
        lines += [
            "| encoder | env steps/s | learner train steps/s | learner share | policy share | env share |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for encoder, s in speeds.items():
            lines.append(
                f"| {encoder} | {s['steps_per_second']:.2f} | {s['train_steps_per_second']:.2f} | "
                f"{s['train_fraction']:.2f} | {s['policy_fraction']:.2f} | {s['env_fraction']:.2f} |"
            )
        lines.append("")
    if runs:
        lines += [
            "| encoder | env steps | seeds | eval return (greedy) | paper (500k steps) |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for encoder in dict.fromkeys(run["encoder"] for run in runs):
            mine = [run for run in runs if run["encoder"] == encoder]
            means = [run["eval_mean_return"] for run in mine]
            if len(mine) > 1:  # mean +- std over seeds of the per-seed mean returns
                cell = f"{statistics.mean(means):.1f} ± {statistics.pstdev(means):.1f}"
            else:  # one seed: mean +- std over its evaluation episodes
                cell = f"{means[0]:.1f} ± {mine[0]['eval_std_return']:.1f}"
            steps = mine[0]["env_steps"]
            lines.append(f"| {encoder} | {steps} | {len(mine)} | {cell} | {PAPER} |")
    return "\n".join(lines)


def _names(text: str) -> list[str]:
    return name_list(ENCODERS, "encoder")(text) if text else []


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoders", type=_names, default=["cnn"], help="trained; '' for none")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--env_steps", type=int, default=3000, help="training budget (agent steps)")
    parser.add_argument("--num_eval_episodes", type=int, default=5)
    parser.add_argument(
        "--speed_encoders",
        type=lambda s: name_list(ENCODERS, "encoder")(s) if s else [],
        default=list(ENCODERS),
    )
    parser.add_argument("--speed_steps", type=int, default=200, help="random steps before the timed blocks")
    parser.add_argument("--speed_iterations", type=int, default=4, help="SAC iterations per timed block")
    parser.add_argument(
        "--speed_blocks", type=int, default=2, help="blocks of the speed run; medians over all but the first"
    )
    parser.add_argument("--root", default="runs/dmc_walker", help="training runs go here (resumable)")
    parser.add_argument(
        "--gin_bindings",
        action="append",
        default=[],
        help="extra bindings for the training runs (train_eval.* and sac.*, e.g. 'sac.batch_size = 64')",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="smoke run: cnn only, 300 steps, 1 episode")
    args = parser.parse_args(argv)
    if args.quick:
        args.encoders, args.speed_encoders, args.seeds = ["cnn"], ["cnn"], "0"
        args.env_steps, args.num_eval_episodes, args.speed_steps, args.speed_iterations = 300, 1, 64, 4
    seed_list(args.seeds)
    if args.env_steps < 2:
        raise UsageError(
            f"--env_steps must be at least 2 (two steps in the replay); received {args.env_steps}."
        )
    for flag in ("num_eval_episodes", "speed_iterations"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    if args.speed_steps < 0:
        raise UsageError(f"--speed_steps must be at least 0; received {args.speed_steps}.")
    if args.speed_blocks < 2:
        raise UsageError(
            f"--speed_blocks must be at least 2 (the first includes tracing); received {args.speed_blocks}."
        )
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise UsageError(f"--root must be a folder; received {args.root!r}, a file.")
    for encoder in args.encoders:  # the configs and --gin_bindings, before anything trains
        check_gin_bindings(lambda e=encoder: _parse(e, args.gin_bindings), f"walker_walk_{encoder}.gin")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    seeds = seed_list(args.seeds)
    root = Path(args.root)

    start = time.perf_counter()
    speeds = {}
    for encoder in args.speed_encoders:
        print(f"== speed: {encoder}", flush=True)
        speeds[encoder] = measure_speed(encoder, args.speed_steps, args.speed_iterations, args.speed_blocks)
        print(
            f"   {speeds[encoder]['steps_per_second']:.2f} env steps/s, "
            f"{speeds[encoder]['train_steps_per_second']:.2f} learner train steps/s",
            flush=True,
        )
    runs = []
    for encoder in args.encoders:
        for seed in seeds:
            print(f"== train: {encoder}, seed {seed}, {args.env_steps} steps", flush=True)
            runs.append(
                train_one(encoder, seed, args.env_steps, args.num_eval_episodes, root, args.gin_bindings)
            )
            print(f"   eval return {runs[-1]['eval_mean_return']:.1f}", flush=True)
    tables = format_tables(speeds, runs)
    budget = f"{args.env_steps} training steps, seeds {seeds}" if runs else "speed only"
    print(f"\nwalker-walk from pixels, SAC ({budget}):\n\n{tables}")
    report = {
        "benchmark": "dmc_walker",
        "machine": environment(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "paper": PAPER,
        "speed": speeds,
        "runs": runs,
        "tables": tables,
        "wall_s": time.perf_counter() - start,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
