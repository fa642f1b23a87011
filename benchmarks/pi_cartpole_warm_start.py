"""Does the AttentionNeuron student lose its return at the start of each episode? Cold against warm starts.

Tang & Ha note that each sensory neuron needs some steps to interpret its
input: at an episode's start the recurrent state is zero. This benchmark
tests trained AttentionNeuron policies (``sit-train`` / ``sit-distill``
folders, ``--policy_dirs``) each on its own environment, greedy, readings in order, in two ways on
the same episodes:

- ``cold``: the state is reset at every episode's start (as deployed);
- ``warm``: the state carries over from the environment's previous episode
  (its FIRST step is passed as MID), so the neurons start the episode having
  read these sensors for a whole episode already.

Each environment's first episode is run but not counted in either, so both
count the same episodes (the environments' starts do not depend on the
policy) and every warm one starts warm. A student that loses its return to
its start state scores higher warm.

Usage::

    python benchmarks/pi_cartpole_warm_start.py --policy_dirs runs/pi_fit/dagger_e100_seed0/pi,...
        [--num_episodes 200] [--num_envs 25] [--eval_seed 1000000]
        [--out benchmarks/results/pi_cartpole_warm_start.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from sit_keras.agents.networks import policy_network
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    folder_list,
    parse_or_say_why,
    write_report,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi_cartpole  # noqa: E402  (the Table 2 tests, beside this script)

UPRIGHT = pi_cartpole.SensorTest("5 obs")
SWUNG_UP = 600  # a return above this held the pole up for most of a 1000-step episode


def summary(returns: Sequence[float]) -> dict[str, Any]:
    values = np.asarray(returns)
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "above_600": float(np.mean(values > SWUNG_UP)),
        "median": float(np.median(values)),
        "returns": [float(r) for r in values],
    }


def run(policy_dir: str, num_episodes: int, num_envs: int, eval_seed: int) -> dict[str, Any]:
    net = pi_cartpole.load_actor(policy_dir)
    if not net.state_spec:
        raise UsageError(
            f"--policy_dirs: {policy_dir!r} holds a policy without a recurrent state; nothing to warm."
        )
    env_name = policy_network.read_description(policy_dir).env_name
    results = {}
    for start, carry in (("cold", False), ("warm", True)):
        returns = pi_cartpole.run_test(
            net,
            UPRIGHT,
            num_episodes,
            num_envs,
            eval_seed,
            env_name,
            carry_state=carry,
            skip_first_episode=True,
        )
        results[start] = summary(returns)
    results["warm_minus_cold"] = results["warm"]["mean"] - results["cold"]["mean"]
    return {"env_name": env_name, "results": results}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--policy_dirs", required=True, help="comma-separated training folders")
    parser.add_argument("--num_episodes", type=int, default=200)
    parser.add_argument("--num_envs", type=int, default=25)
    parser.add_argument("--eval_seed", type=int, default=1_000_000)
    parser.add_argument("--out", default="benchmarks/results/pi_cartpole_warm_start.json")
    args = parser.parse_args(argv)
    if args.num_episodes < 1 or args.num_envs < 1:
        raise UsageError(
            "--num_episodes and --num_envs must be at least 1; "
            f"received {args.num_episodes} and {args.num_envs}."
        )
    args.policy_dirs = folder_list(
        args.policy_dirs, "policy_dirs", policy_network.DESCRIPTION_FILE, "trained policy description"
    )
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit, started = current_commit(), time.time()
    policies = {}
    for folder in args.policy_dirs:
        try:
            policies[folder] = run(folder, args.num_episodes, args.num_envs, args.eval_seed)
        except UsageError as error:
            print(error, file=sys.stderr)
            return 2
        for start in ("cold", "warm"):
            cell = policies[folder]["results"][start]
            mean, std, swung = cell["mean"], cell["std"], cell["above_600"]
            print(f"{folder} {start}: {mean:.1f} +- {std:.1f}, above {SWUNG_UP}: {swung:.2f}")
    report = {
        "what": "Each AttentionNeuron policy's greedy return with its state reset at each episode's start "
        "(cold) and carried over from the previous episode (warm), on the same episodes",
        "command": command_line("pi_cartpole_warm_start.py", argv),
        "commit": commit,
        "budget": f"{args.num_episodes} counted episodes per start, {args.num_envs} environments at a time, "
        "each environment's first episode not counted",
        "wall_seconds": time.time() - started,
        "environment": environment(),
        "policies": policies,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
