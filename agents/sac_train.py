"""SAC (Haarnoja et al. 2018) on continuous-control tasks, from states or pixels: ``sac_train_eval``.

    sit-train --root_dir runs/walker_siet --gin_file configs/dmc/walker_walk_siet.gin

(the config's ``train.agent = 'sac'`` makes ``sit-train`` call this trainer).

One iteration: a ``FixedLengthDriver`` runs the stochastic policy for
``collect_steps_per_iteration`` steps of ``num_envs`` environments into a
``TFUniformReplayBuffer``; the ``Learner`` then takes
``train_steps_per_iteration`` gradient steps of ``SacAgent`` on minibatches of
transitions sampled uniformly from the buffer. Before the first iteration a
uniformly random policy collects ``initial_collect_steps`` steps.

The networks (``sac_networks``): a pixel encoder (SieT / SiT / ViT / CNN by
name) or none for states, shared by the actor and the twin critics; the
critic loss trains it, the actor reads its features through stop-gradient.
The defaults are Hansen & Wang's (2021) pixel SAC; configs/dmc/README.md lists
where TF-Agents' ``SacAgent`` differs from it.

A transition is a pair of consecutive steps of one environment. Pairs that
start at an episode's LAST step (whose successor is the next episode's FIRST
step, after the automatic reset) are not transitions and are dropped from the
minibatches. Time limits are truncations (discount 1): the targets bootstrap
through them.

Outputs under ``root_dir``: ``train/`` (TensorBoard: SAC's losses against
gradient steps), ``collect/`` (TensorBoard: returns, lengths, steps/s, the
temperature, evaluation returns and the hyper-parameters against environment
steps), ``checkpoints/`` (agent, optimizers, counters), ``replay_buffer/``
(the buffer, so that a rerun resumes exactly where the checkpoint was taken;
``checkpoint_replay_buffer=False`` to skip: a resumed run then refills it
with random steps), ``policies/`` (TF-Agents SavedModels for ``sit-eval``),
``policy_network.json`` (for export) and ``config.gin``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
import tf_keras
from tf_agents.agents.sac import sac_agent
from tf_agents.environments import py_environment
from tf_agents.metrics import py_metrics
from tf_agents.policies import greedy_policy, py_tf_eager_policy, random_py_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.train import learner
from tf_agents.train.utils import spec_utils, train_utils
from tf_agents.utils import common
from tqdm import tqdm

from sit_keras import xla
from sit_keras.agents import checkpoints, evaluate, policy_network, sac_networks
from sit_keras.agents.collection import EpisodeSuccessMetric, FixedLengthDriver, metric_results
from sit_keras.agents.environments import load
from sit_keras.agents.sac_agent import SharedEncoderSacAgent
from sit_keras.agents.train import _PolicyExporter, _save_operative_config, _write_hyperparameters

# Evaluation environments are seeded apart from the training ones (as evaluate.evaluate's default).
EVAL_SEED_OFFSET = 1_000_000


@gin.configurable(denylist=["root_dir", "strategy"])
def sac_train_eval(
    root_dir: str,
    # Environment.
    env_name: str = "dmc:walker-walk",
    env_kwargs: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    # Networks: any networks.NETWORK_ENCODERS name with its build_encoder
    # arguments; "mlp" with encoder_kwargs=None shares no layers (states).
    encoder: str = "mlp",
    encoder_kwargs: Mapping[str, Any] | None = None,
    actor_fc_layer_params: Sequence[int] = (1024, 1024),
    critic_fc_layer_params: Sequence[int] = (1024, 1024),
    # SAC. Defaults: Hansen & Wang 2021 (DMControl-GB, src/arguments.py), the
    # SAC that the SiT paper's appendix F.3 trains SieT with.
    total_env_steps: int = 500_000,
    initial_collect_steps: int = 1000,
    collect_steps_per_iteration: int = 1,
    train_steps_per_iteration: int = 1,
    replay_capacity: int = 100_000,
    batch_size: int = 128,
    actor_learning_rate: float = 1e-3,
    critic_learning_rate: float = 1e-3,
    alpha_learning_rate: float = 1e-4,
    actor_beta_1: float = 0.9,
    critic_beta_1: float = 0.9,
    alpha_beta_1: float = 0.5,
    initial_temperature: float = 0.1,
    # None: -dim(A) (Haarnoja et al. 2018; Hansen & Wang 2021).
    target_entropy: float | None = None,
    target_update_tau: float = 0.01,
    target_update_period: int = 2,
    discount: float = 0.99,
    reward_scale_factor: float = 1.0,
    gradient_clipping: float | None = None,
    # Evaluation of the greedy (mean) policy, in environment steps; 0: never.
    eval_interval: int = 10_000,
    num_eval_episodes: int = 10,
    # Bookkeeping, in environment steps.
    log_interval: int = 1000,
    checkpoint_interval: int = 10_000,
    policy_save_interval: int = 100_000,
    checkpoint_replay_buffer: bool = True,
    seed: int = 0,
    progress: bool = True,
    # XLA for the train step (sit_keras.xla): "auto" (on with a GPU), True / "on", False / "off".
    jit_compile: bool | str = "auto",
    strategy: tf.distribute.Strategy | None = None,
) -> dict[str, Any]:
    """Trains a SAC agent; returns the last metrics, counters and speeds, and a ``history``.

    Args:
      root_dir: output folder (see the module docstring); rerunning with the
        same folder resumes from its newest checkpoint.
      env_name, env_kwargs, num_envs: passed to ``environments.load``; the
        action spec must be continuous (e.g. ``"dmc:walker-walk"`` with
        ``{"pixels": True, "image_size": 64}``, ``"gymnasium:Pendulum-v1"``).
      encoder, encoder_kwargs: the shared encoder (``sac_networks``).
      actor_fc_layer_params, critic_fc_layer_params: the heads' dense layers.
      total_env_steps: stop once this many environment (agent) steps were
        collected, summed over the ``num_envs`` environments; with an action
        repeat, each is ``action_repeat`` simulator steps.
      initial_collect_steps: environment steps of the uniformly random policy
        before training starts.
      collect_steps_per_iteration: steps of each environment per iteration.
      train_steps_per_iteration: gradient steps per iteration; the default 1
        with one environment is one update per environment step.
      replay_capacity: transitions kept in total (``replay_capacity //
        num_envs`` per environment); a pixel step of 64x64x9 uint8 takes 37 kB.
      initial_temperature: the entropy temperature alpha at the start.
      target_update_tau, target_update_period: soft update of the target
        critics (encoder included) every ``target_update_period`` steps.
      eval_interval, num_eval_episodes: evaluate the greedy policy on
        separate environments (seeds from ``seed + EVAL_SEED_OFFSET``) every
        ``eval_interval`` steps and at the end; 0 disables evaluation.
      log_interval: TensorBoard and ``history`` interval (SAC's losses: every
        ``log_interval`` gradient steps).
      checkpoint_interval, policy_save_interval: the policy is also exported
        at the end unless ``policy_save_interval=0`` (no exports at all).
      checkpoint_replay_buffer: save the replay buffer with each checkpoint.
      jit_compile: compile the agent's train step with XLA
        (``xla.resolve_jit_compile``; ``"auto"``: when a GPU is visible and
        no ``strategy`` is given). The resolved value is the ``jit_compile``
        hyper-parameter in ``collect/``.
      strategy: a ``tf.distribute.Strategy`` for the learner (default: none).

    Raises:
      ValueError: a discrete action spec, non-positive sizes, unknown names,
        an unknown ``jit_compile`` setting.
    """
    jit_compile = xla.resolve_jit_compile(jit_compile, strategy)
    for name, value in (
        ("num_envs", num_envs), ("collect_steps_per_iteration", collect_steps_per_iteration),
        ("train_steps_per_iteration", train_steps_per_iteration), ("batch_size", batch_size),
        ("log_interval", log_interval), ("checkpoint_interval", checkpoint_interval),
    ):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be >= 1. Received: {name}={value}")
    if replay_capacity < num_envs * 2:
        raise ValueError(
            f"replay_capacity must hold 2 steps per environment (>= {2 * num_envs}). "
            f"Received: replay_capacity={replay_capacity}"
        )
    strategy = strategy or tf.distribute.get_strategy()
    os.makedirs(root_dir, exist_ok=True)
    # Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's.
    tf_keras.utils.set_random_seed(seed)
    with contextlib.ExitStack() as cleanup:
        env = load(env_name, num_envs=num_envs, seed=seed, **dict(env_kwargs or {}))
        cleanup.callback(env.close)
        observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)
        if not all(spec.dtype.is_floating for spec in tf.nest.flatten(action_spec)):
            raise ValueError(f"SAC needs continuous actions; {env_name!r} has the action spec {action_spec}.")
        if target_entropy is None:
            target_entropy = -float(sum(spec.shape.num_elements() for spec in tf.nest.flatten(action_spec)))

        with strategy.scope():
            train_step = train_utils.create_train_step()
            env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
            actor_kwargs = {
                "encoder": encoder,
                "encoder_kwargs": dict(encoder_kwargs) if encoder_kwargs is not None else None,
                "fc_layer_params": tuple(actor_fc_layer_params),
            }
            actor_net = sac_networks.SacActorNetwork(observation_spec, action_spec, **actor_kwargs)
            agent = SharedEncoderSacAgent(
                time_step_spec,
                action_spec,
                actor_network=actor_net,
                **sac_networks.twin_critics(actor_net, action_spec, critic_fc_layer_params),
                actor_optimizer=tf_keras.optimizers.Adam(actor_learning_rate, beta_1=actor_beta_1),
                critic_optimizer=tf_keras.optimizers.Adam(critic_learning_rate, beta_1=critic_beta_1),
                alpha_optimizer=tf_keras.optimizers.Adam(alpha_learning_rate, beta_1=alpha_beta_1),
                target_update_tau=target_update_tau,
                target_update_period=target_update_period,
                gamma=discount,
                reward_scale_factor=reward_scale_factor,
                initial_log_alpha=math.log(initial_temperature),
                # Hansen & Wang's (and SAC-AE's) temperature loss: alpha * (-log pi - H), not log alpha.
                use_log_alpha_in_alpha_loss=False,
                target_entropy=target_entropy,
                gradient_clipping=gradient_clipping,
                train_step_counter=train_step,
            )
            agent.initialize()
        if jit_compile:
            # Before the learner is made: it traces agent.train.
            agent.train = xla.compile_with_xla(agent.train)

        replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
            agent.collect_data_spec, batch_size=num_envs, max_length=max(2, replay_capacity // num_envs)
        )

        def experience_dataset() -> tf.data.Dataset:
            # Sample pairs of steps, drop those that start at a LAST step, batch.
            return (
                replay_buffer.as_dataset(sample_batch_size=batch_size, num_steps=2)
                .unbatch()
                .filter(_starts_a_transition)
                .batch(batch_size, drop_remainder=True)
                .prefetch(1)
            )

        sac_learner = learner.Learner(
            root_dir,
            train_step,
            agent,
            experience_dataset_fn=experience_dataset,
            # Checkpoints are ours (below): they also hold the environment-step counter.
            checkpoint_interval=-1,
            summary_interval=log_interval,
            strategy=strategy,
        )
        checkpointer = checkpoints.restore_training(
            root_dir, env_steps, "environment steps", agent=agent, train_step=train_step
        )
        buffer_checkpointer = None
        if checkpoint_replay_buffer:
            buffer_checkpointer = checkpoints.restore_replay_buffer(root_dir, replay_buffer)
        policy_network.write_description(
            root_dir,
            agent="sac",
            network=actor_net,
            network_kwargs=actor_kwargs,
            checkpoint_attribute="_actor_network",
            env_name=env_name,
            env_kwargs=env_kwargs,
        )
        start_steps = int(env_steps.numpy())

        metrics = [
            py_metrics.AverageReturnMetric(buffer_size=100, batch_size=num_envs),
            py_metrics.AverageEpisodeLengthMetric(buffer_size=100, batch_size=num_envs),
            EpisodeSuccessMetric(buffer_size=100, batch_size=num_envs),
        ]
        observers = [replay_buffer.add_batch, *metrics]
        info_observers = [metrics[-1].observe_info]
        collect_policy = py_tf_eager_policy.PyTFEagerPolicy(
            agent.collect_policy, use_tf_function=True, batch_time_steps=False
        )
        driver = FixedLengthDriver(
            env, collect_policy, observers, collect_steps_per_iteration, info_observers
        )
        collect_writer = tf.summary.create_file_writer(os.path.join(root_dir, "collect"))
        if start_steps == 0:
            settings = locals()
            _write_hyperparameters(collect_writer, {name: settings[name] for name in _HYPERPARAMETERS})
        _save_operative_config(root_dir)

        time_step = env.reset()
        if not int(replay_buffer.num_frames().numpy()):
            # A fresh run, or a resumed one whose buffer was not saved: random steps first (at least
            # two per environment, one transition). They count as environment steps.
            random_driver = FixedLengthDriver(
                env,
                random_py_policy.RandomPyPolicy(
                    env.time_step_spec(), env.action_spec(), outer_dims=(num_envs,), seed=seed
                ),
                observers,
                max(-(-initial_collect_steps // num_envs), 2),
                info_observers,
            )
            time_step, _ = random_driver.run(time_step)
            env_steps.assign_add(random_driver.num_batched_steps * num_envs)

        evaluator = None
        if eval_interval:
            evaluator = _Evaluator(
                agent, env_name, dict(env_kwargs or {}), num_eval_episodes, seed + EVAL_SEED_OFFSET
            )
            cleanup.callback(evaluator.close)
        loop = _TrainingLoop(
            env, driver, sac_learner, checkpointer, buffer_checkpointer,
            _PolicyExporter(os.path.join(root_dir, learner.POLICY_SAVED_MODEL_DIR), agent, train_step),
            evaluator, collect_writer, metrics, env_steps, train_step, agent,
        )  # fmt: skip
        return loop.run(
            time_step,
            total_env_steps,
            collect_steps_per_iteration * num_envs,
            train_steps_per_iteration,
            _Intervals(log_interval, checkpoint_interval, policy_save_interval, eval_interval),
            progress,
        )


@tf.autograph.experimental.do_not_convert
def _starts_a_transition(trajectory, unused_info) -> tf.Tensor:
    """A sampled pair of steps is a transition unless its first step ends an episode."""
    return tf.logical_not(trajectory.is_boundary()[0])


class _Evaluator:
    """Runs the greedy policy (the tanh of the Gaussian's mean) on its own environments."""

    def __init__(self, agent, env_name: str, env_kwargs: Mapping[str, Any], num_episodes: int, seed: int):
        if num_episodes < 1:
            raise ValueError(f"num_eval_episodes must be >= 1. Received: {num_episodes}")
        self._policy = py_tf_eager_policy.PyTFEagerPolicy(
            greedy_policy.GreedyPolicy(agent.policy), use_tf_function=True, batch_time_steps=False
        )
        self._env_args = (env_name, env_kwargs, seed)
        self._env: py_environment.PyEnvironment | None = None
        self.num_episodes = num_episodes

    def __call__(self) -> dict[str, float]:
        if self._env is None:  # made on first use: pixel environments are slow to make
            env_name, env_kwargs, seed = self._env_args
            self._env = load(env_name, num_envs=min(self.num_episodes, 10), seed=seed, **env_kwargs)
        summary = evaluate.summarize(evaluate.run_episodes(self._policy, self._env, self.num_episodes))
        return {
            "EvalAverageReturn": summary["mean_return"],
            "EvalStdReturn": summary["std_return"],
            "EvalAverageEpisodeLength": summary["mean_length"],
        }

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


@dataclasses.dataclass(frozen=True)
class _Intervals:
    log: int
    checkpoint: int
    policy_save: int
    eval: int


@dataclasses.dataclass
class _TrainingLoop:
    """The pieces one SAC iteration uses: collect, learn, log, evaluate, save."""

    env: py_environment.PyEnvironment
    driver: FixedLengthDriver
    learner: learner.Learner
    checkpointer: common.Checkpointer
    buffer_checkpointer: common.Checkpointer | None
    policy_exporter: _PolicyExporter
    evaluator: _Evaluator | None
    writer: Any
    metrics: list
    env_steps: tf.Variable
    train_step: tf.Variable
    agent: sac_agent.SacAgent

    def run(
        self, time_step, total_env_steps: int, steps_per_iteration: int, train_steps: int,
        intervals: _Intervals, progress: bool,
    ) -> dict[str, Any]:  # fmt: skip
        """Iterates until ``total_env_steps``; returns the last results and the logged ``history``."""
        start = int(self.env_steps.numpy())
        last = {"log": start, "checkpoint": start, "policy_save": start, "eval": start}
        bar = tqdm(total=total_env_steps, initial=start, unit="step", disable=not progress,
                   dynamic_ncols=True, smoothing=0.1)  # fmt: skip
        results: dict[str, Any] = {}
        evaluation: dict[str, float] = {}
        history: list[dict[str, float]] = []
        timer = _Timer()
        steps = start
        while steps < total_env_steps:
            self.driver.reset_timings()
            iteration_start = time.perf_counter()
            time_step, _ = self.driver.run(time_step)
            learn_start = time.perf_counter()
            self.learner.run(iterations=train_steps)
            timer.add(steps_per_iteration, self.driver, learn_start - iteration_start,
                      time.perf_counter() - learn_start)  # fmt: skip
            steps = int(self.env_steps.assign_add(steps_per_iteration).numpy())
            bar.update(steps_per_iteration)
            done = steps >= total_env_steps
            if self.evaluator is not None and (done or steps - last["eval"] >= intervals.eval):
                evaluation = self.evaluator()
                last["eval"] = steps
                self._write(steps, evaluation, "Eval")
            if done or steps - last["log"] >= intervals.log:
                results = {
                    **metric_results(self.metrics),
                    **evaluation,
                    "env_steps": steps,
                    "train_step": int(self.train_step.numpy()),
                    "alpha": float(tf.exp(self.agent._log_alpha).numpy()),
                    **timer.speed(),
                }
                self._write(steps, results, "Metrics")
                history.append(results)
                bar.set_postfix(ret=f"{results['AverageReturn']:.1f}", refresh=False)
                timer = _Timer()
                last["log"] = steps
            if done or steps - last["checkpoint"] >= intervals.checkpoint:
                if self.buffer_checkpointer is not None:
                    self.buffer_checkpointer.save(self.train_step)
                self.checkpointer.save(self.train_step)
                last["checkpoint"] = steps
            if intervals.policy_save and (done or steps - last["policy_save"] >= intervals.policy_save):
                self.policy_exporter.save()
                last["policy_save"] = steps
        bar.close()
        self.writer.flush()
        if not results:  # resumed at or past total_env_steps: nothing ran
            results = {"env_steps": steps, "train_step": int(self.train_step.numpy())}
        return {**results, "history": history}

    def _write(self, steps: int, values: Mapping[str, float], prefix: str) -> None:
        with self.writer.as_default(step=steps):
            for name, value in values.items():
                if name in ("env_steps", "train_step"):
                    continue
                group = "charts" if name in _Timer.NAMES or name == "alpha" else prefix
                tf.summary.scalar(f"{group}/{name}", value)


class _Timer:
    """Steps per second and the shares of wall time since the last log (as ``train._speed``)."""

    NAMES = ("SPS", "train_fraction", "policy_fraction", "env_fraction", "overhead_fraction")

    def __init__(self):
        self.steps = 0
        self.seconds = self.train = self.policy = self.env = 0.0

    def add(self, steps: int, driver: FixedLengthDriver, collect: float, train: float) -> None:
        """One iteration: ``steps`` environment steps, ``collect`` and ``train`` seconds."""
        self.steps += steps
        self.seconds += collect + train
        self.train += train
        self.policy += driver.policy_seconds
        self.env += driver.env_seconds

    def speed(self) -> dict[str, float]:
        seconds = max(self.seconds, 1e-9)
        fractions = [self.train / seconds, self.policy / seconds, self.env / seconds]
        return dict(zip(self.NAMES, [self.steps / seconds, *fractions, 1.0 - sum(fractions)], strict=True))


_HYPERPARAMETERS = (
    "env_name",
    "num_envs",
    "encoder",
    "total_env_steps",
    "initial_collect_steps",
    "collect_steps_per_iteration",
    "train_steps_per_iteration",
    "replay_capacity",
    "batch_size",
    "actor_learning_rate",
    "critic_learning_rate",
    "alpha_learning_rate",
    "initial_temperature",
    "target_entropy",
    "target_update_tau",
    "target_update_period",
    "discount",
    "seed",
    "jit_compile",
)
