"""Table 2's columns over the paper's 1000 test episodes, each column in one batched loop.

``pi_cartpole_distill.py`` tests a policy in the package's environment, one
step of 25 carts at a time, so 200 episodes a column is what fits in minutes.
Tang & Ha test on 1000, and at 200 a mean of these all-or-nothing returns has a
standard error near 30 (5% of the teacher). This script plays the teacher and
each sensory-neuron student on the same ``--episodes`` starts of
CartPoleSwingUpHarder at once, in the batched cart-pole of
``pi_cartpole_es.py`` (the package's equations of motion in float64, checked
against the package step by step in its tests), greedy:

- "5 obs" for every policy, and "5 obs (shuffled)": one fixed permutation of the
  readings (the MLP teacher collapses; a student is exactly invariant);
- for the students only, "10 obs" (each reading twice) and "5 obs + 5 noise"
  (``--noise_channels`` channels of N(0, 0.1^2) beside the readings), and
  "5 obs, memory reset at step 500": the student's recurrent state is set back to
  zero as the second half starts, while the cart plays on (not a paper column: it
  shows how much of holding the pole rests on what the neurons remember);
- for the students only, Table 6's "reshuffle every t" for each t of
  ``--reshuffles``: each episode's readings in an order of its own, drawn again
  every t steps.

Each student's mean is also given as a share of the teacher's "5 obs" mean on the
same starts, with the standard error of that share from the paired per-start
differences, and each column's cost against the student's own "5 obs" likewise.
Each episode's length is kept as well, so the report says where the return is
lost: how many episodes left the track and at which step (quartiles), which
starts a student loses where the teacher keeps them (and the reverse), and how
the whole episodes went (their return, the reward a step in their second half,
when the pole was first up, how much of the second half it was up and how often it
fell there). The teacher also labels the states each student reaches with the pole
up: what it would do there, beside what the student does.

Usage::

    python benchmarks/pi_cartpole_batched_eval.py \\
        --teacher_dir benchmarks/teachers/cartpole_swingup_harder_sac \\
        --pi_dirs runs/pi_es/seed0,runs/pi_es/seed1,runs/pi_es/seed2 --out test_1000.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from sit_keras.agents.environments import cartpole_swingup, sensor_permutation
from sit_keras.agents.networks import policy_network
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi_cartpole_es  # noqa: E402  (the batched cart-pole, beside this script)

KEPT_RETURN = 50.0
"""A return below this means the cart left the track early (the docs' "kept starts" split)."""
MEMORY_RESET = f"5 obs, memory reset at step {cartpole_swingup.MAX_STEPS // 2}"
"""A student's column whose recurrent state is reset as the second half starts (the cart plays on)."""
FAST_START = 5.0
"""A start whose cart moves at least this fast (m/s) must be braked first (``braking_on_fast_starts``)."""


def quartiles(lengths: np.ndarray) -> list[float] | None:
    """The quartiles of some episodes' lengths, or None for no episode."""
    return np.percentile(lengths, [25, 50, 75]).tolist() if len(lengths) else None


def summary(
    outcome: pi_cartpole_es.Outcomes, fast: np.ndarray | None = None, labelled: bool = False
) -> dict[str, Any]:
    """One column: mean, sample std, standard error of the mean, the share of kept starts,
    how many episodes left the track before the end, at which step (quartiles), and of the
    others (whole episodes) the mean return, the reward a step in their second half and the
    median step at which the pole was first up, the share of their second half with the pole
    up and how often it fell there; ``from_upright``: the actions taken where the pole was up
    (with ``labelled``, beside the teacher's on the same states). With ``fast`` (a mask of the
    starts), how hard the policy pushes those carts in each of ``BRAKING_WINDOWS``: against the
    cart's velocity (1: full braking) and either way (1: full force), on average over them."""
    returns, lengths = outcome.returns, outcome.lengths
    ended = lengths < cartpole_swingup.MAX_STEPS
    whole = ~ended
    half = cartpole_swingup.MAX_STEPS - cartpole_swingup.MAX_STEPS // 2
    return {
        "mean": float(returns.mean()),
        "std": float(returns.std(ddof=1)),
        "standard_error": float(returns.std(ddof=1) / np.sqrt(len(returns))),
        "kept_share": float(np.mean(returns >= KEPT_RETURN)),
        "ended_early_share": float(ended.mean()),
        "ended_at_step_quartiles": quartiles(lengths[ended]),
        "whole_episode_mean": float(returns[whole].mean()) if whole.any() else None,
        "second_half_reward_per_step": float(outcome.second_half_returns[whole].mean() / half)
        if whole.any()
        else None,
        "first_upright_median": float(np.median(outcome.first_upright[whole])) if whole.any() else None,
        "second_half_upright_share": float(outcome.second_half_upright[whole].mean() / half)
        if whole.any()
        else None,
        "second_half_drops_mean": float(outcome.second_half_drops[whole].mean()) if whole.any() else None,
        "from_upright": from_upright(outcome.upright_actions, labelled),
        **(
            {}
            if fast is None or not fast.any()
            else {
                f"{name}_on_fast_starts": {
                    f"steps {a}-{b}": float(values[fast, k].mean())
                    for k, (a, b) in enumerate(pi_cartpole_es.BRAKING_WINDOWS)
                }
                for name, values in (("braking", outcome.braking), ("force", outcome.force))
            }
        ),
    }


def from_upright(sums: np.ndarray, labelled: bool) -> dict[str, float] | None:
    """Pooled over every episode's steps from a state with the pole up (``Outcomes.upright_actions``):
    their number and the mean ``|a|``; with ``labelled``, also the teacher's mean ``|a|`` on those
    states and the mean ``|a - a_teacher|``."""
    steps = float(sums[:, 0].sum())
    if not steps:
        return None
    means = sums[:, 1:].sum(axis=0) / steps
    result = {"steps": int(steps), "mean_abs_action": float(means[0])}
    if labelled:
        result |= {"teacher_mean_abs_action": float(means[1]), "mean_abs_error": float(means[2])}
    return result


def against_teacher(lengths: np.ndarray, teacher_lengths: np.ndarray) -> dict[str, Any]:
    """Where a student's episodes end early and the teacher's do not, on the same starts, and the reverse."""
    whole = cartpole_swingup.MAX_STEPS
    lost = (lengths < whole) & (teacher_lengths == whole)
    return {
        "lost_where_teacher_kept": int(lost.sum()),
        "lost_at_step_quartiles": quartiles(lengths[lost]),
        "kept_where_teacher_lost": int(((lengths == whole) & (teacher_lengths < whole)).sum()),
    }


def paired_share(returns: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """``mean(returns) / mean(reference)`` on the same starts, and its standard error.

    The error is that of the per-start differences, divided by the reference's
    mean: the starts' own spread, shared by both, cancels.
    """
    base = float(reference.mean())
    differences = returns - reference
    return {
        "share": float(returns.mean()) / base,
        "standard_error": float(differences.std(ddof=1) / np.sqrt(len(returns))) / base,
    }


def load_policy(folder: str):
    """The greedy actor network of a training folder (its ``policy_network.json`` and checkpoint)."""
    description = policy_network.read_description(folder)
    net = policy_network.build_network(description)
    policy_network.restore_network(net, folder, description.checkpoint_attribute)
    return net


def play_columns(
    net, starts: tf.Tensor, seed: tf.Tensor, columns: dict[str, dict[str, Any]]
) -> dict[str, pi_cartpole_es.Outcomes]:
    """Each column's ``Outcomes``, in NumPy; ``columns``: name -> ``episode_outcomes`` kwargs."""
    outcomes = {}
    for name, options in columns.items():
        outcome = pi_cartpole_es.episode_outcomes(net, **options)(starts, seed)
        outcomes[name] = pi_cartpole_es.Outcomes(*(part.numpy() for part in outcome))
    return outcomes


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher_dir", required=True, help="the teacher's training folder (5 readings)")
    parser.add_argument(
        "--pi_dirs", required=True, help="comma-separated training folders of sensory-neuron students"
    )
    parser.add_argument("--episodes", type=int, default=1000, help="test starts, the same for every policy")
    parser.add_argument(
        "--test_seed", type=int, default=1000,
        help="draws the starts, the permutation and the noise (ES draws its starts from --seed and 7)",
    )  # fmt: skip
    parser.add_argument("--noise_channels", type=int, default=5)
    parser.add_argument(
        "--reshuffles", default=",".join(map(str, sensor_permutation.TABLE6_RESHUFFLE_STEPS)),
        help="Table 6's reshuffle intervals in steps, comma-separated ('' for none)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        raise UsageError(f"--episodes must be at least 2; received {args.episodes}.")
    if args.noise_channels < 1:
        raise UsageError(f"--noise_channels must be at least 1; received {args.noise_channels}.")
    try:
        args.reshuffles = [int(t) for t in args.reshuffles.split(",") if t.strip()]
    except ValueError:
        raise UsageError(
            f"--reshuffles must be whole numbers of steps; received {args.reshuffles!r}."
        ) from None
    if any(t < 1 for t in args.reshuffles):
        raise UsageError(f"--reshuffles must be at least 1 step each; received {args.reshuffles}.")
    pi_cartpole_es.trained_cartpole_folder("--teacher_dir", args.teacher_dir)
    args.pi_dirs = pi_cartpole_es.student_folders("--pi_dirs", args.pi_dirs)
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    command, commit = command_line("pi_cartpole_batched_eval.py", argv), current_commit()
    start = time.perf_counter()
    rng = np.random.default_rng(args.test_seed)
    starts = tf.constant(pi_cartpole_es.initial_states(rng, args.episodes))
    permutation = [int(i) for i in rng.permutation(5)]
    while permutation == list(range(5)):  # a shuffle that leaves every reading in place tests nothing
        permutation = [int(i) for i in rng.permutation(5)]
    seed = tf.constant(rng.integers(0, 2**31 - 1, size=2), tf.int32)
    fast = np.abs(starts.numpy()[:, 1]) >= FAST_START
    teacher_columns = {"5 obs": {}, "5 obs (shuffled)": {"sensor_order": permutation}}
    student_columns = {
        **teacher_columns,
        "10 obs": {"sensor_order": [*range(5), *range(5)]},
        "5 obs + 5 noise": {"noise_channels": args.noise_channels},
        MEMORY_RESET: {"reset_at": cartpole_swingup.MAX_STEPS // 2},
        **{f"reshuffle every {t}": {"reshuffle_every": t} for t in args.reshuffles},
    }
    teacher_net = load_policy(args.teacher_dir)
    teacher = play_columns(teacher_net, starts, seed, teacher_columns)
    results: dict[str, Any] = {"teacher": {name: summary(outcome, fast) for name, outcome in teacher.items()}}
    print("teacher", {name: round(r["mean"], 1) for name, r in results["teacher"].items()}, flush=True)
    for folder in args.pi_dirs:
        # The teacher labels the states each student reaches upright: what it would do there.
        labelled = {**student_columns, "5 obs": {"labeller": teacher_net}}
        outcomes = play_columns(load_policy(folder), starts, seed, labelled)
        results[folder] = {
            name: {
                **summary(outcome, fast, labelled="labeller" in labelled[name]),
                "over_teacher": paired_share(outcome.returns, teacher["5 obs"].returns),
                "over_own_upright": paired_share(outcome.returns, outcomes["5 obs"].returns),
                "against_teacher": against_teacher(outcome.lengths, teacher["5 obs"].lengths),
            }
            for name, outcome in outcomes.items()
        }
        print(
            folder,
            {name: round(r["mean"], 1) for name, r in results[folder].items()},
            "student/teacher",
            round(results[folder]["5 obs"]["over_teacher"]["share"], 3),
            flush=True,
        )
    if args.out:
        report = {
            "what": "Table 2's columns on shared test starts (benchmarks/pi_cartpole_batched_eval.py)",
            "command": command,
            "commit": commit,
            "environment": environment(),
            "wall_seconds": time.perf_counter() - start,
            "settings": {**vars(args), "permutation": permutation},
            "results": results,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
