"""Where a cloned student's action error is: the teacher's saturated actions (+-1) against the rest,
and the steps since the episode's start.

A behaviour-cloning student (``sit-distill``, ``bc``) regresses the
teacher's greedy action with the squared error of its own mode (the
paper's MSE). A SAC teacher's greedy action is ``tanh`` of its mean, which
saturates at +-1 in a swing-up; a student whose mode is a ``tanh`` too has a
vanishing gradient there, so it might stop short of the teacher exactly
where the swing-up needs full force. This benchmark replays each DAgger
round the student recorded (``bc_data.npz``: the states it visited and the
teacher's actions on them) through the trained student, stream by stream
from the zero state as in training, and splits its squared error by the
teacher's action: saturated (``|a| > 0.95``) or not. It also splits the error
by the step's age in its episode (steps since the episode's FIRST step, in
the bins of ``AGE_BINS``): a swing-up happens in an episode's first few
hundred steps, the balancing after it, and each sensory neuron needs some
steps to read its input (section 4.1). The last step of an episode, whose
action the environment ignores, is left out of that split, as the loss
leaves it out.

Usage::

    python benchmarks/pi_cartpole_action_errors.py --policy_dirs runs/pi_fit/dagger_e100_seed0/pi,...
        [--out benchmarks/results/pi_cartpole_action_errors.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import itertools
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.algorithms import bc
from sit_keras.benchmarking import (
    SentenceParser,
    check_out_file,
    command_line,
    current_commit,
    environment,
    folder_list,
    parse_or_say_why,
    write_report,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi_cartpole  # noqa: E402  (loads a trained actor, beside this script)

SATURATED = 0.95
# Steps since the episode's start: [0, 10), [10, 25), ... [400, 1000); a swing-up episode has at most 1000.
AGE_BINS = (0, 10, 25, 50, 100, 200, 400, 1000)


def split_errors(student: np.ndarray, teacher: np.ndarray) -> dict[str, float]:
    """The squared error of ``student`` against ``teacher`` actions, split by the teacher's saturation."""
    error = np.square(student - teacher).reshape(-1)
    saturated = np.abs(teacher).reshape(-1) > SATURATED
    return {
        "teacher_saturated": float(saturated.mean()),
        "student_saturated": float(np.mean(np.abs(student) > SATURATED)),
        "squared_error": float(error.mean()),
        "squared_error_saturated": float(error[saturated].mean()) if saturated.any() else None,
        "squared_error_rest": float(error[~saturated].mean()) if (~saturated).any() else None,
        "share_of_error_saturated": float(error[saturated].sum() / error.sum()),
    }


def episode_ages(step_types: np.ndarray) -> np.ndarray:
    """``(E, S)`` steps since the stream's last FIRST step; -1 before a stream's first FIRST step."""
    ages = np.full(step_types.shape, -1, np.int64)
    for stream, types in enumerate(step_types):
        age = -1
        for t, step_type in enumerate(types):
            age = 0 if step_type == ts.StepType.FIRST else (age + 1 if age >= 0 else -1)
            ages[stream, t] = age
    return ages


def split_by_age(student: np.ndarray, teacher: np.ndarray, step_types: np.ndarray) -> dict[str, dict]:
    """The squared error per bin of ``AGE_BINS`` (``"0-10"``: ages 0 to 9), LAST steps left out.

    Each bin holds its ``squared_error`` (``None`` when empty) and its number of ``steps``.
    """
    error = np.square(student - teacher).reshape(step_types.shape[0], step_types.shape[1], -1).mean(-1)
    ages = episode_ages(step_types)
    counted = (ages >= 0) & (step_types != ts.StepType.LAST)
    bins = {}
    for low, high in itertools.pairwise(AGE_BINS):
        inside = counted & (ages >= low) & (ages < high)
        bins[f"{low}-{high}"] = {
            "squared_error": float(error[inside].mean()) if inside.any() else None,
            "steps": int(inside.sum()),
        }
    return bins


def replay(policy_dir: str) -> list[dict[str, Any]]:
    """Per recorded round, the trained student's action error on it (``split_errors``, ``by_episode_age``)."""
    net = pi_cartpole.load_actor(policy_dir)
    rounds = bc.load_rounds(os.path.join(policy_dir, bc.DATA_FILE))
    # One graph for the whole stream: eagerly, a recurrent network steps through it in Python.
    modes = tf.function(
        lambda observations, step_types, state: net.call(observations, step_types, state)[0].mode()
    )
    results = []
    for data in rounds:
        streams, _, inputs = data.observations.shape
        state = net.initial_state(streams, inputs) if net.state_spec else ()
        student = modes(tf.constant(data.observations), tf.constant(data.step_types), state)
        errors = split_errors(student.numpy(), data.actions)
        errors["by_episode_age"] = split_by_age(student.numpy(), data.actions, data.step_types)
        results.append(errors)
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--policy_dirs", required=True, help="comma-separated behaviour-cloning folders")
    parser.add_argument("--out", default="benchmarks/results/pi_cartpole_action_errors.json")
    args = parser.parse_args(argv)
    args.policy_dirs = folder_list(args.policy_dirs, "policy_dirs", bc.DATA_FILE, "recorded teacher data")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit, started = current_commit(), time.time()
    policies: dict[str, Any] = {}
    for folder in args.policy_dirs:
        policies[folder] = replay(folder)
        for i, result in enumerate(policies[folder]):
            print(
                f"{folder} round {i}: teacher saturated {result['teacher_saturated']:.2f}, squared error "
                f"saturated {result['squared_error_saturated']:.3f}, rest {result['squared_error_rest']:.3f}"
            )
            ages = ", ".join(
                f"{name} {cell['squared_error']:.3f}"
                for name, cell in result["by_episode_age"].items()
                if cell["squared_error"] is not None
            )
            print(f"    by steps since the episode's start: {ages}")
    report = {
        "what": "Each cloned student's squared action error on the rounds it recorded, split by whether the "
        f"teacher's action is saturated (|a| > {SATURATED}) and by the steps since the episode's start "
        f"(bins {list(AGE_BINS)}, last steps left out)",
        "command": command_line("pi_cartpole_action_errors.py", argv),
        "commit": commit,
        "wall_seconds": time.time() - started,
        "environment": environment(),
        "policies": policies,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
