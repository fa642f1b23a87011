"""Evolution strategies on a cloned sensory-neuron student's own return (Tang & Ha 2021, section 4).

The paper trains its CartPoleSwingUpHarder agent with CMA-ES on the return
(4,096 episodes a generation, about 14,000 generations); ours are cloned from a
SAC teacher by DAgger (``pi_cartpole_distill.py``) and keep 62-81% of it. This
script goes on from such a student with the simpler ES of Salimans et al.
(2017): each generation draws ``--population / 2`` Gaussian directions of
all the actor's weights, plays the greedy policy at ``+sigma`` and ``-sigma``
along each on the same ``--episodes`` random starts, and moves the weights
along the directions weighted by the centred ranks of those returns, with
Adam. Every ``--eval_every`` generations the current weights play a fixed set
of ``--validation_episodes`` starts (other starts than the final test's), and
the best weights so far are written to ``--out_dir`` as a training folder
(the student's ``policy_network.json``, a checkpoint and this run's report,
``es_run.json``), so that
``pi_cartpole_distill.py --skip_training --students pi --pi_dir <out_dir>``
tests them on Table 2's and Table 6's columns.

``--horizon`` cuts the candidates' episodes after that many steps (the
validations stay whole), and ``--survival_value`` counts each cut episode still
on the track as worth that much more: fitnesses on the start of the episodes,
where the students lose their starts (both lowered the students' whole-episode
return: docs/results.md).

The episodes run inside one TensorFlow loop per candidate: the actor network
is the student's own (``SensorActorNetwork``, exactly permutation-invariant),
and the cart-pole is ``batched_step``, the equations of motion of
``agents/environments/cartpole_swingup.py`` (the ``gymnasium-cartpole-swingup``
package's, at the paper's 0.01 s step and 1000-step episodes) for a batch of
carts in float64; a test checks it against the package's environment step by step.

Usage::

    python benchmarks/pi_cartpole_es.py --pi_dir runs/pi_noise_only/seed0/pi \\
        --out_dir runs/pi_es/seed0 --generations 100 --seed 0 --out runs/pi_es/seed0.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import StepType

from sit_keras.agents.environments import cartpole_swingup
from sit_keras.agents.environments.sensor_permutation import NOISE_STD
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

RECORD_FILE = "es_run.json"
"""The run's report in ``--out_dir``, beside the best weights."""

# The package's constants (CartPoleSwingUpEnv's defaults, which cartpole_swingup keeps).
GRAVITY, CART_MASS, POLE_MASS, POLE_LENGTH = 9.82, 0.5, 0.5, 0.6
FORCE_MAG, FRICTION = 10.0, 0.1
UPRIGHT_COS = 0.95
"""A pole counts as up where ``cos(theta)`` exceeds this (within about 18 degrees of upright)."""
BRAKING_WINDOWS = ((0, 10), (10, 30), (30, 60))
"""Windows of steps (from, to) in which ``Outcomes.braking`` and ``force`` are measured: a fast start is
braked first."""


def initial_states(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` starts drawn as ``CartPoleSwingUpHarder.reset`` draws them, ``(count, 4)`` float64.

    The package stores a start in float32, so these are rounded to float32 as well.
    """
    offsets = rng.uniform(-1.0, 1.0, size=(count, 4)) * cartpole_swingup.INITIAL_RANGES
    starts = offsets + np.array([0.0, 0.0, math.pi, 0.0])
    return starts.astype(np.float32).astype(np.float64)


def observations(state: tf.Tensor) -> tf.Tensor:
    """``[x, x_dot, cos(theta), sin(theta), theta_dot]`` of each cart, float32 (as ``cartpole_swingup``)."""
    x, x_dot, theta, theta_dot = tf.unstack(state, axis=-1)
    return tf.cast(tf.stack([x, x_dot, tf.cos(theta), tf.sin(theta), theta_dot], axis=-1), tf.float32)


def batched_step(state: tf.Tensor, action: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """One 0.01 s Euler step of every cart: ``(next state, reward, off the track)``.

    Args:
      state: ``(B, 4)`` float64 ``(x, x_dot, theta, theta_dot)``.
      action: ``(B, 1)``; clipped to ``[-1, 1]`` and rounded to float32, as the package does.
    """
    force = tf.cast(tf.clip_by_value(tf.cast(action[:, 0], tf.float32), -1.0, 1.0) * FORCE_MAG, tf.float64)
    x, x_dot, theta, theta_dot = tf.unstack(state, axis=-1)
    s, c = tf.sin(theta), tf.cos(theta)
    total_mass, pole_moment = CART_MASS + POLE_MASS, POLE_MASS * POLE_LENGTH
    x_acc = (
        -2 * pole_moment * theta_dot**2 * s
        + 3 * POLE_MASS * GRAVITY * s * c
        + 4 * force
        - 4 * FRICTION * x_dot
    ) / (4 * total_mass - 3 * POLE_MASS * c**2)
    theta_acc = (
        -3 * pole_moment * theta_dot**2 * s * c
        + 6 * total_mass * GRAVITY * s
        + 6 * (force - FRICTION * x_dot) * c
    ) / (4 * POLE_LENGTH * total_mass - 3 * pole_moment * c**2)
    dt = cartpole_swingup.TIME_STEP
    x, theta = x + x_dot * dt, theta + theta_dot * dt
    x_dot, theta_dot = x_dot + x_acc * dt, theta_dot + theta_acc * dt
    theta = tf.math.floormod(theta + math.pi, 2 * math.pi) - math.pi
    reward = (tf.cos(theta) + 1.0) / 2.0 * tf.cos(x / cartpole_swingup.X_THRESHOLD * math.pi / 2.0)
    off_track = tf.abs(x) > cartpole_swingup.X_THRESHOLD
    return tf.stack([x, x_dot, theta, theta_dot], axis=-1), reward, off_track


class Outcomes(NamedTuple):
    """What ``episode_outcomes`` measures of each episode, each ``(B,)`` unless said."""

    returns: tf.Tensor
    lengths: tf.Tensor
    """Steps played: the step that left the track, or all of them."""
    second_half_returns: tf.Tensor
    """The return of the episode's second half (from step ``steps // 2``): how well the pole is held."""
    first_upright: tf.Tensor
    """The first step whose pole is within about 18 degrees of upright (cos > 0.95), or ``steps``."""
    braking: tf.Tensor
    """``(B, len(BRAKING_WINDOWS))``: in each window of steps, the mean push against the cart's
    velocity, ``-sign(x_dot) * a`` with ``a`` clipped to [-1, 1] (1: full braking), over the
    window's steps played."""
    force: tf.Tensor
    """``(B, len(BRAKING_WINDOWS))``: the mean ``|a|`` in each window (1: full force either way)."""
    second_half_upright: tf.Tensor
    """Steps of the second half played with the pole up after them (cos > 0.95): a held pole
    scores ``steps - steps // 2``."""
    second_half_drops: tf.Tensor
    """How often the pole fell in the second half: steps after which it is no longer up but was before."""
    upright_actions: tf.Tensor
    """``(B, 4)``: over the steps played from a state with the pole up, their number and the sums
    of ``|a|``, ``|a_label|`` and ``|a - a_label|`` (actions clipped to [-1, 1]); ``a_label`` is the
    ``labeller``'s action on the same readings (zeros without one): what the teacher would do in
    the states the policy reaches."""


def episode_outcomes(
    net,
    noise_channels: int = 0,
    sensor_order: Sequence[int] | None = None,
    steps: int = cartpole_swingup.MAX_STEPS,
    labeller=None,
    reset_at: int | None = None,
    reshuffle_every: int | None = None,
) -> Callable[[tf.Tensor, tf.Tensor], Outcomes]:
    """A function from ``(B, 4)`` starts to the greedy policy's ``Outcomes`` of each episode.

    An episode ends after ``steps`` steps (the environment's ``MAX_STEPS``: whole
    episodes) or on the step that leaves the track (whose reward counts, as in
    the environment); its length is the number of steps it played. With
    ``sensor_order``, the policy reads the 5 readings in that order (indices into
    them: a permutation is Table 2's "shuffled", each index twice its "10 obs").
    With ``noise_channels``, the readings come with that many channels of
    N(0, 0.1^2) noise (Table 2's "5 obs + 5 noise"), drawn from the ``seed``
    argument (a ``(2,)`` int32 tensor). ``net`` is a sensory-neuron network
    (any number of readings) or a fixed-input one such as the SAC teacher's actor.
    ``labeller`` (e.g. the teacher's actor) reads the 5 readings in their own
    order at every state ``net`` reaches; only ``Outcomes.upright_actions`` uses it.
    With ``reset_at``, the policy is told at that step that an episode starts (its
    recurrent state goes back to zero) while the cart plays on: what its memory of the
    steps before holds.
    With ``reshuffle_every`` ``n`` (Table 6, "reshuffle every n steps"), each episode
    reads its 5 readings in a permutation of its own, drawn at step 0 and again at
    every ``n``-th step (from the ``seed`` argument, apart from the noise's draws).
    """
    if reshuffle_every is not None and (sensor_order is not None or reshuffle_every < 1):
        raise ValueError(f"reshuffle_every must be >= 1, without sensor_order; received {reshuffle_every}.")
    order = None if sensor_order is None else tf.constant(list(sensor_order), tf.int32)
    num_sensors = (5 if sensor_order is None else len(sensor_order)) + noise_channels

    @tf.function(autograph=False)  # plain Python control flow; autograph warns on TF-Agents' code
    def play(starts: tf.Tensor, seed: tf.Tensor) -> Outcomes:
        batch = tf.shape(starts)[0]
        first = tf.fill([batch], tf.constant(StepType.FIRST, tf.int32))
        mid = tf.fill([batch], tf.constant(StepType.MID, tf.int32))
        zeros = tf.zeros([batch], tf.float64)

        def body(t, state, net_state, label_state, running, up, sums):
            starting = (
                tf.equal(t, 0) if reset_at is None else tf.logical_or(tf.equal(t, 0), tf.equal(t, reset_at))
            )
            step_type = tf.where(starting, first, mid)
            readings = observations(state)
            true_readings = readings
            if order is not None:
                readings = tf.gather(readings, order, axis=-1)
            if reshuffle_every is not None:  # permutation number t // n of each episode
                keys = tf.random.stateless_uniform([batch, 5], seed + tf.stack([1, t // reshuffle_every]))
                readings = tf.gather(readings, tf.argsort(keys, axis=-1), axis=-1, batch_dims=1)
            if noise_channels:
                noise = tf.random.stateless_normal([batch, noise_channels], seed + tf.stack([0, t]))
                readings = tf.concat([readings, NOISE_STD * noise], axis=-1)
            distribution, net_state = net.call(readings, step_type, net_state)
            action = distribution.mode()
            clipped = tf.clip_by_value(tf.cast(action[:, 0], tf.float64), -1.0, 1.0)
            if labeller is None:
                labelled = [tf.zeros_like(clipped)] * 2
            else:
                label_distribution, label_state = labeller.call(true_readings, step_type, label_state)
                label = tf.clip_by_value(tf.cast(label_distribution.mode()[:, 0], tf.float64), -1.0, 1.0)
                labelled = [tf.abs(label), tf.abs(clipped - label)]
            in_window = tf.stack([tf.logical_and(t >= a, t < b) for a, b in BRAKING_WINDOWS])
            counted = tf.logical_and(running[:, None], in_window[None, :])
            window_zeros = tf.zeros_like(sums["braking"])
            push_against = tf.where(counted, (-tf.sign(state[:, 1]) * clipped)[:, None], window_zeros)
            from_up = tf.cast(tf.logical_and(running, up), tf.float64)[:, None]
            action_sums = from_up * tf.stack([tf.ones_like(clipped), tf.abs(clipped), *labelled], axis=1)
            state, reward, off_track = batched_step(state, action)
            earned = tf.where(running, reward, zeros)
            late = t >= steps // 2
            now_up = tf.logical_and(running, tf.cos(state[:, 2]) > UPRIGHT_COS)
            fell = tf.logical_and(tf.logical_and(up, running), tf.logical_not(now_up))
            sums = {
                "returns": sums["returns"] + earned,
                "second_half": sums["second_half"] + tf.where(late, earned, zeros),
                "second_half_upright": sums["second_half_upright"]
                + tf.where(late, tf.cast(now_up, tf.float64), zeros),
                "second_half_drops": sums["second_half_drops"]
                + tf.where(late, tf.cast(fell, tf.float64), zeros),
                "first_upright": tf.where(
                    tf.logical_and(now_up, sums["first_upright"] == steps), t + 1, sums["first_upright"]
                ),
                "lengths": tf.where(tf.logical_and(running, off_track), t + 1, sums["lengths"]),
                "braking": sums["braking"] + push_against,
                "force": sums["force"] + tf.where(counted, tf.abs(clipped)[:, None], window_zeros),
                "upright_actions": sums["upright_actions"] + action_sums,
            }
            running = tf.logical_and(running, tf.logical_not(off_track))
            return t + 1, state, net_state, label_state, running, now_up, sums

        windows = tf.zeros([batch, len(BRAKING_WINDOWS)], tf.float64)
        sums = {
            "returns": zeros,
            "second_half": zeros,
            "second_half_upright": zeros,
            "second_half_drops": zeros,
            "first_upright": tf.fill([batch], tf.constant(steps)),
            "lengths": tf.fill([batch], tf.constant(steps)),
            "braking": windows,
            "force": windows,
            "upright_actions": tf.zeros([batch, 4], tf.float64),
        }
        label_state = () if labeller is None else initial_state(labeller, batch, 5)
        loop_vars = (
            tf.constant(0),
            starts,
            initial_state(net, batch, num_sensors),
            label_state,
            tf.ones([batch], tf.bool),
            tf.cos(starts[:, 2]) > UPRIGHT_COS,
            sums,
        )
        *_, sums = tf.while_loop(lambda t, *_: t < steps, body, loop_vars, maximum_iterations=steps)
        played = [
            tf.clip_by_value(tf.cast(sums["lengths"], tf.float64) - a, 0.0, float(b - a))
            for a, b in BRAKING_WINDOWS
        ]
        played = tf.stack(played, axis=1)
        return Outcomes(
            returns=sums["returns"],
            lengths=sums["lengths"],
            second_half_returns=sums["second_half"],
            first_upright=sums["first_upright"],
            braking=tf.math.divide_no_nan(sums["braking"], played),
            force=tf.math.divide_no_nan(sums["force"], played),
            second_half_upright=sums["second_half_upright"],
            second_half_drops=sums["second_half_drops"],
            upright_actions=sums["upright_actions"],
        )

    return play


def valued_mean(returns: np.ndarray, lengths: np.ndarray, steps: int, survival_value: float) -> float:
    """The mean of episodes cut at ``steps``, each still on the track there counted ``survival_value`` more.

    An episode that left the track on its very last step counts as still on it
    (its length is ``steps`` as well); the students' episodes leave it in their
    first 100 steps or so, far from any horizon worth cutting at.
    """
    return float(np.mean(returns + survival_value * (lengths == steps)))


def initial_state(net, batch: tf.Tensor, num_sensors: int):
    """A sensory-neuron network's zero state for ``num_sensors`` readings; a fixed-input network's own."""
    if hasattr(net, "initial_state"):
        return net.initial_state(batch, num_sensors)
    return net.get_initial_state(batch)


class FlatWeights:
    """The actor's trainable weights as one float64 vector, read and written in place."""

    def __init__(self, variables: Sequence[tf.Variable]):
        self.variables = list(variables)
        self.sizes = [int(np.prod(v.shape)) for v in self.variables]

    def get(self) -> np.ndarray:
        return np.concatenate([v.numpy().ravel().astype(np.float64) for v in self.variables])

    def set(self, flat: np.ndarray) -> None:
        for v, part in zip(self.variables, np.split(flat, np.cumsum(self.sizes)[:-1]), strict=True):
            v.assign(part.reshape(v.shape).astype(v.dtype.as_numpy_dtype))


def centred_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to ``[-0.5, 0.5]`` (Salimans et al. 2017's fitness shaping), robust to outliers."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(len(values) - 1, 1) - 0.5


class Adam:
    """Adam on a flat vector, for ascent (Kingma & Ba 2015; the optimiser of Salimans et al.'s ES)."""

    def __init__(self, size: int, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999):
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.m, self.v, self.t = np.zeros(size), np.zeros(size), 0

    def step(self, gradient: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat, v_hat = self.m / (1 - self.beta1**self.t), self.v / (1 - self.beta2**self.t)
        return self.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)


def evolve(
    net,
    args: argparse.Namespace,
    on_best: Callable[[int, list[float]], None],
    on_validated: Callable[[list[dict[str, Any]]], None],
) -> list[dict[str, Any]]:
    """Runs ``args.generations`` generations and returns a record of each.

    Calls ``on_best`` with the validation means of each new best (clean, then with
    ``--noise_channels``; the best has the largest mean of them), while the
    weights are the best's, and ``on_validated`` with the records so far after
    each generation that validated.
    """
    rng = np.random.default_rng(args.seed)
    noises = [0] + ([args.noise_channels] if args.noise_channels else [])
    # The candidates play --horizon steps of each start, the validations whole episodes.
    plays = {
        steps: [episode_outcomes(net, n, steps=steps) for n in noises]
        for steps in {args.horizon, cartpole_swingup.MAX_STEPS}
    }

    def means(starts: tf.Tensor, seed: tf.Tensor, steps: int, survival_value: float = 0.0) -> list[float]:
        """The mean return over ``starts``, clean and (with ``--noise_channels``) with noise channels;
        ``survival_value`` is added for each episode still on the track after ``steps`` steps."""
        outcomes = [play(starts, seed) for play in plays[steps]]
        return [valued_mean(o.returns.numpy(), o.lengths.numpy(), steps, survival_value) for o in outcomes]

    weights = FlatWeights(net.trainable_variables)
    center = weights.get()
    optimiser = Adam(center.size, args.learning_rate)
    validation = tf.constant(
        initial_states(np.random.default_rng(args.validation_seed), args.validation_episodes)
    )
    history: list[dict[str, Any]] = []
    best = -np.inf
    for generation in range(args.generations + 1):
        record: dict[str, Any] = {"generation": generation}
        if generation % args.eval_every == 0 or generation == args.generations:
            weights.set(center)
            record["validation"] = means(
                validation, tf.constant([args.validation_seed, 0]), cartpole_swingup.MAX_STEPS
            )
            if np.mean(record["validation"]) > best:
                best = float(np.mean(record["validation"]))
                on_best(generation, record["validation"])
        if generation < args.generations:
            starts = tf.constant(initial_states(rng, args.episodes))
            seed = tf.constant(rng.integers(0, 2**31 - 1, size=2), tf.int32)  # one noise for every candidate
            directions = rng.standard_normal((args.population // 2, center.size))
            fitness = np.empty((len(directions), 2))
            for i, direction in enumerate(directions):
                for j, sign in enumerate((1.0, -1.0)):
                    weights.set(center + sign * args.sigma * direction)
                    fitness[i, j] = np.mean(means(starts, seed, args.horizon, args.survival_value))
            shaped = centred_ranks(fitness.ravel()).reshape(fitness.shape)
            gradient = (shaped[:, 0] - shaped[:, 1]) @ directions / (len(directions) * args.sigma)
            center = center + optimiser.step(gradient)
            record.update(population_mean=float(fitness.mean()), population_max=float(fitness.max()))
        history.append(record)
        if "validation" in record:
            on_validated(history)
        print(
            " ".join(f"{k}={np.round(v, 1).tolist()}" for k, v in record.items()),
            flush=True,
        )
    return history


def trained_cartpole_folder(flag: str, folder: str) -> policy_network.PolicyNetworkDescription:
    """The description of ``folder``, given as ``flag``: a trained policy of CartPoleSwingUpHarder.

    Raises:
      UsageError: one sentence naming ``flag`` where it is not.
    """
    try:
        description = policy_network.read_description(folder)
    except (OSError, ValueError) as error:
        raise UsageError(f"{flag}: {error}") from error
    if tf.train.latest_checkpoint(os.path.join(folder, policy_network.CHECKPOINT_DIR)) is None:
        raise UsageError(f"{flag} {folder!r} has no checkpoint; train it first.")
    if description.env_name != "gymnasium:" + cartpole_swingup.ENV_ID:
        raise UsageError(
            f"{flag} must hold a {cartpole_swingup.ENV_ID} policy; "
            f"{folder!r} holds one for {description.env_name!r}."
        )
    return description


def student_folders(flag: str, text: str) -> list[str]:
    """The comma-separated training folders of ``text``, each a trained sensory-neuron student of
    CartPoleSwingUpHarder; a ``UsageError`` naming ``flag`` otherwise."""
    folders = [d for d in text.split(",") if d]
    if not folders:
        raise UsageError(f"{flag} must name at least one student's folder.")
    for folder in folders:
        description = trained_cartpole_folder(flag, folder)
        if description.network_class != "SensorActorNetwork":
            raise UsageError(
                f"{flag} must hold sensory-neuron students; {folder!r} holds a {description.network_class}."
            )
    return folders


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pi_dir", required=True, help="the student's training folder (policy_network.json, checkpoints)"
    )
    parser.add_argument("--out_dir", required=True, help="a new folder for the best weights")
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--population", type=int, default=32, help="candidates a generation (even)")
    parser.add_argument(
        "--episodes", type=int, default=32, help="starts each candidate plays, the same for all"
    )
    parser.add_argument(
        "--horizon", type=int, default=cartpole_swingup.MAX_STEPS,
        help="steps of each start a candidate plays (its return over them is its fitness); "
        "the validations play whole episodes",
    )  # fmt: skip
    parser.add_argument(
        "--survival_value", type=float, default=0.0,
        help="with --horizon: added to a candidate's return for each start it is still on the track "
        "at the horizon (an estimate of the rest of the episode's return)",
    )  # fmt: skip
    parser.add_argument("--sigma", type=float, default=0.01)
    parser.add_argument("--learning_rate", type=float, default=0.002)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--validation_episodes", type=int, default=200)
    parser.add_argument("--validation_seed", type=int, default=7)
    parser.add_argument(
        "--noise_channels", type=int, default=0,
        help="each candidate also plays its starts with this many noise channels; fitness: the mean of both",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    if args.noise_channels < 0:
        raise UsageError(f"--noise_channels must be at least 0; received {args.noise_channels}.")
    if not 1 <= args.horizon <= cartpole_swingup.MAX_STEPS:
        raise UsageError(
            f"--horizon must be between 1 and {cartpole_swingup.MAX_STEPS} steps; received {args.horizon}."
        )
    if args.survival_value and args.horizon == cartpole_swingup.MAX_STEPS:
        raise UsageError("--survival_value needs a --horizon shorter than a whole episode.")
    if args.survival_value < 0:
        raise UsageError(f"--survival_value must be at least 0; received {args.survival_value}.")
    for name in ("generations", "population", "episodes", "eval_every", "validation_episodes"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1; received {getattr(args, name)}.")
    if args.population % 2:
        raise UsageError(
            f"--population must be even (pairs of +sigma and -sigma); received {args.population}."
        )
    if not args.sigma > 0 or not args.learning_rate > 0:
        raise UsageError(
            f"--sigma and --learning_rate must be positive; received {args.sigma} and {args.learning_rate}."
        )
    description = trained_cartpole_folder("--pi_dir", args.pi_dir)
    if os.path.exists(args.out_dir):
        raise UsageError(f"--out_dir {args.out_dir!r} exists; give a new folder.")
    check_out_file(args.out)
    args.description = description
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    command, commit, start = command_line("pi_cartpole_es.py", argv), current_commit(), time.perf_counter()
    net = policy_network.build_network(args.description)
    restored = policy_network.restore_network(net, args.pi_dir, args.description.checkpoint_attribute)
    os.makedirs(args.out_dir)
    shutil.copy(os.path.join(args.pi_dir, policy_network.DESCRIPTION_FILE), args.out_dir)
    best: dict[str, Any] = {}

    def save_best(generation: int, validation: list[float]) -> None:
        policy_network.save_network(net, args.out_dir, args.description.checkpoint_attribute, generation)
        best.update(generation=generation, validation=validation)

    def report(history: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "what": "ES on a cloned AttentionNeuron student's greedy return (benchmarks/pi_cartpole_es.py)",
            "command": command,
            "commit": commit,
            "environment": environment(),
            "wall_seconds": time.perf_counter() - start,
            "started_from": restored,
            "settings": {k: v for k, v in vars(args).items() if k != "description"},
            "best": best,
            "history": history,
        }

    def save_progress(history: list[dict[str, Any]], finished: bool = False) -> None:
        # In the folder (pi_cartpole_distill.py --pi_dir quotes it) and in --out; a run stopped
        # early keeps its report up to its last validation.
        record = {**report(history), "finished": finished}
        for path in [os.path.join(args.out_dir, RECORD_FILE)] + ([args.out] if args.out else []):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=2)
                f.write("\n")

    history = evolve(net, args, save_best, save_progress)
    save_progress(history, finished=True)
    print(
        f"best validation means {np.round(best['validation'], 1).tolist()} at generation "
        f"{best['generation']}; weights in {args.out_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
