"""How often an actor that has learned nothing reaches LavaCrossing's goal: what PPO starts from (issue 24).

LavaCrossing's only reward is the goal's, so a PPO run learns nothing until its
sampled actions reach the goal by chance, and learns faster the more often they
do. This script plays actors that have learned nothing on the training levels
of the Table 4 protocol (``configs/minigrid/ppo_lavacrossing.gin``: half the
environments on N1, half on N2; the SiT paper's 14x14 observation and four
relative moves, ``agents/environments/minigrid_env.py``) and counts their
successes:

- ``--walks``: random walks that move forward (keep their heading) with the
  given probability and take each of the three other moves with a third of
  the rest; 0.25 is the uniform policy, which an actor whose logits are equal
  everywhere plays;
- ``--models``: the PPO actors of ``lavacrossing_probe.MODELS`` at their
  initialisation (one per ``--seeds``), sampling from their policies as PPO's
  collection does.

For each actor and level: episodes, successes per episode and per 100,000
environment steps (the rate at which rewards reach the learner), the share of
episodes that end in lava, the mean episode length and, for the networks, the
policy's mean entropy and probability of moving forward.

Usage::

    python benchmarks/lavacrossing_exploration.py --walks 0.25,0.55 \\
        --models cnn,sit_small_chiral_m4_corners_sharp_standardized --seeds 0,1 \\
        --out benchmarks/reference/lavacrossing_exploration.json
    python benchmarks/lavacrossing_exploration.py --walks 0.25 --models cnn --steps 2000  # a smoke run
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.agents.environments.minigrid_env import SiTMiniGrid
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    seed_list,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lavacrossing_probe import LEVELS, MODELS, NUM_ACTIONS  # noqa: E402
from ppo_noise_phase import actor_for  # noqa: E402

NUM_ENVS = 16
"""Environments played side by side, half on each level (the Table 4 protocol's 16)."""
FORWARD = 0
"""``minigrid_env.ACTIONS``: 0 is forward, the move that keeps the agent's heading."""

Policy = Callable[[np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]
"""``(E, 14, 14, 3)`` observations -> ``(E, 4)`` action probabilities and per-env measurements."""


def walk_policy(forward_probability: float) -> Policy:
    """Forward with ``forward_probability``, each other move with a third of the rest, in every state."""
    other = (1.0 - forward_probability) / (NUM_ACTIONS - 1)
    probabilities = np.full(NUM_ACTIONS, other)
    probabilities[FORWARD] = forward_probability

    def policy(observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return np.broadcast_to(probabilities, (len(observations), NUM_ACTIONS)), {}

    return policy


def network_policy(net: Any) -> Policy:
    """The policy of a TF-Agents actor network (its sampled actions), with its entropy and P(forward)."""

    @tf.function(autograph=False)
    def probabilities(observations: tf.Tensor) -> tf.Tensor:
        distribution, _ = net(observations, training=False)
        return tf.nn.softmax(tf.cast(distribution.logits, tf.float64))

    def policy(observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = probabilities(tf.constant(observations)).numpy()
        entropy = -(p * np.log(np.maximum(p, 1e-300))).sum(axis=-1)
        return p, {"entropy": entropy, "forward_probability": p[:, FORWARD]}

    return policy


def explore(policy: Policy, steps: int, rng: np.random.Generator, first_seed: int = 0) -> dict[str, Any]:
    """Plays ``policy`` for ``steps`` environment steps in all: ``NUM_ENVS`` envs, half on each of ``LEVELS``.

    Each episode is a new level: environment ``i`` draws seeds ``first_seed + i``,
    ``first_seed + i + NUM_ENVS``, ... Actions are sampled with ``rng``. Episodes
    still running when the steps run out are not counted. Returns the measurements
    of the module docstring by level name.
    """
    envs = [SiTMiniGrid(LEVELS[i * len(LEVELS) // NUM_ENVS]) for i in range(NUM_ENVS)]
    seeds = [first_seed + i for i in range(NUM_ENVS)]
    observations = np.stack([env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)])
    counts = {level: dict.fromkeys(("steps", "episodes", "successes", "lava", "truncated", "length"), 0)
              for level in LEVELS}  # fmt: skip
    sums: dict[str, dict[str, float]] = {level: {} for level in LEVELS}
    for _ in range(steps // NUM_ENVS):
        probabilities, measured = policy(observations)
        cumulative = np.cumsum(probabilities, axis=-1)
        actions = (rng.random((len(envs), 1)) > cumulative[:, :-1]).sum(axis=-1)
        for i, env in enumerate(envs):
            level = counts[env.env_id]
            level["steps"] += 1
            for name, values in measured.items():
                sums[env.env_id][name] = sums[env.env_id].get(name, 0.0) + float(values[i])
            observation, _, terminated, truncated, info = env.step(int(actions[i]))
            if terminated or truncated:
                level["episodes"] += 1
                level["length"] += env.minigrid.step_count
                level["successes"] += int(info["is_success"])
                level["lava"] += int(terminated and not info["is_success"])
                level["truncated"] += int(truncated and not terminated)
                seeds[i] += NUM_ENVS
                observation, _ = env.reset(seed=seeds[i])
            observations[i] = observation
    results = {}
    for name, level in counts.items():
        episodes = max(level["episodes"], 1)
        results[name] = {
            "steps": level["steps"],
            "episodes": level["episodes"],
            "successes": level["successes"],
            "success_per_episode": level["successes"] / episodes,
            "successes_per_100k_steps": 1e5 * level["successes"] / max(level["steps"], 1),
            "lava_share": level["lava"] / episodes,
            "truncated_share": level["truncated"] / episodes,
            "mean_episode_length": level["length"] / episodes,
            **{f"mean_{k}": v / max(level["steps"], 1) for k, v in sums[name].items()},
        }
    return results


def probability_list(text: str) -> list[float]:
    """``--walks``: comma-separated forward probabilities in [0, 1]."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--walks must be comma-separated numbers; received {text!r}.") from None
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise UsageError(f"--walks must be probabilities in [0, 1]; received {text!r}.")
    return values


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--walks", default="0.25", help="forward probabilities of random walks, comma-separated"
    )
    parser.add_argument("--models", type=name_list(list(MODELS), "--models"), default=[],
                        help=f"comma-separated, some of {', '.join(MODELS)}")  # fmt: skip
    parser.add_argument("--seeds", default="0", help="the networks' initialisation seeds, comma-separated")
    parser.add_argument("--steps", type=int, default=100_000, help="environment steps per actor, in all")
    parser.add_argument("--level_seed", type=int, default=0, help="the first level's seed (the same for all)")
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    args.walks = probability_list(args.walks)
    args.seeds = seed_list(args.seeds)
    if args.steps < NUM_ENVS:
        raise UsageError(f"--steps must be at least {NUM_ENVS} (one step of every environment); "
                         f"received {args.steps}.")  # fmt: skip
    if not args.walks and not args.models:
        raise UsageError("Give at least one actor: --walks or --models.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    actors: list[tuple[dict[str, Any], Callable[[], Policy]]] = [
        ({"actor": "walk", "forward_probability": p}, lambda p=p: walk_policy(p)) for p in args.walks
    ]
    for model in args.models:
        for seed in args.seeds:

            def build(model: str = model, seed: int = seed) -> Policy:
                tf_keras.utils.set_random_seed(seed)
                return network_policy(actor_for(model))

            actors.append(({"actor": model, "seed": seed}, build))
    runs = []
    for description, build in actors:
        began = time.perf_counter()
        levels = explore(build(), args.steps, np.random.default_rng(1), args.level_seed)
        runs.append({**description, "levels": levels, "seconds": time.perf_counter() - began})
        rates = ", ".join(
            f"{name.split('-')[1]} {r['successes_per_100k_steps']:.0f}" for name, r in levels.items()
        )
        print(f"{description}: successes per 100k steps {rates}", flush=True)
    report = {
        "what": "Successes of actors that have learned nothing on LavaCrossing's training levels (issue 24)",
        "command": command_line("lavacrossing_exploration.py", argv),
        "commit": current_commit(),
        "settings": {
            "num_envs": NUM_ENVS,
            "levels": list(LEVELS),
            "steps": args.steps,
            "level_seed": args.level_seed,
        },  # fmt: skip
        "models": {m: MODELS[m] for m in args.models},
        "runs": runs,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
