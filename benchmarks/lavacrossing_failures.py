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

For the time-limit episodes it also says how the policy loops: the period of
the cycle that their last ``LOOP_TAIL`` observations repeat (the levels are
static and fully observed, so a repeated observation is a repeated state;
period 1 is the agent pressing into something that does not let it move),
and in how many of the loops the agent, in some state of the cycle, stands on
the edge of the observation facing out, i.e. into the outer wall that
``crop_border`` leaves out of the image (docs/lavacrossing.md, "The edge of
the map").

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
import numpy as np
from minigrid.core.constants import DIR_TO_VEC
from tf_agents.trajectories.time_step import StepType

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
LOOP_TAIL = 40
"""The last observations of a time-limit episode searched for a cycle."""
MAX_PERIOD = LOOP_TAIL // 2
"""The longest cycle looked for (it must repeat at least twice in the tail)."""


class EpisodeTraces:
    """Each environment's observations, episode by episode: an ``agents.evaluate.run_episodes`` observer.

    ``finished[i]`` lists environment ``i``'s ended episodes in the order they
    ended, each as its observations from the first to the last, so the ``k``-th
    of them is the ``k``-th episode that ``run_episodes`` reports for ``i``.
    """

    def __init__(self, num_envs: int):
        self.current: list[list[np.ndarray]] = [[] for _ in range(num_envs)]
        self.finished: list[list[list[np.ndarray]]] = [[] for _ in range(num_envs)]

    def __call__(self, time_step: Any) -> None:
        observations = np.asarray(time_step.observation)
        for i, kind in enumerate(np.asarray(time_step.step_type).reshape(-1)):
            if kind == StepType.FIRST:
                self.current[i] = []
            self.current[i].append(observations[i].copy())
            if kind == StepType.LAST:
                self.finished[i].append(self.current[i])

    def of(self, episodes: Sequence[Mapping[str, Any]]) -> list[list[np.ndarray]]:
        """The observations of each of ``episodes`` (``run_episodes``' records), in their order."""
        seen = [0] * len(self.finished)
        traces = []
        for episode in episodes:
            i = episode["env"]
            trace = self.finished[i][seen[i]]
            seen[i] += 1
            if len(trace) != episode["length"] + 1:
                raise RuntimeError(
                    f"environment {i}'s episode {seen[i]} has {len(trace)} observations for "
                    f"{episode['length']} steps: the traces do not match the episodes."
                )
            traces.append(trace)
        return traces


def cycle_period(trace: Sequence[np.ndarray]) -> int | None:
    """The shortest period (up to ``MAX_PERIOD``) with which the last ``LOOP_TAIL`` observations repeat."""
    tail = [o.tobytes() for o in trace[-LOOP_TAIL:]]
    for period in range(1, MAX_PERIOD + 1):
        if all(tail[i] == tail[i + period] for i in range(len(tail) - period)):
            return period
    return None


def agent_pose(observation: np.ndarray) -> tuple[int, int, int]:
    """``(column, row, heading)`` of the agent in a 14x14 observation of 2x2-pixel cells.

    The agent's pixels are the only grey-and-red blends (red above equal green
    and blue; lava's green and blue differ); its heading (MiniGrid's: 0 east,
    1 south, 2 west, 3 north) is the half of its cell that is less red: the
    triangle's point (its base covers more of the other half).
    """
    image = np.asarray(observation, np.float64)
    red, green, blue = image[..., 0], image[..., 1], image[..., 2]
    redness = np.where(green == blue, red - green, 0.0)
    cells = redness.shape[0] // 2
    row, column = np.unravel_index(
        np.argmax(redness.reshape(cells, 2, cells, 2).sum(axis=(1, 3))), (cells,) * 2
    )
    block = redness[2 * row : 2 * row + 2, 2 * column : 2 * column + 2]
    halves = [block[:, 1].sum(), block[1, :].sum(), block[:, 0].sum(), block[0, :].sum()]
    return int(column), int(row), int(np.argmin(halves))


def faces_the_edge(observation: np.ndarray) -> bool:
    """Whether the cell ahead of the agent lies outside the observation (the cropped wall ring)."""
    column, row, heading = agent_pose(observation)
    dx, dy = DIR_TO_VEC[heading]
    cells = np.asarray(observation).shape[0] // 2
    return not (0 <= column + dx < cells and 0 <= row + dy < cells)


def summarize_loops(traces: Sequence[Sequence[np.ndarray]]) -> dict[str, Any]:
    """Time-limit episodes by the period of their final cycle, and the cycles with a state facing the edge."""
    periods = [cycle_period(trace) for trace in traces]
    counts: dict[str, int] = {}
    at_edge: dict[str, int] = {}
    for trace, period in sorted(zip(traces, periods, strict=True), key=lambda t: t[1] or MAX_PERIOD + 1):
        key = "none" if period is None else str(period)
        counts[key] = counts.get(key, 0) + 1
        if period is not None and any(faces_the_edge(o) for o in trace[-period:]):
            at_edge[key] = at_edge.get(key, 0) + 1
    return {"time_limit_episodes": len(traces), "cycle_periods": counts, "cycles_facing_the_edge": at_edge}


def max_steps_of(env_name: str) -> int:
    """MiniGrid's time limit of ``minigrid:<task>`` (``4 * size**2`` for LavaCrossing)."""
    task = minigrid_env.task_id(env_name.split(":", 1)[1])
    return int(gymnasium.make(task, disable_env_checker=True).unwrapped.max_steps)


def outcome(episode: Mapping[str, Any], max_steps: int) -> str:
    """``"success"``, ``"time limit"`` (``max_steps`` reached) or ``"lava"`` (ended sooner, no goal)."""
    if episode["success"]:
        return "success"
    return "time limit" if episode["length"] >= max_steps else "lava"


def summarize_outcomes(
    episodes: Sequence[Mapping[str, Any]], max_steps: int, traces: Sequence[Sequence[np.ndarray]]
) -> dict[str, Any]:
    """The share of each outcome, the steps at which the lava episodes ended and the time limit's loops."""
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
        "time_limit_loops": summarize_loops(
            [trace for trace, kind in zip(traces, kinds, strict=True) if kind == "time limit"]
        ),
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
            traces = EpisodeTraces(env.batch_size)
            try:
                episodes = evaluate.run_episodes(policy, env, args.num_episodes, observer=traces)
            finally:
                env.close()
            summary = summarize_outcomes(episodes, max_steps_of(env_name), traces.of(episodes))
            results[kind][row] = summary
            print(
                f"{kind:8s} {row:14s} success {summary['success']:.2f}  lava {summary['lava']:.2f} "
                f"(within {EARLY_STEPS} steps {summary['lava_within_early_steps']:.2f})  "
                f"time limit {summary['time_limit']:.2f} (cycle periods "
                f"{summary['time_limit_loops']['cycle_periods']}, of them facing the edge in some state "
                f"{summary['time_limit_loops']['cycles_facing_the_edge']})",
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
