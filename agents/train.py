"""PPO (+ DrAC) training of SiT-family policies with TF-Agents, and ``sit-train``.

    sit-train --root_dir runs/caveflyer_sit \\
        --gin_file configs/procgen/caveflyer_sit.gin \\
        --gin_bindings 'train_eval.total_env_steps = 1_000_000'

``sit-train`` runs the trainer a config names with ``train.agent``: ``'ppo'``
(the default, ``train_eval`` below), ``'sac'`` or ``'dqn'`` (``TRAINERS``).

One iteration: ``FixedLengthDriver`` runs the collect policy for
``collect_steps_per_env + 1`` steps of ``num_envs`` environments into a
``TFUniformReplayBuffer``; TF-Agents' ``PPOLearner`` computes GAE returns and
advantages (``agent.preprocess_sequence``) and runs ``num_epochs`` epochs of
``num_minibatches`` shuffled minibatches (of single steps; for recurrent
networks, of whole environment sequences); the buffer is cleared. The last step
of each environment only bootstraps the values (its own advantage is
unknown), so ``collect_steps_per_env`` steps per environment are trained on.

Outputs under ``root_dir``: ``train/`` (TensorBoard: losses against gradient
steps), ``collect/`` (TensorBoard: returns, lengths, success, normalised
score, steps/s and the hyper-parameters against environment steps),
``checkpoints/`` (agent, optimizer, counters; a rerun resumes from the
newest), ``policies/`` (TF-Agents SavedModels + weight checkpoints, for
``sit-eval``) and ``config.gin`` (the operative configuration).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging as std_logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
import tf_keras
from absl import app, flags
from tensorboard.plugins.hparams import api as hparams_api
from tf_agents.environments import py_environment
from tf_agents.metrics import py_metrics
from tf_agents.networks import network
from tf_agents.policies import py_tf_eager_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.train import learner, ppo_learner, triggers
from tf_agents.train.utils import spec_utils, train_utils
from tf_agents.utils import common
from tqdm import tqdm

from sit_keras import xla
from sit_keras.agents import checkpoints, networks, policy_network, sensor_networks
from sit_keras.agents.augmentation import make_augmentation
from sit_keras.agents.collection import (
    EpisodeSuccessMetric,
    FixedLengthDriver,
    NormalizedReturnMetric,
    metric_results,
)
from sit_keras.agents.console import quiet_library_logs
from sit_keras.agents.environments import load
from sit_keras.agents.ppo_agent import DrACPPOAgent

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The learner's ``tf.distribute`` strategy by name.

    ``"default"``: one device. ``"mirrored"``: ``MirroredStrategy`` over every
    GPU, or else every logical CPU. ``"multi_worker"``:
    ``MultiWorkerMirroredStrategy``, which reads the cluster from the
    ``TF_CONFIG`` environment variable (see the README); without it, the one
    local worker.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        # MirroredStrategy() alone would take CPU:0 only on a machine without GPUs.
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"Unknown strategy {name!r}. Expected one of: {', '.join(STRATEGIES)}.")


def _procgen_game(env_name: str) -> str | None:
    family, _, game = env_name.partition(":")
    return game if family == "procgen" else None


def _write_hyperparameters(writer, hyperparameters: Mapping[str, Any]) -> None:
    with writer.as_default():
        hparams_api.hparams(
            {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in hyperparameters.items()}
        )
        tf.summary.text("config/operative_gin", gin.operative_config_str().replace("\n", "  \n"), step=0)


@gin.configurable(denylist=["root_dir", "strategy"])
def train_eval(
    root_dir: str,
    # Environment.
    env_name: str = "procgen:caveflyer",
    env_kwargs: Mapping[str, Any] | None = None,
    num_envs: int = 64,
    # Networks: any networks.NETWORK_ENCODERS name, with build_encoder arguments, or
    # "attention_neuron" (sensor_networks, permutation-invariant) with SensorSetEncoder arguments.
    encoder: str = "sit",
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
    # The critic's torso; None: the actor's. Only the actor is deployed, so a
    # cheaper critic (e.g. "cnn") speeds up training without changing the policy's architecture.
    value_encoder: str | None = None,
    value_encoder_kwargs: Mapping[str, Any] | None = None,
    # PPO. Defaults: Raileanu et al. 2021 (PPO + DrAC on Procgen), with the SiT
    # paper's 96 minibatches and 2 epochs (section 5.2).
    total_env_steps: int = 25_000_000,
    collect_steps_per_env: int = 256,
    learning_rate: float = 5e-4,
    # Linear decay of the learning rate to 0 at total_env_steps (PPO's "anneal_lr").
    anneal_learning_rate: bool = False,
    adam_epsilon: float = 1e-5,
    discount: float = 0.999,
    gae_lambda: float = 0.95,
    entropy_coef: float = 0.01,
    value_coef: float = 0.5,
    clip_ratio: float = 0.2,
    max_grad_norm: float = 0.5,
    num_epochs: int = 2,
    num_minibatches: int = 96,
    normalize_rewards: bool = True,
    # DrAC (Raileanu et al. 2021): regulariser coefficient and augmentation.
    drac_coef: float = 0.1,
    augmentation: str = "crop",
    # Bookkeeping, in environment steps.
    checkpoint_interval: int = 100_000,
    policy_save_interval: int = 500_000,
    seed: int = 0,
    progress: bool = True,
    # XLA for the train step (sit_keras.xla): "auto" (on with a GPU), True / "on", False / "off".
    jit_compile: bool | str = "auto",
    strategy: tf.distribute.Strategy | None = None,
) -> dict[str, Any]:
    """Trains a PPO (+ DrAC) agent; returns the last metrics, counters and speeds, and a ``history``.

    Args:
      root_dir: output folder (see the module docstring); rerunning with the
        same folder resumes from its newest checkpoint.
      env_name, env_kwargs, num_envs: passed to ``environments.load``.
      encoder, encoder_kwargs, fc_layer_params: the actor's torso, and the
        value network's unless ``value_encoder`` is given (separate weights);
        see ``actor_network``. ``"attention_neuron"`` takes vector
        observations and is recurrent.
      value_encoder, value_encoder_kwargs: the value network's encoder.
      total_env_steps: stop once this many environment steps were collected.
      anneal_learning_rate: decay the learning rate linearly to 0 over the
        run's gradient steps; the late updates of a nearly solved task then
        cannot undo it.
      collect_steps_per_env: ``T`` of PPO (steps per environment and iteration).
      num_epochs, num_minibatches: passes over an iteration's data, and the
        number of minibatches it is split into (``num_envs * T`` must divide).
        Recurrent networks train on whole sequences: a minibatch is then
        ``num_envs / num_minibatches`` environments' ``T`` steps
        (``num_envs`` must divide), the same split in every epoch.
      drac_coef: 0 disables DrAC.
      checkpoint_interval, policy_save_interval: in environment steps; the
        policy is also exported at the end, unless ``policy_save_interval=0``
        (no exports at all, e.g. for benchmarks).
      jit_compile: compile the agent's train step with XLA
        (``xla.resolve_jit_compile``; ``"auto"``: when a GPU is visible and
        no ``strategy`` is given). The resolved value is the ``jit_compile``
        hyper-parameter in ``collect/``.
      strategy: a ``tf.distribute.Strategy`` for the learner (default: none).

    Raises:
      ValueError: inconsistent sizes, unknown names (environment, encoder,
        augmentation), an unknown ``jit_compile`` setting.
    """
    jit_compile = xla.resolve_jit_compile(jit_compile, strategy)
    steps_per_iteration = num_envs * collect_steps_per_env
    if num_minibatches < 1 or steps_per_iteration % num_minibatches:
        raise ValueError(
            f"num_envs * collect_steps_per_env = {steps_per_iteration} must be a multiple of "
            f"num_minibatches = {num_minibatches}."
        )
    strategy = strategy or tf.distribute.get_strategy()
    os.makedirs(root_dir, exist_ok=True)
    # Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's.
    tf_keras.utils.set_random_seed(seed)
    env = load(env_name, num_envs=num_envs, seed=seed, **dict(env_kwargs or {}))
    observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)

    with strategy.scope():
        train_step = train_utils.create_train_step()
        env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        actor_net, actor_kwargs = actor_network(
            observation_spec, action_spec, encoder, encoder_kwargs, fc_layer_params
        )
        if value_encoder is None:
            value_encoder, value_encoder_kwargs = encoder, encoder_kwargs
        value_net = value_network(observation_spec, value_encoder, value_encoder_kwargs, fc_layer_params)
        # Recurrent networks (AttentionNeuron) train on whole sequences, split by environment.
        recurrent = bool(actor_net.state_spec or value_net.state_spec)
        if recurrent and num_envs % num_minibatches:
            raise ValueError(
                f"With recurrent networks ({encoder!r}) a minibatch is a set of whole environment "
                f"sequences: num_envs = {num_envs} must be a multiple of num_minibatches = {num_minibatches}."
            )
        image_size = int(observation_spec.shape[0]) if observation_spec.shape.rank == 3 else 0
        agent = DrACPPOAgent(
            time_step_spec,
            action_spec,
            optimizer=tf_keras.optimizers.Adam(
                learning_rate=_learning_rate(
                    learning_rate,
                    anneal_learning_rate,
                    total_env_steps,
                    steps_per_iteration,
                    num_epochs * num_minibatches,
                ),
                epsilon=adam_epsilon,
            ),  # fmt: skip
            actor_net=actor_net,
            value_net=value_net,
            greedy_eval=False,
            importance_ratio_clipping=clip_ratio,
            lambda_value=gae_lambda,
            discount_factor=discount,
            entropy_regularization=entropy_coef,
            value_pred_loss_coef=value_coef,
            num_epochs=1,  # the learner repeats the data num_epochs times
            use_gae=True,
            use_td_lambda_return=True,
            normalize_rewards=normalize_rewards,
            normalize_observations=False,
            gradient_clipping=max_grad_norm,
            compute_value_and_advantage_in_train=False,
            update_normalizers_in_train=False,
            train_step_counter=train_step,
            augmentation=make_augmentation(augmentation, image_size) if drac_coef > 0 else None,
            drac_coef=drac_coef,
        )
        agent.initialize()
    if jit_compile:
        # Before the learner is made: it traces agent.train.
        agent.train = xla.compile_with_xla(agent.train)

    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=num_envs, max_length=collect_steps_per_env + 1
    )

    iterations = _IterationData(
        agent, replay_buffer, num_envs, collect_steps_per_env, num_minibatches if recurrent else None
    )
    ppo_learner_ = ppo_learner.PPOLearner(
        root_dir,
        train_step,
        agent,
        experience_dataset_fn=iterations.experience_dataset,
        normalization_dataset_fn=iterations.normalization_dataset,
        num_samples=iterations.num_samples,
        num_epochs=num_epochs,
        minibatch_size=None if recurrent else steps_per_iteration // num_minibatches,
        shuffle_buffer_size=steps_per_iteration,
        # Checkpoints are ours (below): they also hold the environment-step
        # counter, which the learner's do not.
        checkpoint_interval=-1,
        summary_interval=1,
        strategy=strategy,
    )
    checkpointer = checkpoints.restore_training(
        root_dir, env_steps, "environment steps", agent=agent, train_step=train_step
    )
    policy_network.write_description(
        root_dir,
        agent="ppo",
        network=actor_net,
        network_kwargs=actor_kwargs,
        checkpoint_attribute="_actor_net",
        env_name=env_name,
        env_kwargs=env_kwargs,
    )
    start_steps = int(env_steps.numpy())

    policy_saver = _PolicyExporter(os.path.join(root_dir, learner.POLICY_SAVED_MODEL_DIR), agent, train_step)
    return_metric = py_metrics.AverageReturnMetric(buffer_size=100, batch_size=num_envs)
    success_metric = EpisodeSuccessMetric(buffer_size=100, batch_size=num_envs)
    metrics = [
        return_metric,
        py_metrics.AverageEpisodeLengthMetric(buffer_size=100, batch_size=num_envs),
        success_metric,
    ]
    game = _procgen_game(env_name)
    if game:
        metrics.append(NormalizedReturnMetric(return_metric, game))
    driver = FixedLengthDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(
            agent.collect_policy, use_tf_function=True, batch_time_steps=False
        ),
        observers=[replay_buffer.add_batch, *metrics],
        num_batched_steps=collect_steps_per_env + 1,
        info_observers=[success_metric.observe_info],
    )
    collect_writer = tf.summary.create_file_writer(os.path.join(root_dir, "collect"))
    if start_steps == 0:
        _write_hyperparameters(collect_writer, _hyperparameters(locals()))
    _save_operative_config(root_dir)

    loop = _TrainingLoop(
        env, driver, iterations, ppo_learner_, checkpointer, policy_saver, collect_writer, metrics,
        env_steps, train_step,
    )  # fmt: skip
    try:
        results = loop.run(
            total_env_steps, steps_per_iteration, checkpoint_interval, policy_save_interval, progress
        )
    finally:
        iterations.close()
        env.close()
    return results


def actor_network(
    observation_spec: tf.TensorSpec,
    action_spec: tf.TensorSpec,
    encoder: str,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
) -> tuple[network.DistributionNetwork, dict[str, Any]]:
    """The actor for ``encoder`` and its constructor arguments after the two specs (``policy_network.json``).

    ``"attention_neuron"``: ``sensor_networks.SensorActorNetwork`` (permutation-invariant,
    recurrent; vector observations); any ``networks.NETWORK_ENCODERS`` name:
    ``networks.EncoderActorNetwork``.
    """
    if encoder == sensor_networks.SENSOR_ENCODER:
        kwargs = {"encoder_kwargs": dict(encoder_kwargs or {}), "fc_layer_params": tuple(fc_layer_params)}
        return sensor_networks.SensorActorNetwork(observation_spec, action_spec, **kwargs), kwargs
    _check_encoder(encoder)
    kwargs = {
        "encoder": encoder, "encoder_kwargs": dict(encoder_kwargs or {}), "fc_layer_params": fc_layer_params,
    }  # fmt: skip
    return networks.EncoderActorNetwork(observation_spec, action_spec, **kwargs), kwargs


def value_network(
    observation_spec: tf.TensorSpec,
    encoder: str,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
) -> network.Network:
    """The value network for ``encoder`` (the names of ``actor_network``)."""
    if encoder == sensor_networks.SENSOR_ENCODER:
        return sensor_networks.SensorValueNetwork(observation_spec, encoder_kwargs, fc_layer_params)
    _check_encoder(encoder)
    return networks.EncoderValueNetwork(observation_spec, encoder, encoder_kwargs, fc_layer_params)


def _check_encoder(encoder: str) -> None:
    names = (*networks.NETWORK_ENCODERS, sensor_networks.SENSOR_ENCODER)
    if encoder not in names:
        raise ValueError(f"Unknown encoder {encoder!r}. Expected one of: {', '.join(names)}.")


class _IterationData:
    """Hands each iteration's trajectories to ``PPOLearner``'s datasets, through blocking queues.

    The learner reads its experience and normalization datasets as endless
    streams, one element per ``learner.run()``, behind tf.data's prefetching,
    which starts on the next element as soon as the last minibatch of the
    current one is taken: before the next collection. Reading the replay
    buffer there gives the previous iteration's data again, or an empty
    buffer once it is cleared (an error). Here the loop ``put``s an
    iteration's data after collecting it, into queues of one element that
    the datasets' reads wait on. GAE (``agent.preprocess_sequence``) runs in
    ``put`` on whole sequences, with the reward normalizer as it was before
    this iteration's update (which ``learner.run`` does), so every run
    computes the same advantages.

    Feed-forward networks: one element of all ``(num_envs, T)`` steps, which
    the learner shuffles into minibatches of single steps. Recurrent networks
    (``num_minibatches`` given): ``num_minibatches`` elements of
    ``num_envs / num_minibatches`` whole sequences each (environments
    shuffled once per iteration, the same split in every epoch: the learner
    caches the elements), and the normalizers read each step once.
    """

    def __init__(self, agent, replay_buffer, num_envs: int, steps: int, num_minibatches: int | None):
        self._agent = agent
        self._replay_buffer = replay_buffer
        self._num_envs = num_envs
        self._num_minibatches = num_minibatches
        self.num_samples = num_minibatches or 1
        self._preprocess = common.function(agent.preprocess_sequence)
        # The last step of each environment only bootstraps the values.
        raw = tensor_spec.zero_spec_nest(agent.collect_data_spec, outer_dims=(num_envs, steps + 1))
        self._raw = self._queue(self._drop_bootstrap_step(raw))
        self._preprocessed = self._queue(self._drop_bootstrap_step(self._preprocess(raw)))

    @staticmethod
    def _drop_bootstrap_step(trajectories):
        return tf.nest.map_structure(lambda t: t[:, :-1], trajectories)

    @staticmethod
    def _queue(example) -> tuple[tf.queue.FIFOQueue, Any]:
        flat = tf.nest.flatten(example)
        queue = tf.queue.FIFOQueue(1, [t.dtype for t in flat], shapes=[t.shape for t in flat])
        return queue, example

    def put(self) -> None:
        """Queues the replay buffer's trajectories (raw, and with advantages) and clears it."""
        trajectories = self._replay_buffer.gather_all()
        for (queue, _), data in (
            (self._raw, trajectories),
            (self._preprocessed, self._preprocess(trajectories)),
        ):
            queue.enqueue(tf.nest.flatten(self._drop_bootstrap_step(data)))
        self._replay_buffer.clear()

    def _dataset(self, source, shuffle: bool) -> tf.data.Dataset:
        queue, example = source

        # Plain TF code: no AutoGraph conversion needed.
        @tf.autograph.experimental.do_not_convert
        def take(_):
            values = queue.dequeue()  # one tensor for a one-component queue
            return tf.nest.pack_sequence_as(example, values if isinstance(values, list) else [values])

        dataset = tf.data.Dataset.range(1).map(take)
        if self._num_minibatches is None:
            return dataset.map(lambda t: (t, ()))
        return dataset.flat_map(lambda t: self._split_environments(t, shuffle))

    @tf.autograph.experimental.do_not_convert
    def _split_environments(self, trajectories, shuffle: bool) -> tf.data.Dataset:
        n = self._num_envs
        order = tf.random.shuffle(tf.range(n)) if shuffle else tf.range(n)

        def split(t):
            shape = tf.concat([[self._num_minibatches, n // self._num_minibatches], tf.shape(t)[1:]], 0)
            return tf.reshape(tf.gather(t, order), shape)

        parts = tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(split, trajectories))
        return parts.map(lambda part: (part, ()))

    def experience_dataset(self) -> tf.data.Dataset:
        return self._dataset(self._preprocessed, shuffle=True)

    def normalization_dataset(self) -> tf.data.Dataset:
        return self._dataset(self._raw, shuffle=False)

    def close(self) -> None:
        """Releases the datasets' pending reads (their prefetch threads) at the end of training."""
        for queue, _ in (self._raw, self._preprocessed):
            queue.close(cancel_pending_enqueues=True)


class _PolicyExporter:
    """TF-Agents' ``PolicySavedModelTrigger``, made on first use.

    The trigger writes the SavedModels (greedy and stochastic policy) when it
    is made, which takes a while for the larger encoders, and then a weight
    checkpoint each time it fires.
    """

    def __init__(self, saved_model_dir: str, agent, train_step: tf.Variable):
        self._args = (saved_model_dir, agent, train_step)
        self._trigger = None

    def save(self) -> None:
        if self._trigger is None:
            saved_model_dir, agent, train_step = self._args
            self._trigger = triggers.PolicySavedModelTrigger(
                saved_model_dir, agent, train_step, interval=1, save_collect_policy=False
            )
        self._trigger(int(self._args[2].numpy()), force_trigger=True)


@dataclasses.dataclass
class _TrainingLoop:
    """The pieces one PPO iteration uses: collect, learn, clear, log, save."""

    env: py_environment.PyEnvironment
    driver: FixedLengthDriver
    iterations: _IterationData
    learner: ppo_learner.PPOLearner
    checkpointer: common.Checkpointer
    policy_exporter: _PolicyExporter
    writer: Any
    metrics: list
    env_steps: tf.Variable
    train_step: tf.Variable

    def run(
        self, total_env_steps: int, steps_per_iteration: int, checkpoint_interval: int,
        policy_save_interval: int, progress: bool,
    ) -> dict[str, Any]:  # fmt: skip
        """Iterates until ``total_env_steps``; returns the last results and the per-iteration ``history``."""
        last_checkpoint = last_policy_save = int(self.env_steps.numpy())
        bar = tqdm(total=total_env_steps, initial=last_checkpoint, unit="step", disable=not progress,
                   dynamic_ncols=True, smoothing=0.3)  # fmt: skip
        time_step = self.env.reset()
        # Recurrent policies carry their state across iterations, as TF-Agents' actors do.
        policy_state = self.driver.policy.get_initial_state(self.env.batch_size)
        results: dict[str, Any] = {}
        history: list[dict[str, float]] = []
        while int(self.env_steps.numpy()) < total_env_steps:
            self.driver.reset_timings()
            start = time.perf_counter()
            time_step, policy_state = self.driver.run(time_step, policy_state)
            learn_start = time.perf_counter()
            self.iterations.put()
            self.learner.run()
            end = time.perf_counter()
            steps = int(self.env_steps.assign_add(steps_per_iteration).numpy())
            speed = _speed(steps_per_iteration, end - start, end - learn_start, self.driver)
            results = metric_results(self.metrics)
            self._write_summaries(steps, results, speed)
            history.append({"env_steps": steps, **speed})
            results.update(env_steps=steps, train_step=int(self.train_step.numpy()), **speed)
            bar.set_postfix(ret=f"{results['AverageReturn']:.2f}", success=f"{results['SuccessRate']:.2f}",
                            refresh=False)  # fmt: skip
            bar.update(steps_per_iteration)
            done = steps >= total_env_steps
            if done or steps - last_checkpoint >= checkpoint_interval:
                self.checkpointer.save(self.train_step)
                last_checkpoint = steps
            if policy_save_interval and (done or steps - last_policy_save >= policy_save_interval):
                self.policy_exporter.save()
                last_policy_save = steps
        bar.close()
        self.writer.flush()
        return {**results, "history": history}

    def _write_summaries(self, steps: int, results: dict[str, float], speed: dict[str, float]) -> None:
        with self.writer.as_default(step=steps):
            for name, value in results.items():
                tf.summary.scalar(f"Metrics/{name}", value)
            for name, value in speed.items():
                tf.summary.scalar(f"charts/{name}", value)


def _learning_rate(
    learning_rate: float,
    anneal: bool,
    total_env_steps: int,
    steps_per_iteration: int,
    updates_per_iteration: int,
) -> float | tf_keras.optimizers.schedules.LearningRateSchedule:
    if not anneal:
        return learning_rate
    iterations = -(-total_env_steps // steps_per_iteration)  # ceil
    return tf_keras.optimizers.schedules.PolynomialDecay(
        learning_rate, decay_steps=iterations * updates_per_iteration, end_learning_rate=0.0
    )


def _speed(steps: int, seconds: float, train_seconds: float, driver: FixedLengthDriver) -> dict[str, float]:
    """Steps per second and the shares of an iteration's wall time.

    ``train_fraction``: the learner (the model's train steps);
    ``policy_fraction``: the policy's forward passes during collection;
    ``env_fraction``: the environments; ``overhead_fraction``: the rest
    (replay buffer, metrics, Python).
    """
    fractions = {
        "train_fraction": train_seconds / seconds,
        "policy_fraction": driver.policy_seconds / seconds,
        "env_fraction": driver.env_seconds / seconds,
    }
    return {"SPS": steps / seconds, **fractions, "overhead_fraction": 1.0 - sum(fractions.values())}


_HYPERPARAMETERS = (
    "env_name",
    "num_envs",
    "encoder",
    "total_env_steps",
    "collect_steps_per_env",
    "learning_rate",
    "anneal_learning_rate",
    "value_encoder",
    "adam_epsilon",
    "discount",
    "gae_lambda",
    "entropy_coef",
    "value_coef",
    "clip_ratio",
    "max_grad_norm",
    "num_epochs",
    "num_minibatches",
    "normalize_rewards",
    "drac_coef",
    "augmentation",
    "seed",
    "jit_compile",
)


def _hyperparameters(local_vars: Mapping[str, Any]) -> dict[str, Any]:
    return {name: local_vars[name] for name in _HYPERPARAMETERS}


def _save_operative_config(root_dir: str) -> None:
    with open(os.path.join(root_dir, "config.gin"), "w") as f:
        f.write(gin.operative_config_str())


_FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("root_dir", None, "Output folder; rerun with the same one to resume.")
    flags.DEFINE_multi_string("gin_file", [], "Gin config files (configs/...).")
    flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. 'train_eval.num_envs = 8'.")
    flags.DEFINE_enum("strategy", "default", list(STRATEGIES), "tf.distribute strategy of the learner.")
    # Passed to the trainer only when given: otherwise the config's binding (default "auto") holds.
    xla.define_jit_compile_flag()
    flags.register_multi_flags_validator(["strategy", "jit_compile"], _check_jit_compile_strategy)


def _check_jit_compile_strategy(values: Mapping[str, Any]) -> bool:
    """``--jit_compile on`` needs ``--strategy default`` (see ``xla.resolve_jit_compile``)."""
    if values["strategy"] != "default" and str(values["jit_compile"]).strip().lower() in ("true", "on"):
        raise flags.ValidationError(
            f"--jit_compile={values['jit_compile']} needs --strategy default: XLA cannot compile the "
            f"gradient aggregation of --strategy {values['strategy']}."
        )
    return True


class _DropGinSearchMisses(std_logging.Filter):
    """Gin logs an error for each search path that does not hold an included file, found or not."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        return record.msg != "Path not found: %s"


# sit-train's agents: "<module>.<gin-configurable trainer>" for `train.agent = '<name>'`.
TRAINERS = {
    "ppo": "sit_keras.agents.train.train_eval",
    "sac": "sit_keras.agents.sac_train.sac_train_eval",
    "dqn": "sit_keras.agents.dqn_train.dqn_train_eval",
}


def _import_trainers() -> None:
    """Registers every trainer's gin configurable (imported here, not at the top: they import this module)."""
    for path in TRAINERS.values():
        importlib.import_module(path.rpartition(".")[0])


@gin.configurable(denylist=["root_dir", "strategy", "jit_compile"])
def train(
    root_dir: str,
    agent: str = "ppo",
    strategy: tf.distribute.Strategy | None = None,
    jit_compile: bool | str | None = None,
) -> dict[str, Any]:
    """``sit-train``'s dispatch: runs the trainer of ``agent`` (a ``TRAINERS`` key; gin ``train.agent``).

    PPO (+ DrAC) is ``train_eval``; SAC ``sac_train.sac_train_eval``; DQN /
    C51 ``dqn_train.dqn_train_eval``. Each reads its own gin bindings;
    ``jit_compile`` (``--jit_compile``), unless ``None``, overrides the
    trainer's.
    """
    if agent not in TRAINERS:
        raise ValueError(f"Unknown agent {agent!r} (train.agent). Expected one of: {', '.join(TRAINERS)}.")
    module, _, function = TRAINERS[agent].rpartition(".")
    kwargs = {} if jit_compile is None else {"jit_compile": jit_compile}
    return getattr(importlib.import_module(module), function)(root_dir, strategy=strategy, **kwargs)


def parse_gin(gin_files: Sequence[str], gin_bindings: Sequence[str]) -> None:
    """Parses gin files and bindings; a bad binding or file raises ``ValueError`` naming it."""
    _import_trainers()
    for path in gin_files:
        if not os.path.exists(path):
            raise ValueError(f"Gin file not found: {path!r}")
        # `include 'x.gin'` inside a config is relative to that config's
        # folder or its parent (configs/procgen/models/*.gin include ppo_drac.gin).
        folder = os.path.dirname(os.path.abspath(path))
        gin.add_config_file_search_path(folder)
        gin.add_config_file_search_path(os.path.dirname(folder))
    search_misses = _DropGinSearchMisses()
    std_logging.getLogger().addFilter(search_misses)
    try:
        gin.parse_config_files_and_bindings(gin_files, gin_bindings)
    except (ValueError, KeyError, TypeError, SyntaxError) as error:
        raise ValueError(
            f"Bad gin configuration ({error}). Files: {list(gin_files)}, bindings: {list(gin_bindings)}"
        ) from error
    finally:
        std_logging.getLogger().removeFilter(search_misses)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``sit-train``."""
    _define_flags()
    flags.mark_flag_as_required("root_dir")
    app.run(_main, argv=argv)


def _main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    quiet_library_logs()
    parse_gin(_FLAGS.gin_file, _FLAGS.gin_bindings)
    os.makedirs(_FLAGS.root_dir, exist_ok=True)
    jit_compile = _FLAGS.jit_compile if _FLAGS["jit_compile"].present else None
    results = train(_FLAGS.root_dir, strategy=make_strategy(_FLAGS.strategy), jit_compile=jit_compile)
    results.pop("history")
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()})
