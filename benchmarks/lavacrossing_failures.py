"""How a LavaCrossing policy fails: lava or the time limit, and how soon (issue 24).

A Table 4 row's success rate does not say why the other episodes failed. In
LavaCrossing an episode ends in one of three ways (MiniGrid's rules,
``agents/environments/minigrid_env.py``): the goal (success), lava (the episode
terminates with reward 0 before ``max_steps``), or the time limit (``max_steps``
reached without either; the reward is 0). A policy that walks into lava
within a few steps of the start misreads what is next to it; one that
reaches the time limit goes round in circles, as a greedy policy does on
states it aliases.

For a ``sit-train`` / ``minigrid_rotation.py`` run folder this replays the
greedy and the sampling policy (``<root_dir>/policies/greedy_policy`` and
``policy``, newest weights) on the upright rows of Table 4 with the same
environments, seeds and episode split as ``minigrid_rotation.py``'s
evaluation (``agents.evaluate``: 8 environments seeded from 1,000,000), so the
greedy policy plays the evaluation's episodes (its success rate equals the
evaluation's for the same weights and episode count; the sampling policy's
draws differ from run to run), and counts each outcome, with the steps at
which the lava episodes ended.

Usage::

    python benchmarks/lavacrossing_failures.py \\
        --root_dir runs/table4_ro_forward/siet_rotation_pooled_no_triangles_seed1 \\
        --num_episodes 200 --out runs/failures_seed1.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium

from sit_keras.agents import evaluate
from sit_keras.agents.environments import load, minigrid_env
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)

ROWS = {
    "train: easy": "minigrid:LavaCrossingS9N1",
    "train: medium": "minigrid:LavaCrossingS9N2",
    "hard": "minigrid:LavaCrossingS9N3",
}
"""Table 4's upright rows (``minigrid_rotation.py``'s names) and their environments."""

POLICIES = {"greedy": "greedy_policy", "sampling": "policy"}
EARLY_STEPS = 10
"""A lava episode that ends within this many steps counts as an early one."""


def max_steps_of(env_name: str) -> int:
    """MiniGrid's time limit of ``minigrid:<task>`` (``4 * size**2`` for LavaCrossing)."""
    task = minigrid_env.task_id(env_name.split(":", 1)[1])
    return int(gymnasium.make(task, disable_env_checker=True).unwrapped.max_steps)


def outcome(episode: Mapping[str, Any], max_steps: int) -> str:
    """``"success"``, ``"time limit"`` (``max_steps`` reached) or ``"lava"`` (ended sooner, no goal)."""
    if episode["success"]:
        return "success"
    return "time limit" if episode["length"] >= max_steps else "lava"


def summarize_outcomes(episodes: Sequence[Mapping[str, Any]], max_steps: int) -> dict[str, Any]:
    """The share of each outcome and the steps at which the lava episodes ended."""
    kinds = [outcome(e, max_steps) for e in episodes]
    lava_steps = sorted(e["length"] for e, kind in zip(episodes, kinds, strict=True) if kind == "lava")
    n = len(episodes)
    return {
        "episodes": n,
        "success": kinds.count("success") / n,
        "lava": kinds.count("lava") / n,
        "time_limit": kinds.count("time limit") / n,
        "lava_within_early_steps": sum(s <= EARLY_STEPS for s in lava_steps) / n,
        "lava_median_step": statistics.median(lava_steps) if lava_steps else None,
        "lava_steps": lava_steps,
        "max_steps": max_steps,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True, help="a run folder with policies/ (sit-train's)")
    parser.add_argument("--num_episodes", type=int, default=200, help="episodes per row and policy")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows of " + ", ".join(ROWS))
    parser.add_argument("--out", help="write the report (JSON) here")
    args = parser.parse_args(argv)
    if args.num_episodes < 1:
        raise UsageError(f"--num_episodes must be >= 1; received {args.num_episodes}.")
    rows = [row.strip() for row in args.rows.split(",")]
    unknown = [row for row in rows if row not in ROWS]
    if unknown:
        raise UsageError(f"Unknown --rows {', '.join(unknown)}; valid rows: {', '.join(ROWS)}.")
    args.rows = rows
    policies = os.path.join(args.root_dir, "policies")
    missing = [name for name in POLICIES.values() if not os.path.isdir(os.path.join(policies, name))]
    if missing:
        raise UsageError(
            f"{args.root_dir} holds no policies/{missing[0]}: pass a run folder that sit-train or "
            "minigrid_rotation.py trained."
        )
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for kind, saved in POLICIES.items():
        policy_dir = os.path.join(args.root_dir, "policies", saved)
        try:
            policy = evaluate.load_policy(policy_dir)
        except (OSError, ValueError) as error:  # missing or damaged SavedModel: one sentence, no traceback
            print(f"lavacrossing_failures.py: cannot load {policy_dir}: {error}", file=sys.stderr)
            return 2
        results[kind] = {}
        for row in args.rows:
            env_name = ROWS[row]
            # agents.evaluate's environments and seed: the episodes of minigrid_rotation.py's evaluation.
            env = load(env_name, num_envs=8, seed=1_000_000)
            try:
                episodes = evaluate.run_episodes(policy, env, args.num_episodes)
            finally:
                env.close()
            summary = summarize_outcomes(episodes, max_steps_of(env_name))
            results[kind][row] = summary
            print(
                f"{kind:8s} {row:14s} success {summary['success']:.2f}  lava {summary['lava']:.2f} "
                f"(within {EARLY_STEPS} steps {summary['lava_within_early_steps']:.2f})  "
                f"time limit {summary['time_limit']:.2f}",
                flush=True,
            )
    if args.out:
        report = {
            "what": "How a LavaCrossing policy's episodes end (goal, lava, time limit) on Table 4's rows",
            "command": command_line(Path(__file__).name, argv),
            "commit": current_commit(),
            "root_dir": args.root_dir,
            "num_episodes": args.num_episodes,
            "early_steps": EARLY_STEPS,
            "results": results,
            "seconds": round(time.perf_counter() - start, 1),
            "environment": environment(),
        }
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
