"""Behaviour cloning of a trained policy into a permutation-invariant student: ``sit-distill``.

    sit-distill --root_dir runs/cartpole_pi_bc --teacher_dir runs/cartpole_mlp \\
        --num_envs 16 --collect_steps_per_env 2000 --num_epochs 20

Tang & Ha (NeurIPS 2021) section 4.2 and appendix A.4.2 (Ant) / A.4.3 (Pong)
turn policies trained with other methods into permutation-invariant ones:

1. data: the teacher's greedy policy (``<teacher_dir>/policies/greedy_policy``,
   any agent, any network, recurrent or not) acts in ``num_envs``
   environments for ``collect_steps_per_env`` steps each; the observations,
   step types and its actions are recorded (the paper: 1000 teacher
   roll-outs). The teacher acts throughout (plain behaviour cloning, no
   DAgger, as in the paper).
2. student: ``sensor_networks.SensorActorNetwork`` (AttentionNeuron, then
   dense layers; the paper's larger Ant student has two FC layers of 128).
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
previous action is its own mode (``sensor_networks``), where the paper feeds
the recorded action with N(0, 0.03) noise: the student is trained on the
input it will see when it acts.

Outputs under ``root_dir``, a training folder like ``sit-train``'s:
``checkpoints/`` (``agent._actor_net`` is the student, with the optimizer and
``train_step``; a rerun resumes from the newest, at an epoch boundary),
``policy_network.json`` (agent ``"bc"``), ``policies/greedy_policy`` and
``policies/policy`` (TF-Agents SavedModels for ``sit-eval``), ``train/``
(TensorBoard: the loss) and ``distill.json`` (settings and results).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from absl import app, flags
from tf_agents.policies import actor_policy, greedy_policy, policy_saver, py_policy, py_tf_eager_policy
from tf_agents.specs import tensor_spec
from tf_agents.train import learner
from tf_agents.train.utils import spec_utils, train_utils
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common
from tqdm import tqdm

from sit_keras import xla
from sit_keras.agents import evaluate, policy_network
from sit_keras.agents.console import quiet_library_logs
from sit_keras.agents.environments import load
from sit_keras.agents.sensor_networks import SensorActorNetwork

AGENT = "bc"
"""The ``agent`` of the student's ``policy_network.json``: a distribution actor, acting by its mode."""


@dataclasses.dataclass
class TeacherData:
    """``num_envs`` streams of ``steps`` consecutive steps of the teacher (batch-major).

    Attributes:
      observations: ``(E, S, D)``.
      step_types: ``(E, S)`` int32.
      actions: the teacher's actions, ``(E, S, *action_shape)``.
      episode_returns: returns of the episodes that ended during collection.
    """

    observations: np.ndarray
    step_types: np.ndarray
    actions: np.ndarray
    episode_returns: list[float]

    @property
    def weights(self) -> np.ndarray:
        """1 where the action counts: every step but LAST (the environment ignores its action)."""
        return (self.step_types != ts.StepType.LAST).astype(np.float32)


def teacher_policy_dir(teacher_dir: str) -> str:
    """The teacher's greedy SavedModel: ``teacher_dir`` itself or ``<teacher_dir>/policies/greedy_policy``."""
    if os.path.exists(os.path.join(teacher_dir, "saved_model.pb")):
        return teacher_dir
    return os.path.join(teacher_dir, learner.POLICY_SAVED_MODEL_DIR, learner.GREEDY_POLICY_SAVED_MODEL_DIR)


def collect_teacher_data(policy: py_policy.PyPolicy, env, steps: int) -> TeacherData:
    """Runs ``policy`` for ``steps`` batched steps of ``env`` (batched, auto-reset) and records them."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1. Received: {steps}")
    observations, step_types, actions, returns = [], [], [], []
    running = np.zeros(env.batch_size, np.float64)
    time_step = env.reset()
    state = policy.get_initial_state(env.batch_size)
    for _ in range(steps):
        action_step = policy.action(time_step, state)
        observations.append(np.asarray(time_step.observation))
        step_types.append(np.asarray(time_step.step_type, np.int32))
        actions.append(np.asarray(action_step.action))
        next_time_step = env.step(action_step.action)
        # TF-Agents auto-reset: the step after LAST is FIRST, with reward 0.
        running += np.where(
            np.asarray(time_step.is_last()), 0.0, np.asarray(next_time_step.reward, np.float64)
        )
        for i in np.flatnonzero(np.asarray(next_time_step.is_last())):
            returns.append(float(running[i]))
            running[i] = 0.0
        time_step, state = next_time_step, action_step.state
    return TeacherData(
        observations=np.stack(observations, axis=1),
        step_types=np.stack(step_types, axis=1),
        actions=np.stack(actions, axis=1),
        episode_returns=returns,
    )


def bc_loss(distribution, actions: tf.Tensor, weights: tf.Tensor, discrete: bool) -> tf.Tensor:
    """The weighted mean over steps of the mode's squared error (continuous) or cross-entropy (discrete)."""
    if discrete:
        per_step = -distribution.log_prob(actions)
    else:
        error = tf.cast(distribution.mode(), tf.float32) - tf.cast(actions, tf.float32)
        per_step = tf.reduce_mean(tf.reshape(tf.square(error), tf.concat([tf.shape(weights), [-1]], 0)), -1)
    weights = tf.cast(weights, per_step.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(per_step * weights), tf.reduce_sum(weights))


def _teacher_environment(teacher_dir: str, env_name: str | None, env_kwargs: Mapping[str, Any] | None):
    """The environment to clone in: the given one, or the teacher's training environment."""
    if env_name is not None:
        return env_name, dict(env_kwargs or {})
    try:
        description = policy_network.read_description(teacher_dir)
    except FileNotFoundError as error:
        raise ValueError(
            f"No environment given and {teacher_dir!r} has no {policy_network.DESCRIPTION_FILE} to read it "
            "from: pass env_name (--env)."
        ) from error
    return description.env_name, {**description.env_kwargs, **dict(env_kwargs or {})}


def distill(
    root_dir: str,
    teacher_dir: str,
    env_name: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    # Data: num_envs streams of collect_steps_per_env teacher steps.
    num_envs: int = 16,
    collect_steps_per_env: int = 1000,
    # Student: SensorSetEncoder arguments and the dense layers after it.
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (128, 128),
    # Training (appendix A.4.2: Adam 1e-3, gradient norm 0.5).
    sequence_length: int = 50,
    num_epochs: int = 10,
    learning_rate: float = 1e-3,
    max_grad_norm: float = 0.5,
    eval_episodes: int = 0,
    seed: int = 0,
    progress: bool = True,
    # XLA for the train step (sit_keras.xla): "auto" (on with a GPU), True / "on", False / "off".
    jit_compile: bool | str = "auto",
) -> dict[str, Any]:
    """Clones the teacher's greedy policy into a ``SensorActorNetwork``; returns losses and returns.

    Args:
      root_dir: output folder (see the module docstring); a rerun resumes.
      teacher_dir: a training folder (with ``policies/greedy_policy``) or a
        saved policy folder.
      env_name, env_kwargs: ``environments.load`` arguments; default: the
        teacher's ``policy_network.json``. Vector observations only.
      num_envs, collect_steps_per_env: the data, ``num_envs`` streams of
        ``collect_steps_per_env`` consecutive steps (a multiple of
        ``sequence_length``).
      encoder_kwargs, fc_layer_params: the student (``SensorActorNetwork``).
      sequence_length: steps per chunk of truncated back-propagation.
      num_epochs: passes over the data.
      learning_rate, max_grad_norm: Adam and gradient clipping.
      eval_episodes: if > 0, the teacher and the student each play this many
        episodes (``evaluate.evaluate``, its held-out seeds) at the end.
      seed: environment and TensorFlow seed.
      progress: show a progress bar.
      jit_compile: compile the train step with XLA (``xla.resolve_jit_compile``;
        ``"auto"``: when a GPU is visible); the resolved value is a setting in
        ``distill.json``.

    Returns:
      ``{"loss": last epoch's mean loss, "train_step", "teacher_data_return"
      (mean return of the episodes in the data), "history": per-epoch
      losses}``, plus ``"student"`` / ``"teacher"`` evaluation summaries when
      ``eval_episodes > 0``.

    Raises:
      ValueError: inconsistent sizes, image observations, no environment, an
        unknown ``jit_compile`` setting.
    """
    jit_compile = xla.resolve_jit_compile(jit_compile)
    if sequence_length < 1 or collect_steps_per_env % sequence_length:
        raise ValueError(
            f"collect_steps_per_env = {collect_steps_per_env} must be a positive multiple of "
            f"sequence_length = {sequence_length}."
        )
    env_name, env_kwargs = _teacher_environment(teacher_dir, env_name, env_kwargs)
    teacher = evaluate.load_policy(teacher_policy_dir(teacher_dir))
    os.makedirs(root_dir, exist_ok=True)
    # Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's.
    tf_keras.utils.set_random_seed(seed)
    env = load(env_name, num_envs=num_envs, seed=seed, **env_kwargs)
    try:
        observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)
        student = SensorActorNetwork(observation_spec, action_spec, encoder_kwargs, fc_layer_params)
        student.create_variables()
        collect_start = time.perf_counter()
        data = collect_teacher_data(teacher, env, collect_steps_per_env)
        collect_seconds = time.perf_counter() - collect_start
    finally:
        env.close()

    train_step = train_utils.create_train_step()
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    checkpointer = common.Checkpointer(
        os.path.join(root_dir, policy_network.CHECKPOINT_DIR),
        max_to_keep=3,
        # The object path of a TF-Agents agent's actor: policy_network.restore_network finds it.
        agent=tf.train.Checkpoint(_actor_net=student),
        optimizer=optimizer,
        train_step=train_step,
    )
    checkpointer.initialize_or_restore().expect_partial()
    network_kwargs = {"encoder_kwargs": dict(encoder_kwargs or {}), "fc_layer_params": tuple(fc_layer_params)}
    policy_network.write_description(
        root_dir, agent=AGENT, network=student, network_kwargs=network_kwargs,
        checkpoint_attribute="_actor_net", env_name=env_name, env_kwargs=env_kwargs,
        extra={"teacher": os.path.abspath(teacher_policy_dir(teacher_dir))},
    )  # fmt: skip

    discrete = tensor_spec.is_discrete(action_spec)
    train_chunk = _train_chunk_fn(student, optimizer, train_step, discrete, max_grad_norm, jit_compile)
    chunks = collect_steps_per_env // sequence_length
    first_epoch = int(train_step.numpy()) // chunks
    writer = tf.summary.create_file_writer(os.path.join(root_dir, "train"))
    history: list[dict[str, float]] = []
    bar = tqdm(total=num_epochs * chunks, initial=first_epoch * chunks, unit="step", disable=not progress)
    train_start = time.perf_counter()
    for epoch in range(first_epoch, num_epochs):
        state = student.get_initial_state(num_envs)
        losses = []
        for chunk in range(chunks):
            window = slice(chunk * sequence_length, (chunk + 1) * sequence_length)
            loss, state = train_chunk(
                tf.constant(data.observations[:, window]),
                tf.constant(data.step_types[:, window]),
                tf.constant(data.actions[:, window]),
                tf.constant(data.weights[:, window]),
                state,
            )
            losses.append(float(loss))
            with writer.as_default(step=int(train_step.numpy())):
                tf.summary.scalar("losses/bc", loss)
            bar.update(1)
        history.append(
            {"epoch": epoch + 1, "loss": float(np.mean(losses)), "train_step": int(train_step.numpy())}
        )
        bar.set_postfix(loss=f"{history[-1]['loss']:.4f}", refresh=False)
        checkpointer.save(train_step)
    bar.close()
    train_seconds = time.perf_counter() - train_start
    writer.flush()

    greedy = _save_policies(root_dir, time_step_spec, action_spec, student, train_step)
    results: dict[str, Any] = {
        "loss": history[-1]["loss"] if history else None,
        "train_step": int(train_step.numpy()),
        "teacher_data_return": float(np.mean(data.episode_returns)) if data.episode_returns else None,
        "teacher_data_episodes": len(data.episode_returns),
        "collect_seconds": collect_seconds,
        "train_seconds": train_seconds,
    }
    if eval_episodes > 0:
        student_py = py_tf_eager_policy.PyTFEagerPolicy(greedy, use_tf_function=True, batch_time_steps=False)
        for name, policy in (("teacher", teacher), ("student", student_py)):
            summary = evaluate.evaluate(
                policy, env_name, num_episodes=eval_episodes, num_envs=min(num_envs, eval_episodes),
                env_kwargs=env_kwargs,
            )  # fmt: skip
            results[name] = summary["none"]
    settings = {
        "teacher_dir": teacher_dir, "env_name": env_name, "env_kwargs": env_kwargs, "num_envs": num_envs,
        "collect_steps_per_env": collect_steps_per_env, "sequence_length": sequence_length,
        "num_epochs": num_epochs, "learning_rate": learning_rate, "max_grad_norm": max_grad_norm,
        **network_kwargs, "seed": seed, "jit_compile": jit_compile,
    }  # fmt: skip
    with open(os.path.join(root_dir, "distill.json"), "w") as f:
        json.dump({"settings": settings, "results": results, "history": history}, f, indent=2, default=list)
    return {**results, "history": history}


def _train_chunk_fn(student: SensorActorNetwork, optimizer, train_step: tf.Variable, discrete: bool,
                    max_grad_norm: float, jit_compile: bool):  # fmt: skip
    """One gradient step on a chunk ``(E, L, ...)`` from the carried state: ``(loss, next state)``.

    With ``jit_compile``, the step runs XLA-compiled (``xla.compile_with_xla``);
    the loss summary is written by the training loop, outside it.
    """

    def train_chunk(observations, step_types, actions, weights, state):
        with tf.GradientTape() as tape:
            distribution, new_state = student(
                observations, step_type=step_types, network_state=state, training=True
            )
            loss = bc_loss(distribution, actions, weights, discrete)
        variables = student.trainable_variables
        gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), max_grad_norm)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        train_step.assign_add(1)
        return loss, tf.nest.map_structure(tf.stop_gradient, new_state)

    return tf.function(xla.compile_with_xla(train_chunk) if jit_compile else train_chunk, autograph=False)


def _save_policies(root_dir: str, time_step_spec, action_spec, student, train_step: tf.Variable):
    """The student's greedy and stochastic TF-Agents policies as SavedModels; returns the greedy one."""
    stochastic = actor_policy.ActorPolicy(time_step_spec, action_spec, student)
    greedy = greedy_policy.GreedyPolicy(stochastic)
    policies_dir = os.path.join(root_dir, learner.POLICY_SAVED_MODEL_DIR)
    for name, policy in ((learner.GREEDY_POLICY_SAVED_MODEL_DIR, greedy), ("policy", stochastic)):
        policy_saver.PolicySaver(policy, train_step=train_step).save(os.path.join(policies_dir, name))
    return greedy


_FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string(
        "root_dir", None, "Output folder (a training folder); rerun with the same one to resume."
    )
    flags.DEFINE_string("teacher_dir", None, "The teacher: a sit-train folder or a saved policy folder.")
    flags.DEFINE_string("env", None, "Environment (default: the teacher's, from its policy_network.json).")
    flags.DEFINE_multi_string("env_kwarg", [], "key=value passed to environments.load.")
    flags.DEFINE_integer("num_envs", 16, "Environments (streams of teacher data).")
    flags.DEFINE_integer("collect_steps_per_env", 1000, "Teacher steps recorded per environment.")
    flags.DEFINE_string("encoder_kwargs", "{}", "SensorSetEncoder arguments of the student, as JSON.")
    flags.DEFINE_list("fc_layer_params", ["128", "128"], "Dense layers of the student after the encoder.")
    flags.DEFINE_integer("sequence_length", 50, "Steps per chunk of truncated back-propagation through time.")
    flags.DEFINE_integer("num_epochs", 10, "Passes over the teacher data.")
    flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate.")
    flags.DEFINE_float("max_grad_norm", 0.5, "Gradient clipping norm.")
    flags.DEFINE_integer(
        "eval_episodes", 10, "Episodes of teacher and student evaluation at the end (0: none)."
    )
    flags.DEFINE_integer("seed", 0, "Seed.")
    xla.define_jit_compile_flag()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``sit-distill``."""
    _define_flags()
    flags.mark_flags_as_required(["root_dir", "teacher_dir"])
    app.run(_main, argv=argv)


def _main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    quiet_library_logs()
    try:
        encoder_kwargs = json.loads(_FLAGS.encoder_kwargs)
    except json.JSONDecodeError as error:
        raise app.UsageError(f"--encoder_kwargs must be JSON. Received: {_FLAGS.encoder_kwargs!r}") from error
    results = distill(
        _FLAGS.root_dir,
        _FLAGS.teacher_dir,
        env_name=_FLAGS.env,
        env_kwargs=evaluate.parse_env_kwargs(_FLAGS.env_kwarg) if _FLAGS.env_kwarg else None,
        num_envs=_FLAGS.num_envs,
        collect_steps_per_env=_FLAGS.collect_steps_per_env,
        encoder_kwargs=encoder_kwargs,
        fc_layer_params=[int(n) for n in _FLAGS.fc_layer_params],
        sequence_length=_FLAGS.sequence_length,
        num_epochs=_FLAGS.num_epochs,
        learning_rate=_FLAGS.learning_rate,
        max_grad_norm=_FLAGS.max_grad_norm,
        eval_episodes=_FLAGS.eval_episodes,
        seed=_FLAGS.seed,
        jit_compile=_FLAGS.jit_compile,
    )
    results.pop("history")
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()})


if __name__ == "__main__":
    main()
