"""Behaviour cloning for the harness (``train_eval.agent = 'bc'``, ``bc.*``), which ``sit-distill`` runs.

Tang & Ha (NeurIPS 2021) section 4.2 and appendix A.4.2 (Ant) / A.4.3 (Pong)
turn policies trained with other methods into permutation-invariant ones:

1. data: the teacher's greedy policy (``<teacher_dir>/policies/greedy_policy``,
   any agent, any network, recurrent or not) acts in the run's ``num_envs``
   environments for ``total_env_steps / num_envs`` steps each; the
   observations, step types and its actions are recorded (the paper: 1000
   teacher roll-outs). With ``dagger_rounds = 0`` (the default) the teacher
   acts throughout: plain behaviour cloning, as in the paper. Each DAgger
   round (Ross et al. 2011) then lets the student act (the teacher with
   probability ``dagger_teacher_probability``) while the teacher labels every
   visited step, adds these steps to the data and trains again on all of it:
   the student learns to recover from its own mistakes, which plain cloning
   never shows it. The budget ``total_env_steps`` is split evenly over the rounds.
2. student: the actor on the run's encoder (``encoders.actor_network``):
   ``"attention_neuron"`` (AttentionNeuron, then dense layers; the paper's
   larger Ant student has two FC layers of 128), or any feed-forward torso,
   e.g. ``"mlp"`` for the paper's FNN comparison.
3. loss, per recorded step (the LAST step of an episode, whose action the
   environment ignores, excluded): continuous actions, the mean squared error
   between the student's mode and the teacher's action (the paper's MSE);
   discrete actions, the cross-entropy of the teacher's action (the saved
   teacher gives actions, not the logits the paper regresses for Pong).
4. training: truncated back-propagation through time along each
   environment's stream, in chunks of ``sequence_length`` steps taken in
   order; the student's state runs on from one chunk to the next (held
   fixed) and resets at FIRST steps, as when it acts. Adam with learning rate
   1e-3 and gradients clipped to norm 0.5 (A.4.2); ``num_epochs`` passes.

The student sees the teacher's fixed observation order: being exactly
invariant, a shuffled copy would give it the same data up to rounding. Its
previous action is by default its own mode (``sensor_networks``): the input
it will see when it acts. The paper feeds the recorded action with N(0, 0.03)
noise; ``previous_action = "executed"`` feeds the action that was executed at
the previous recorded step, the one that moved the readings the student reads
next. ``previous_action_noise`` adds the paper's noise to that input while it
trains (not while it acts).

The harness's pieces, not its collect-and-learn loop (plain behaviour
cloning collects once, then trains for epochs): checkpoints after every
epoch (a rerun recollects the same data and resumes at the next epoch),
``train/`` (the loss per gradient step, ``Losses/bc_loss``), ``collect/`` (the
teacher's episodes), the final evaluation of the student into ``eval/`` and
``evaluations.json`` (and the teacher's, with the same seeds, in the
results), ``policies/`` and ``policy_network.json`` (agent ``"bc"``).

    sit-distill --root_dir runs/cartpole_pi_bc --teacher_dir runs/cartpole_mlp \\
        --gin_bindings 'train_eval.total_env_steps = 32000' --gin_bindings 'bc.num_epochs = 20'
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.policies import actor_policy, greedy_policy, py_policy, py_tf_eager_policy
from tf_agents.specs import tensor_spec
from tf_agents.train import learner
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

from sit_keras import xla
from sit_keras.agents import evaluate
from sit_keras.agents.environments import sensor_permutation
from sit_keras.agents.networks import encoders, policy_network, sensor_networks
from sit_keras.agents.training import harness, settings_check
from sit_keras.agents.training.algorithm import Algorithm, Run
from sit_keras.agents.training.collection import FixedLengthDriver
from sit_keras.agents.training.harness import TrainingLoop
from sit_keras.agents.training.run_settings import RunSettings

AGENT = "bc"
"""The ``agent`` of the student's ``policy_network.json``: a distribution actor, acting by its mode."""


@gin.configurable("bc")
@dataclasses.dataclass(frozen=True)
class BC:
    """Behaviour cloning's settings (gin: ``bc.<name>``).

    Attributes:
      teacher_dir: a training folder (with ``policies/greedy_policy``) or a
        saved policy folder. Required.
      fc_layer_params: the student's dense layers after the encoder.
      sequence_length: steps per chunk of truncated back-propagation.
      num_epochs: passes over the data.
      learning_rate, max_grad_norm: Adam and gradient clipping (A.4.2).
      anneal_learning_rate: decay the rate linearly to 0 over each round's
        epochs, and restart it when a DAgger round adds data: the last
        epochs then settle instead of jumping between minibatches' optima.
      dagger_rounds: rounds after the teacher's in which the student acts and
        the teacher labels its states (DAgger); 0: plain behaviour cloning,
        as the paper.
      dagger_teacher_probability: in those rounds, the chance that the
        teacher's action is executed instead (per environment and step).
      previous_action_noise: standard deviation of zero-mean Gaussian noise
        added to an AttentionNeuron student's previous action in its training
        steps (A.4.2: 0.03); 0 adds none.
      noise_sensors: up to this many extra white-noise channels (N(0, 0.1^2),
        the paper's noise test) beside an AttentionNeuron student's readings
        in its training steps: each stream gets a number drawn uniformly from
        0 to ``noise_sensors`` in every epoch, fresh noise at every step, and
        the teacher's label of the clean reading. The student learns that a
        channel which does not follow the state carries nothing; it acts on
        the clean readings. 0 adds none (the paper trains without them).
      action_loss: how a continuous action's error is scored: ``"squared"``
        (the mode's squared error: the student learns the teacher's mean
        action given what it has read) or ``"absolute"`` (its absolute error:
        the median). A permutation-invariant student cannot tell at first which
        reading is which, so where the teacher brakes at full force it hesitates
        between the directions; the squared error then makes it push at the
        mean of them, the absolute error with the likelier one. Discrete
        actions always use the cross-entropy.
      streams_per_epoch: train each epoch on this many recorded streams drawn
        at random (without replacement) from all rounds' so far, instead of on
        every stream; 0 (the default) or more than are recorded: all of them.
        Each gradient step carries one chunk of every stream in the epoch, so
        with every stream its cost grows with the rounds recorded and a run's
        training cost with their square; with a fixed sample it stops growing
        once the rounds hold more streams than the sample (DAgger keeps every
        round's data, Ross et al. 2011; it does not need every step to see it).
        Drawn per (seed, round, epoch), so a resumed run draws the same streams.
      previous_action: the ``a_{t-1}`` input of an AttentionNeuron student in its
        training steps: ``"own"`` (its own mode, the input it sees when it acts) or
        ``"executed"`` (the action the recording executed: the teacher's in round 0,
        the acting student's in a DAgger round; the paper feeds the recorded action,
        A.4.2). Only the executed action moved the recorded readings, so with
        ``"own"`` the input can disagree with what the readings did, where the
        student acts differently from whoever recorded them.
    """

    teacher_dir: str = ""
    fc_layer_params: Sequence[int] = (128, 128)
    sequence_length: int = 50
    num_epochs: int = 10
    learning_rate: float = 1e-3
    anneal_learning_rate: bool = False
    max_grad_norm: float = 0.5
    dagger_rounds: int = 0
    dagger_teacher_probability: float = 0.0
    previous_action_noise: float = 0.0
    noise_sensors: int = 0
    streams_per_epoch: int = 0
    action_loss: str = "squared"
    previous_action: str = "own"

    def __post_init__(self):
        settings_check.check(self, "bc", RANGES)
        if not self.teacher_dir:
            raise ValueError("bc.teacher_dir is not set: give the teacher's training folder.")
        for name in ("sequence_length", "num_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"bc.{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if not (self.learning_rate > 0 and np.isfinite(self.learning_rate)):
            raise ValueError(f"bc.learning_rate must be a positive number. Received: {self.learning_rate}")
        if not (self.previous_action_noise >= 0 and np.isfinite(self.previous_action_noise)):
            raise ValueError(
                "bc.previous_action_noise must be a finite number >= 0. "
                f"Received: {self.previous_action_noise}"
            )
        if self.previous_action not in PREVIOUS_ACTIONS:
            raise ValueError(
                f"bc.previous_action must be one of {', '.join(PREVIOUS_ACTIONS)}. "
                f"Received: {self.previous_action!r}"
            )
        if self.action_loss not in ACTION_LOSSES:
            raise ValueError(
                f"bc.action_loss must be one of {', '.join(ACTION_LOSSES)}. Received: {self.action_loss!r}"
            )
        if self.dagger_rounds < 0:
            raise ValueError(f"bc.dagger_rounds must be >= 0. Received: {self.dagger_rounds}")
        if not 0.0 <= self.dagger_teacher_probability <= 1.0:
            raise ValueError(
                "bc.dagger_teacher_probability must be in [0, 1]. "
                f"Received: {self.dagger_teacher_probability}"
            )


SETTINGS = BC
ACTION_LOSSES = ("squared", "absolute")
PREVIOUS_ACTIONS = ("own", "executed")
# DAgger's rounds record and fit on one machine (the harness refuses a cluster of workers).
MULTI_WORKER = False
# Checked before the run starts (settings_check).
RANGES = {
    "max_grad_norm": settings_check.POSITIVE, "dagger_rounds": settings_check.NON_NEGATIVE,
    "dagger_teacher_probability": settings_check.FRACTION, "noise_sensors": settings_check.NON_NEGATIVE,
    "streams_per_epoch": settings_check.NON_NEGATIVE,
}  # fmt: skip


def teacher_policy_dir(teacher_dir: str) -> str:
    """The teacher's greedy SavedModel: ``teacher_dir`` itself or ``<teacher_dir>/policies/greedy_policy``."""
    if os.path.exists(os.path.join(teacher_dir, "saved_model.pb")):
        return teacher_dir
    return os.path.join(teacher_dir, learner.POLICY_SAVED_MODEL_DIR, learner.GREEDY_POLICY_SAVED_MODEL_DIR)


def defaults(run: RunSettings, settings: BC) -> dict[str, Any]:
    """The run defaults for BC: the teacher's environment, 16 streams of 1000 steps, an AttentionNeuron."""
    values: dict[str, Any] = {
        "num_envs": 16,
        "encoder": sensor_networks.SENSOR_ENCODER,
        "total_env_steps": 16_000,
        "log_interval": 1,
        "summary_interval": 1,
        "eval_interval": 0,
        "num_eval_episodes": 10,
        "checkpoint_interval": 1,
        "policy_save_interval": 1,
    }
    if run.env_name is None:
        try:
            description = policy_network.read_description(settings.teacher_dir)
        except FileNotFoundError as error:
            raise ValueError(
                f"No environment given and {settings.teacher_dir!r} has no {policy_network.DESCRIPTION_FILE} "
                "to read it from: set train_eval.env_name."
            ) from error
        values.update(
            env_name=description.env_name, env_kwargs={**description.env_kwargs, **dict(run.env_kwargs or {})}
        )
    return values


def minibatch_size(run: RunSettings, settings: BC) -> int:
    """Observations per gradient step: a chunk of ``sequence_length`` steps of every stream."""
    return run.num_envs * settings.sequence_length


def stored_observations(run: RunSettings, settings: BC) -> tuple[int, str]:
    """Observations kept at once (every round's recorded steps) and the binding that sets them."""
    return run.total_env_steps, "train_eval.total_env_steps"


def check(run: RunSettings, settings: BC) -> None:
    """Raises ``ValueError`` for settings that do not fit together (before the run starts)."""
    encoders.check_encoder(run.encoder, "bc")
    if settings.previous_action_noise and run.encoder != sensor_networks.SENSOR_ENCODER:
        raise ValueError(
            f"bc.previous_action_noise needs the {sensor_networks.SENSOR_ENCODER!r} student, whose actor "
            f"sees its previous action. Received: encoder={run.encoder!r}"
        )
    if settings.previous_action != "own" and run.encoder != sensor_networks.SENSOR_ENCODER:
        raise ValueError(
            f"bc.previous_action needs the {sensor_networks.SENSOR_ENCODER!r} student, whose actor sees "
            f"its previous action, to feed it the executed one. Received: encoder={run.encoder!r}"
        )
    if settings.noise_sensors and run.encoder != sensor_networks.SENSOR_ENCODER:
        raise ValueError(
            f"bc.noise_sensors needs the {sensor_networks.SENSOR_ENCODER!r} student, which takes any number "
            f"of readings. Received: encoder={run.encoder!r}"
        )
    rounds = settings.dagger_rounds + 1
    streams = run.num_envs * rounds
    if run.total_env_steps % streams or (run.total_env_steps // streams) % settings.sequence_length:
        each_round = f"{rounds} rounds (dagger_rounds + 1) of " if rounds > 1 else ""
        raise ValueError(
            f"total_env_steps = {run.total_env_steps} must be {each_round}num_envs = {run.num_envs} "
            f"streams of a multiple of sequence_length = {settings.sequence_length} steps."
        )
    if not os.path.exists(os.path.join(teacher_policy_dir(settings.teacher_dir), "saved_model.pb")):
        raise ValueError(
            f"No teacher policy at {teacher_policy_dir(settings.teacher_dir)!r} (bc.teacher_dir = "
            f"{settings.teacher_dir!r}): expected a training folder with policies/greedy_policy."
        )


@dataclasses.dataclass
class TeacherData:
    """``num_envs`` streams of ``steps`` consecutive steps of the teacher (batch-major).

    Attributes:
      observations: ``(E, S, D)``.
      step_types: ``(E, S)`` int32.
      actions: the teacher's actions, ``(E, S, *action_shape)``.
      episode_returns: returns of the episodes that ended during collection.
      executed: the actions the environments executed, like ``actions``: the
        teacher's in round 0, the acting student's (or, mixed in, the teacher's)
        in a DAgger round; ``None`` in data recorded before they were kept.
    """

    observations: np.ndarray
    step_types: np.ndarray
    actions: np.ndarray
    episode_returns: list[float]
    executed: np.ndarray | None = None

    def previous_actions(self, action_spec: tensor_spec.BoundedTensorSpec) -> np.ndarray:
        """``(E, S, A)`` float32: at each step the action executed one step before (one-hot for
        discrete actions, as ``SensorActorNetwork`` feeds its own), zero at FIRST steps and at
        each stream's first step (a recording starts with a new episode)."""
        if self.executed is None:
            raise ValueError(
                "These recorded rounds hold no executed actions (recorded before they were kept): "
                "bc.previous_action = 'executed' needs a run recorded anew."
            )
        executed = self.executed
        if tensor_spec.is_discrete(action_spec):
            index = (executed - action_spec.minimum).astype(np.int64).reshape(executed.shape[:2])
            executed = np.eye(int(action_spec.maximum - action_spec.minimum + 1), dtype=np.float32)[index]
        executed = executed.reshape(*executed.shape[:2], -1).astype(np.float32)
        previous = np.zeros_like(executed)
        previous[:, 1:] = executed[:, :-1]
        previous[self.step_types == ts.StepType.FIRST] = 0.0
        return previous

    @property
    def weights(self) -> np.ndarray:
        """1 where the action counts: every step but LAST (the environment ignores its action)."""
        return (self.step_types != ts.StepType.LAST).astype(np.float32)


class TeacherRecorder:
    """A trajectory observer that records observations, step types, actions and episode returns."""

    def __init__(self, num_envs: int):
        self._steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._running = np.zeros(num_envs, np.float64)
        self._returns: list[float] = []

    def __call__(self, trajectory: trajectory_lib.Trajectory) -> None:
        # The teacher's label where the student acted (DAggerPolicy), else the action taken.
        info = trajectory.policy_info
        label = info[LABEL] if isinstance(info, dict) and LABEL in info else trajectory.action
        self._steps.append(
            (
                np.asarray(trajectory.observation),
                np.asarray(trajectory.step_type, np.int32),
                np.asarray(label),
                np.asarray(trajectory.action),
            )
        )
        # TF-Agents auto-reset: the transition from a LAST step to the next FIRST one is no step.
        self._running += np.where(
            np.asarray(trajectory.is_boundary()), 0.0, np.asarray(trajectory.reward, np.float64)
        )
        for i in np.flatnonzero(np.asarray(trajectory.is_last())):
            self._returns.append(float(self._running[i]))
            self._running[i] = 0.0

    def data(self) -> TeacherData:
        observations, step_types, actions, executed = (
            np.stack(parts, axis=1) for parts in zip(*self._steps, strict=True)
        )
        return TeacherData(observations, step_types, actions, list(self._returns), executed)


def collect_teacher_data(policy: py_policy.PyPolicy, env, steps: int, metrics: Sequence = ()) -> TeacherData:
    """Runs ``policy`` for ``steps`` batched steps of ``env`` (batched, auto-reset) and records them."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1. Received: {steps}")
    recorder = TeacherRecorder(env.batch_size)
    driver = FixedLengthDriver(env, policy, [recorder, *metrics], steps)
    driver.run(env.reset(), policy.get_initial_state(env.batch_size))
    return recorder.data()


def bc_loss(
    distribution, actions: tf.Tensor, weights: tf.Tensor, discrete: bool, action_loss: str = "squared"
) -> tf.Tensor:
    """The weighted mean over steps of the mode's error (continuous: squared or absolute,
    ``BC.action_loss``) or of the cross-entropy (discrete)."""
    if discrete:
        per_step = -distribution.log_prob(actions)
    else:
        error = tf.cast(distribution.mode(), tf.float32) - tf.cast(actions, tf.float32)
        error = tf.abs(error) if action_loss == "absolute" else tf.square(error)
        per_step = tf.reduce_mean(tf.reshape(error, tf.concat([tf.shape(weights), [-1]], 0)), -1)
    weights = tf.cast(weights, per_step.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(per_step * weights), tf.reduce_sum(weights))


def build(run: Run, settings: BC) -> Algorithm:
    """A student actor and Adam, trained on the recorded rounds by ``Cloning.train`` (its own schedule)."""
    rs = run.settings
    network_kwargs = encoders.actor_network_kwargs(
        rs.encoder, rs.encoder_kwargs, settings.fc_layer_params, settings.previous_action_noise
    )
    student = encoders.actor_network(run.observation_spec, run.action_spec, **network_kwargs)
    student.create_variables()
    optimizer = tf_keras.optimizers.Adam(_learning_rate(settings, steps_per_round(rs, settings)))
    stochastic = actor_policy.ActorPolicy(run.time_step_spec, run.action_spec, student)
    eval_policy = greedy_policy.GreedyPolicy(stochastic)
    return Algorithm(
        agent=_StudentPolicies(stochastic),
        eval_policy=eval_policy,
        # The object path of a TF-Agents agent's actor: policy_network.restore_network finds it.
        checkpoint_objects={"agent": tf.train.Checkpoint(_actor_net=student), "optimizer": optimizer},
        description={
            "agent": AGENT,
            "network": student,
            "network_kwargs": network_kwargs,
            "checkpoint_attribute": "_actor_net",
            "extra": {"teacher": os.path.abspath(teacher_policy_dir(settings.teacher_dir))},
        },
        train=Cloning(run, settings, student, optimizer, eval_policy).train,
    )


class Cloning:
    """The rounds of behaviour cloning (DAgger after the first): record, then train epochs on all rounds."""

    def __init__(self, run: Run, settings: BC, student, optimizer, eval_policy: greedy_policy.GreedyPolicy):
        self.run = run
        self.settings = settings
        self.student = student
        self.eval_policy = eval_policy
        self._train_chunk = _train_chunk_fn(
            student, optimizer, run.train_step, tensor_spec.is_discrete(run.action_spec),
            settings.max_grad_norm, run.jit_compile, settings.action_loss,
        )  # fmt: skip

    def train(self, loop: TrainingLoop) -> dict[str, Any]:
        """Round 0: the teacher acts; each DAgger round: the student acts and the teacher labels.

        Every round adds ``total_env_steps / (dagger_rounds + 1)`` recorded steps
        to the data and trains ``num_epochs`` passes over all of it. The data
        are saved after each collection (``DATA_FILE``), so that a resumed run
        trains on what the checkpointed student saw.
        """
        rs, settings = self.run.settings, self.settings
        teacher = evaluate.load_policy(teacher_policy_dir(settings.teacher_dir))
        steps_per_env = rs.total_env_steps // rs.num_envs // (settings.dagger_rounds + 1)
        chunks = steps_per_env // settings.sequence_length
        round_steps = steps_per_round(rs, settings)
        data_path = os.path.join(self.run.root_dir, DATA_FILE)
        rounds = load_rounds(data_path) if os.path.exists(data_path) else []
        writer = tf.summary.create_file_writer(os.path.join(self.run.root_dir, "train"))
        history: list[dict[str, Any]] = []
        collect_seconds = train_seconds = 0.0
        bar = harness.progress_bar((settings.dagger_rounds + 1) * round_steps, loop.train_step(), rs.progress)
        driver = None
        for round_index in range(settings.dagger_rounds + 1):
            if loop.train_step() >= (round_index + 1) * round_steps:
                continue  # trained before a resume
            if len(rounds) <= round_index:
                start = time.perf_counter()
                behaviour = teacher if round_index == 0 else self._dagger_policy(teacher, round_index)
                recorder = TeacherRecorder(rs.num_envs)
                driver = loop.driver(behaviour, [recorder], steps_per_env)
                driver.run(self.run.env.reset(), behaviour.get_initial_state(rs.num_envs))
                rounds.append(recorder.data())
                save_rounds(data_path, rounds)
                collect_seconds += time.perf_counter() - start
            self.run.env_steps.assign((round_index + 1) * steps_per_env * rs.num_envs)
            data = concatenate(rounds[: round_index + 1])
            start = time.perf_counter()
            first_epoch = max(loop.train_step() - round_index * round_steps, 0) // chunks
            for epoch in range(first_epoch, settings.num_epochs):
                # Its own random stream per epoch, so that a resumed run draws the same streams
                # and noise channels.
                epoch_rng = np.random.default_rng((rs.seed, round_index, epoch))
                streams = sample_streams(data, settings.streams_per_epoch, epoch_rng)
                loss = self._train_epoch(streams, chunks, writer, bar, loop, epoch_rng)
                history.append(
                    {"round": round_index, "epoch": epoch + 1, "loss": loss, "train_step": loop.train_step()}
                )
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
                loop.save_checkpoint()
            train_seconds += time.perf_counter() - start
        bar.close()
        writer.flush()

        speed = harness.Timer()
        if driver is not None:
            speed.add(rs.total_env_steps, driver, collect_seconds, train_seconds)
        values = {"teacher_data_episodes": len(rounds[0].episode_returns) if rounds else 0}
        if history:
            values["loss"] = history[-1]["loss"]
        results = loop.log(rs.total_env_steps, values, speed.speed())
        results.update(collect_seconds=collect_seconds, train_seconds=train_seconds)
        if rs.policy_save_interval:
            loop.exporter.save()
        if loop.evaluator is not None:
            loop.evaluation = loop.evaluator(rs.total_env_steps, loop.train_step())
            results["teacher"] = loop.evaluator.summary_of(teacher)
        return loop.finish(results, history)

    def _train_epoch(
        self, data: TeacherData, chunks: int, writer, bar, loop: TrainingLoop, noise_rng: np.random.Generator
    ) -> float:
        """One pass over ``data`` in order, chunk by chunk, carrying the student's state; the mean loss."""
        length = self.settings.sequence_length
        observations, sensor_mask = with_noise_sensors(
            data.observations, self.settings.noise_sensors, noise_rng
        )
        executed = self.settings.previous_action == "executed"
        previous_actions = data.previous_actions(self.run.action_spec) if executed else None
        if sensor_mask is None:
            state = self.student.get_initial_state(observations.shape[0])
        else:
            state = self.student.initial_state(observations.shape[0], observations.shape[-1])
        losses = []
        for chunk in range(chunks):
            window = slice(chunk * length, (chunk + 1) * length)
            loss, state = self._train_chunk(
                tf.constant(observations[:, window]),
                tf.constant(data.step_types[:, window]),
                tf.constant(data.actions[:, window]),
                tf.constant(data.weights[:, window]),
                state,
                None if sensor_mask is None else tf.constant(sensor_mask[:, window]),
                None if previous_actions is None else tf.constant(previous_actions[:, window]),
            )
            losses.append(float(loss))
            if loop.train_step() % self.run.settings.summary_interval == 0:
                with writer.as_default(step=loop.train_step()):
                    tf.summary.scalar("Losses/bc_loss", loss)
            bar.update(1)
        return float(np.mean(losses))

    def _dagger_policy(self, teacher: py_policy.PyPolicy, round_index: int) -> DAggerPolicy:
        student = py_tf_eager_policy.PyTFEagerPolicy(
            self.eval_policy, use_tf_function=True, batch_time_steps=False
        )
        # The mixing draws its own stream per round, apart from the environments' seeds.
        seed = (self.run.settings.seed, round_index)
        return DAggerPolicy(student, teacher, self.settings.dagger_teacher_probability, seed)


def with_noise_sensors(
    observations: np.ndarray, noise_sensors: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(E, S, D)`` readings with ``noise_sensors`` white-noise channels after them, and which are present.

    Each stream ``e`` has the first ``n_e`` noise channels present, ``n_e``
    uniform in ``0..noise_sensors``, for the whole of ``observations``; the
    noise is ``N(0, sensor_permutation.NOISE_STD^2)``, fresh at every step (the
    paper's noise test). Returns ``(observations, None)`` when
    ``noise_sensors`` is 0, else ``(E, S, D + noise_sensors)`` readings and a
    bool mask of that shape for ``SensorActorNetwork.call``.
    """
    if not noise_sensors:
        return observations, None
    streams, steps, num_sensors = observations.shape
    noise = rng.normal(0.0, sensor_permutation.NOISE_STD, (streams, steps, noise_sensors))
    present = np.arange(noise_sensors) < rng.integers(0, noise_sensors + 1, streams)[:, None]
    mask = np.concatenate([np.ones((streams, num_sensors), bool), present], axis=1)
    extended = np.concatenate([observations, noise.astype(observations.dtype)], axis=-1)
    return extended, np.broadcast_to(mask[:, None], extended.shape)


def sample_streams(data: TeacherData, count: int, rng: np.random.Generator) -> TeacherData:
    """``count`` of ``data``'s streams drawn without replacement, in their recorded order; all if ``count``
    is 0 or at least their number (``bc.streams_per_epoch``). Draws nothing from ``rng`` then."""
    total = data.observations.shape[0]
    if not count or count >= total:
        return data
    chosen = np.sort(rng.choice(total, count, replace=False))
    return TeacherData(
        data.observations[chosen], data.step_types[chosen], data.actions[chosen], data.episode_returns,
        None if data.executed is None else data.executed[chosen],
    )  # fmt: skip


DATA_FILE = "bc_data.npz"
"""The recorded rounds of a BC run (observations, step types, teacher actions, returns per round)."""


def concatenate(rounds: Sequence[TeacherData]) -> TeacherData:
    """The rounds' streams side by side: ``(rounds * E, S, ...)``."""
    executed = [r.executed for r in rounds]
    return TeacherData(
        np.concatenate([r.observations for r in rounds]),
        np.concatenate([r.step_types for r in rounds]),
        np.concatenate([r.actions for r in rounds]),
        [x for r in rounds for x in r.episode_returns],
        None if any(e is None for e in executed) else np.concatenate(executed),
    )


def save_rounds(path: str, rounds: Sequence[TeacherData]) -> None:
    """Writes the rounds atomically (a kill leaves the previous file)."""
    arrays = {}
    for i, r in enumerate(rounds):
        arrays[f"observations_{i}"] = r.observations
        arrays[f"step_types_{i}"] = r.step_types
        arrays[f"actions_{i}"] = r.actions
        arrays[f"returns_{i}"] = np.asarray(r.episode_returns, np.float64)
        if r.executed is not None:
            arrays[f"executed_{i}"] = r.executed
    temporary = path + ".tmp.npz"
    np.savez(temporary, **arrays)
    os.replace(temporary, path)


def load_rounds(path: str) -> list[TeacherData]:
    """The rounds of ``save_rounds``; a damaged file is an error naming it."""
    try:
        with np.load(path) as arrays:
            count = sum(1 for name in arrays.files if name.startswith("observations_"))
            return [
                TeacherData(
                    arrays[f"observations_{i}"],
                    arrays[f"step_types_{i}"],
                    arrays[f"actions_{i}"],
                    [float(x) for x in arrays[f"returns_{i}"]],
                    arrays[f"executed_{i}"] if f"executed_{i}" in arrays.files else None,
                )  # fmt: skip
                for i in range(count)
            ]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"Damaged behaviour-cloning data {path!r} ({error}); move it away to start over."
        ) from error


class DAggerPolicy:
    """The student acts, the teacher labels (DAgger, Ross et al. 2011): the recorded action is the teacher's.

    Both see every step and keep their own state; in each environment and
    step, the executed action is the teacher's with probability
    ``teacher_probability``, else the student's. The teacher's action is the
    ``policy_info`` label that ``TeacherRecorder`` records.
    """

    def __init__(self, student, teacher, teacher_probability: float, seed: int | Sequence[int]):
        self._student, self._teacher = student, teacher
        self._probability = teacher_probability
        self._random = np.random.default_rng(seed)

    def get_initial_state(self, batch_size: int):
        return (self._student.get_initial_state(batch_size), self._teacher.get_initial_state(batch_size))

    def action(self, time_step, policy_state=()):
        student_state, teacher_state = policy_state
        student_step = self._student.action(time_step, student_state)
        teacher_step = self._teacher.action(time_step, teacher_state)
        label = np.asarray(teacher_step.action)
        executed = np.asarray(student_step.action)
        if self._probability > 0:
            chosen = self._random.random(label.shape[0]) < self._probability
            executed = np.where(chosen.reshape((-1,) + (1,) * (label.ndim - 1)), label, executed)
        return student_step._replace(
            action=executed, state=(student_step.state, teacher_step.state), info={LABEL: label}
        )


LABEL = "teacher_action"


class _StudentPolicies:
    """What ``PolicySavedModelTrigger`` reads of an agent: ``policy`` (saved as ``policy`` and,
    wrapped in ``GreedyPolicy``, as ``greedy_policy``) and ``post_process_policy`` (nothing to do)."""

    def __init__(self, policy: actor_policy.ActorPolicy):
        self.policy = policy

    def post_process_policy(self) -> actor_policy.ActorPolicy:
        return self.policy


def steps_per_round(run: RunSettings, settings: BC) -> int:
    """Gradient steps per round: ``num_epochs`` passes over chunks of ``sequence_length`` steps."""
    steps_per_env = run.total_env_steps // run.num_envs // (settings.dagger_rounds + 1)
    return settings.num_epochs * (steps_per_env // settings.sequence_length)


class RoundLinearDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """``initial * (1 - (step mod steps_per_round) / steps_per_round)``: linear to 0, restarted each round.

    ``step`` is the optimizer's iteration count, which the checkpoint keeps,
    so a resumed run continues the schedule where it stopped.
    """

    def __init__(self, initial_learning_rate: float, steps_per_round: int):
        self.initial_learning_rate = initial_learning_rate
        self.steps_per_round = steps_per_round

    def __call__(self, step):
        fraction = tf.cast(step % self.steps_per_round, tf.float32) / self.steps_per_round
        return self.initial_learning_rate * (1.0 - fraction)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "steps_per_round": self.steps_per_round}


def _learning_rate(settings: BC, round_steps: int):
    if not settings.anneal_learning_rate:
        return settings.learning_rate
    return RoundLinearDecay(settings.learning_rate, max(round_steps, 1))


def _train_chunk_fn(student, optimizer, train_step: tf.Variable, discrete: bool, max_grad_norm: float,
                    jit_compile: bool, action_loss: str = "squared"):  # fmt: skip
    """One gradient step on a chunk ``(E, L, ...)`` from the carried state: ``(loss, next state)``.

    With ``jit_compile``, the step runs XLA-compiled (``xla.compile_with_xla``);
    the loss summary is written by the training loop, outside it.
    """

    def train_chunk(
        observations, step_types, actions, weights, state, sensor_mask=None, previous_actions=None
    ):
        with tf.GradientTape() as tape:
            # With a sensor mask (noise channels) or given previous actions, ``call``: ``__call__``
            # holds the readings to the spec's D and takes neither.
            extra = {"sensor_mask": sensor_mask, "previous_actions": previous_actions}
            extra = {name: value for name, value in extra.items() if value is not None}
            forward = functools.partial(student.call, **extra) if extra else student
            distribution, new_state = forward(
                observations, step_type=step_types, network_state=state, training=True
            )
            loss = bc_loss(distribution, actions, weights, discrete, action_loss)
        variables = student.trainable_variables
        gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), max_grad_norm)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        train_step.assign_add(1)
        return loss, tf.nest.map_structure(tf.stop_gradient, new_state)

    return tf.function(xla.compile_with_xla(train_chunk) if jit_compile else train_chunk, autograph=False)
