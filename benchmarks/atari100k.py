"""The SiT paper's Table 3 protocol: Atari 100k with data-efficient Rainbow settings, CNN vs SieT.

For each game, model (``configs/atari/<game>_<model>.gin``: C51 with the
settings of data-efficient Rainbow, see ``configs/atari/dqn.gin``) and seed,
``train_eval`` (sit-train's, ``train_eval.agent = 'dqn'``) trains for
``--agent_steps`` agent steps (``train_eval.total_env_steps``; the protocol:
100,000 = 400,000 frames) and evaluates the epsilon-greedy policy
(epsilon 0.001) on whole games every tenth of the budget. The score of a run
is the mean evaluation return after 80%, 90% and 100% of the budget (Table 3:
"averaged over evaluation after 80k, 90k, 100k train-steps and 3 seeds");
the table shows mean +- std over seeds beside the paper's numbers.

Usage (slow: 100k steps take hours with the CNN and days with SieT on 2 CPU cores)::

    python benchmarks/atari100k.py --games pong,breakout,spaceinvaders --models cnn,siet \\
        --seeds 0,1,2 --out benchmarks/results/atari100k.json          # the protocol
    python benchmarks/atari100k.py --games pong --models cnn --agent_steps 10000 \\
        --eval_episodes 4                                               # a CPU budget
    python benchmarks/atari100k.py --quick       # smoke run: CNN on Pong, 2000 steps
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import os
import statistics
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

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "atari100k.json"
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "atari"
GAMES = {
    "spaceinvaders": "SpaceInvaders",
    "breakout": "Breakout",
    "pong": "Pong",
    "kungfumaster": "KungFuMaster",
    "mspacman": "MsPacman",
}
MODELS = ("cnn", "siet")
# SiT paper, Table 3 ("Rainbow - data-efficient", 100k steps, 3 seeds). KungFuMaster and
# MsPacman are only in Figures 12-13 (IRIS with a SieT actor, curves, no Rainbow numbers).
PAPER = {
    ("spaceinvaders", "cnn"): 344.0,
    ("spaceinvaders", "siet"): 366.3,
    ("breakout", "cnn"): 4.3,
    ("breakout", "siet"): 4.97,
    ("pong", "cnn"): -19.07,
    ("pong", "siet"): -20.04,
}
# Uniformly random policy, the reference row of the Atari 100k tables (Kaiser et al. 2020,
# van Hasselt et al. 2019).
RANDOM = {"spaceinvaders": 148.0, "breakout": 1.7, "pong": -20.7, "kungfumaster": 258.5, "mspacman": 307.3}


def _parse(game: str, model: str, bindings: Sequence[str]) -> None:
    """``configs/atari/<game>_<model>.gin`` and ``bindings`` through sit-train's parser, on a clear config."""
    gin.clear_config()
    train.parse_gin([str(CONFIGS / f"{game}_{model}.gin")], list(bindings))


def run_one(game: str, model: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Trains and evaluates one (game, model, seed); returns its score, evaluations and speeds."""
    steps = args.agent_steps
    bindings = [
        f"train_eval.total_env_steps = {steps}",
        f"dqn.replay_capacity = {min(steps, 100_000)}",
        f"train_eval.eval_interval = {max(steps // 10, 1)}",
        f"train_eval.num_eval_episodes = {args.eval_episodes}",
        f"train_eval.eval_num_envs = {min(args.eval_episodes, 2)}",
        f"train_eval.log_interval = {args.log_interval}",
        f"train_eval.checkpoint_interval = {steps}",
        "train_eval.policy_save_interval = 0",
        f"train_eval.seed = {seed}",
        f"train_eval.progress = {not args.no_progress}",
        *args.gin_bindings,
    ]
    _parse(game, model, bindings)
    root_dir = Path(args.root) / f"{game}_{model}_seed{seed}"
    start = time.perf_counter()
    try:
        results = train.train_eval(str(root_dir))
    finally:
        gin.clear_config()
    seconds = time.perf_counter() - start
    evaluations = results["evaluations"]
    # Table 3: the evaluations after 80%, 90% and 100% of the budget (env_steps: agent steps).
    last = [e for e in evaluations if e["env_steps"] >= 0.8 * steps - 1][-3:]
    history = results["history"]
    learning = [h for h in history if h["train_step"] > 0]
    return {
        "game": game,
        "model": model,
        "seed": seed,
        "root_dir": str(root_dir),
        "score": statistics.mean(e["mean_return"] for e in last),
        "scored_evaluations": [e["env_steps"] for e in last],
        "evaluations": [{k: v for k, v in e.items() if k != "returns"} for e in evaluations],
        "wall_s": seconds,
        "eval_s": sum(e["seconds"] for e in evaluations),
        # Agent steps per second while learning (one C51 update per agent step), and overall.
        "learning_sps": statistics.median(h["SPS"] for h in learning) if learning else None,
        "overall_sps": steps / seconds,
        "train_fraction": statistics.median(h["train_fraction"] for h in learning) if learning else None,
    }


def _mean_std(values: Sequence[float]) -> str:
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def format_table(runs: Sequence[dict[str, Any]], agent_steps: int) -> str:
    lines = [
        f"| game | model | ours ({agent_steps} steps) | seeds | paper (100k, Table 3) | random "
        "| learning steps/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    keys = dict.fromkeys((r["game"], r["model"]) for r in runs)
    for game, model in keys:
        group = [r for r in runs if (r["game"], r["model"]) == (game, model)]
        paper = PAPER.get((game, model))
        speeds = [r["learning_sps"] for r in group if r["learning_sps"]]
        cells = [
            GAMES[game],
            model,
            _mean_std([r["score"] for r in group]),
            str(len(group)),
            "n/a" if paper is None else str(paper),
            str(RANDOM[game]),
            f"{statistics.mean(speeds):.1f}" if speeds else "n/a",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--games", type=name_list(tuple(GAMES), "game"), default=["pong", "breakout", "spaceinvaders"]
    )
    parser.add_argument("--models", type=name_list(MODELS, "model"), default=list(MODELS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--agent_steps", type=int, default=100_000, help="training budget (the protocol: 100k)"
    )
    parser.add_argument("--eval_episodes", type=int, default=10, help="whole games per evaluation")
    parser.add_argument("--log_interval", type=int, default=1000, help="agent steps between speed samples")
    parser.add_argument("--root", default="runs/atari100k", help="training runs go here (resumable)")
    parser.add_argument(
        "--gin_bindings",
        action="append",
        default=[],
        help="extra bindings for every run (train_eval.* and dqn.*, e.g. 'dqn.n_step = 10')",
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")
    parser.add_argument("--note", default="", help="what this run is for (kept in the JSON)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="smoke run: CNN on Pong, seed 0, 2000 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.games, args.models, args.seeds, args.agent_steps, args.eval_episodes = (
            ["pong"],
            ["cnn"],
            "0",
            2000,
            2,
        )
    if args.agent_steps < 10:
        raise UsageError(f"--agent_steps must be >= 10 (ten evaluations); received {args.agent_steps}.")
    for flag in ("eval_episodes", "log_interval"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    seed_list(args.seeds)
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise UsageError(f"--root must be a folder; received {args.root!r}, a file.")
    for game in args.games:  # the configs and --gin_bindings, before anything trains
        for model in args.models:
            check_gin_bindings(lambda g=game, m=model: _parse(g, m, args.gin_bindings), f"{game}_{model}.gin")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    seeds = seed_list(args.seeds)
    machine = environment()  # its load average is the one at the start

    runs = []
    for game in args.games:
        for model in args.models:
            for seed in seeds:
                print(f"== {GAMES[game]}, {model}, seed {seed}: {args.agent_steps} agent steps", flush=True)
                runs.append(run_one(game, model, seed, args))
                print(f"   score {runs[-1]['score']:.2f}, {runs[-1]['wall_s']:.0f} s", flush=True)
    table = format_table(runs, args.agent_steps)
    reached = (
        "the protocol's" if args.agent_steps >= 100_000 else f"NOT the protocol's (100k); {args.agent_steps}"
    )
    print(
        f"\nScore: mean evaluation return after 80/90/100% of the budget ({reached} agent steps), "
        f"mean ± std over seeds {seeds}:\n\n{table}"
    )
    report = {
        "benchmark": "atari100k",
        "machine": machine,
        "load_average_end": list(os.getloadavg()),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "paper_table_3": {f"{g}/{m}": v for (g, m), v in PAPER.items()},
        "random": RANDOM,
        "runs": runs,
        "table": table,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
