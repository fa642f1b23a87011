"""How well a sensory-neuron student fits its recorded rounds, against how it acts in its own episodes.

A DAgger student (``pi_cartpole_distill.py``) is trained on the recorded
rounds of its run (``bc_data.npz``): the states whoever acted reached, each
labelled with the teacher's action. This script replays each round's
recorded streams through the trained student (greedy, its recurrent state
carried along each stream, its own mode as its previous action, as when it
acts) and compares its action with the teacher's label; then it plays the
student's own episodes on ``--episodes`` starts of CartPoleSwingUpHarder
(the batched cart-pole of ``pi_cartpole_es.py``) with the teacher labelling
every state it reaches, and compares the same way.

Both are reported over the steps with the pole up (cos > 0.95, where the
students lose most of the teacher's return) and over every step: the mean
``|a|``, ``|a_label|``, ``|a - a_label|`` and how often the two push the same
way. A student that fits its recorded rounds but not its own episodes acts
differently on its own trajectories than on those of whoever recorded them.
Where the rounds keep the executed actions (``bc_data.npz`` since
``bc.previous_action`` exists), the rounds are also replayed with those as the
student's previous actions (``recorded_rounds_executed``): the input a student
trained with ``bc.previous_action = "executed"`` was fitted on.
With ``--noise_channels K``, the student reads ``K`` channels of N(0, 0.1^2)
noise beside its readings in both halves (Table 2's "5 obs + 5 noise"), drawn
afresh at every step, and the teacher labels the clean readings: whether the
noise moves the student's actions on its recorded rounds, where it was trained
with such channels (``bc.noise_sensors``), as much as in its own episodes.

Usage::

    python benchmarks/pi_cartpole_replay_fit.py \\
        --teacher_dir benchmarks/teachers/cartpole_swingup_harder_sac \\
        --pi_dirs runs/pi_l1/seed0/pi --out replay_fit.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.algorithms import bc
from sit_keras.agents.environments import cartpole_swingup
from sit_keras.agents.environments.sensor_permutation import NOISE_STD
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pi_cartpole_batched_eval  # noqa: E402  (beside this script)
import pi_cartpole_es  # noqa: E402

ACTION_SPEC = tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0)
"""The cart-pole's push, as the recorded rounds hold it."""


def replay_actions(
    net,
    observations: np.ndarray,
    step_types: np.ndarray,
    previous_actions: np.ndarray | None = None,
    noise: np.ndarray | None = None,
) -> np.ndarray:
    """``(E, S)``: the greedy action, clipped to [-1, 1], at every recorded step of ``(E, S, D)`` streams.

    The state is carried along each stream and reset at FIRST steps; the network
    feeds its own mode as its previous action, as when it acts, or, with
    ``previous_actions`` ``(E, S, A)`` (``bc.TeacherData.previous_actions``), the
    recorded ones, as a student trained with ``bc.previous_action = "executed"`` was.
    ``noise`` ``(E, S, K)``: extra channels read after the recorded ones.
    """
    if noise is not None:
        observations = np.concatenate([observations, noise.astype(observations.dtype)], axis=-1)
    steps = observations.shape[1]
    given = previous_actions is not None
    if not given:
        previous_actions = np.zeros((*observations.shape[:2], 1), np.float32)

    @tf.function(autograph=False)
    def replay(observations: tf.Tensor, step_types: tf.Tensor, previous_actions: tf.Tensor) -> tf.Tensor:
        state = pi_cartpole_es.initial_state(net, tf.shape(observations)[0], observations.shape[-1])

        def body(t, state, actions):
            if given:
                state = {**state, "previous_action": previous_actions[:, t]}
            distribution, state = net.call(observations[:, t], step_types[:, t], state)
            return t + 1, state, actions.write(t, distribution.mode()[:, 0])

        loop_vars = (tf.constant(0), state, tf.TensorArray(tf.float32, steps))
        *_, actions = tf.while_loop(lambda t, *_: t < steps, body, loop_vars)
        return tf.transpose(actions.stack())

    actions = replay(
        tf.constant(observations, tf.float32),
        tf.constant(step_types, tf.int32),
        tf.constant(previous_actions, tf.float32),
    )
    return np.clip(actions.numpy(), -1.0, 1.0)


class Episodes(NamedTuple):
    """A greedy policy's own episodes with the teacher's label of every state, ``(B, steps, ...)``."""

    observations: np.ndarray
    actions: np.ndarray
    """The policy's actions, clipped to [-1, 1]."""
    labels: np.ndarray
    """The teacher's action on the same readings, clipped."""
    running: np.ndarray
    """Whether the cart was still on the track before the step (the steps the episode played)."""


def own_episodes(
    net,
    teacher,
    starts: tf.Tensor,
    steps: int = cartpole_swingup.MAX_STEPS,
    noise_channels: int = 0,
    seed: int = 0,
) -> Episodes:
    """Plays ``net`` greedily from ``(B, 4)`` starts for ``steps`` steps; the teacher labels every state.

    With ``noise_channels``, ``net`` reads that many channels of N(0, 0.1^2) noise after the 5
    readings (drawn from ``seed``, afresh at every step); the teacher and the records hold the 5.
    """

    @tf.function(autograph=False)
    def play(starts: tf.Tensor):
        batch = tf.shape(starts)[0]
        first = tf.fill([batch], tf.constant(ts.StepType.FIRST, tf.int32))
        mid = tf.fill([batch], tf.constant(ts.StepType.MID, tf.int32))

        def body(t, state, net_state, teacher_state, running, records):
            step_type = tf.where(tf.equal(t, 0), first, mid)
            readings = pi_cartpole_es.observations(state)
            read = readings
            if noise_channels:
                noise = tf.random.stateless_normal([batch, noise_channels], tf.stack([seed, t]))
                read = tf.concat([readings, NOISE_STD * noise], axis=-1)
            distribution, net_state = net.call(read, step_type, net_state)
            label, teacher_state = teacher.call(readings, step_type, teacher_state)
            action = distribution.mode()
            values = (readings, action[:, 0], label.mode()[:, 0], running)
            records = tuple(r.write(t, v) for r, v in zip(records, values, strict=True))
            state, _, off_track = pi_cartpole_es.batched_step(state, action)
            return t + 1, state, net_state, teacher_state, tf.logical_and(running, ~off_track), records

        records = tuple(
            tf.TensorArray(dtype, steps) for dtype in (tf.float32, tf.float32, tf.float32, tf.bool)
        )
        loop_vars = (
            tf.constant(0),
            starts,
            pi_cartpole_es.initial_state(net, batch, 5 + noise_channels),
            pi_cartpole_es.initial_state(teacher, batch, 5),
            tf.ones([batch], tf.bool),
            records,
        )
        *_, records = tf.while_loop(lambda t, *_: t < steps, body, loop_vars)
        return tuple(tf.experimental.numpy.swapaxes(r.stack(), 0, 1) for r in records)

    readings, actions, labels, running = (part.numpy() for part in play(starts))
    return Episodes(readings, np.clip(actions, -1.0, 1.0), np.clip(labels, -1.0, 1.0), running)


def fit(actions: np.ndarray, labels: np.ndarray, observations: np.ndarray, counted: np.ndarray) -> dict:
    """The student's actions against the labels over the counted steps, with the pole up and all of them.

    ``observations`` are the readings ``[x, x_dot, cos, sin, theta_dot]``; a step has the pole
    up where ``cos > pi_cartpole_es.UPRIGHT_COS``. Each part: the number of steps, the mean ``|a|``,
    ``|a_label|``, ``|a - a_label|`` and the share of steps on which both push the same way.
    """
    upright = observations[..., 2] > pi_cartpole_es.UPRIGHT_COS
    parts = {}
    for name, where in (("upright", counted & upright), ("all", counted)):
        a, label = actions[where], labels[where]
        parts[name] = {
            "steps": int(where.sum()),
            "mean_abs_action": float(np.abs(a).mean()) if len(a) else None,
            "teacher_mean_abs_action": float(np.abs(label).mean()) if len(a) else None,
            "mean_abs_error": float(np.abs(a - label).mean()) if len(a) else None,
            "same_sign": float(np.mean(np.sign(a) == np.sign(label))) if len(a) else None,
        }
    return parts


def student_report(
    net, teacher, rounds: Sequence[bc.TeacherData], starts: tf.Tensor, noise_channels: int = 0, seed: int = 0
) -> dict[str, Any]:
    """The fit on each recorded round (and, where the rounds keep the executed actions, with those as the
    previous actions: ``recorded_rounds_executed``) and in the student's own episodes, the student reading
    ``noise_channels`` noise channels beside the readings (drawn from ``seed``)."""
    report: dict[str, Any] = {"recorded_rounds": []}
    if all(data.executed is not None for data in rounds):
        report["recorded_rounds_executed"] = []
    rng = np.random.default_rng(seed)
    for data in rounds:
        labels = np.clip(data.actions[..., 0], -1.0, 1.0)
        counted = data.weights > 0
        noise = rng.normal(0.0, NOISE_STD, (*data.observations.shape[:2], noise_channels))
        actions = replay_actions(net, data.observations, data.step_types, noise=noise)
        report["recorded_rounds"].append(fit(actions, labels, data.observations, counted))
        if "recorded_rounds_executed" in report:
            previous = data.previous_actions(ACTION_SPEC)
            actions = replay_actions(net, data.observations, data.step_types, previous, noise)
            report["recorded_rounds_executed"].append(fit(actions, labels, data.observations, counted))
    own = own_episodes(net, teacher, starts, noise_channels=noise_channels, seed=seed)
    report["own_episodes"] = fit(own.actions, own.labels, own.observations, own.running)
    return report


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher_dir", required=True, help="the teacher's training folder (5 readings)")
    parser.add_argument(
        "--pi_dirs",
        required=True,
        help="comma-separated training folders of DAgger students (with bc_data.npz)",
    )
    parser.add_argument("--episodes", type=int, default=200, help="the students' own episodes")
    parser.add_argument("--test_seed", type=int, default=1000, help="draws the starts and the noise")
    parser.add_argument(
        "--noise_channels", type=int, default=0, help="channels of N(0, 0.1^2) noise the students read"
    )
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1; received {args.episodes}.")
    if args.noise_channels < 0:
        raise UsageError(f"--noise_channels must be at least 0; received {args.noise_channels}.")
    pi_cartpole_es.trained_cartpole_folder("--teacher_dir", args.teacher_dir)
    args.pi_dirs = pi_cartpole_es.student_folders("--pi_dirs", args.pi_dirs)
    for folder in args.pi_dirs:
        if not os.path.exists(os.path.join(folder, bc.DATA_FILE)):
            raise UsageError(
                f"--pi_dirs: {folder!r} has no {bc.DATA_FILE}: it is not a distilled student's folder."
            )
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    command, commit = command_line("pi_cartpole_replay_fit.py", argv), current_commit()
    start = time.perf_counter()
    rounds = {folder: bc.load_rounds(os.path.join(folder, bc.DATA_FILE)) for folder in args.pi_dirs}
    starts = tf.constant(pi_cartpole_es.initial_states(np.random.default_rng(args.test_seed), args.episodes))
    teacher = pi_cartpole_batched_eval.load_policy(args.teacher_dir)
    results = {}
    for folder in args.pi_dirs:
        results[folder] = student_report(
            pi_cartpole_batched_eval.load_policy(folder),
            teacher,
            rounds[folder],
            starts,
            args.noise_channels,
            args.test_seed,
        )
        errors = [
            part["upright"]["mean_abs_error"]
            for part in (results[folder]["recorded_rounds"][-1], results[folder]["own_episodes"])
        ]
        print(folder, "pole up, |a - a_teacher| on the last recorded round and in its own episodes:", errors)
    if args.out:
        report = {
            "what": "Sensory-neuron students' fit on their recorded rounds and in their own episodes "
            "(benchmarks/pi_cartpole_replay_fit.py)",
            "command": command,
            "commit": commit,
            "environment": environment(),
            "wall_seconds": time.perf_counter() - start,
            "settings": vars(args),
            "results": results,
        }
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
