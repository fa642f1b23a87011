"""DQN and C51 (TF-Agents ``DqnAgent``, ``CategoricalDqnAgent``) on any encoder; the Atari 100k protocol.

    sit-train --root_dir runs/pong_siet --gin_file configs/atari/pong_siet.gin

One iteration: ``FixedLengthDriver`` runs the epsilon-greedy collect policy
for ``collect_steps_per_iteration`` steps of ``num_envs`` environments into a
``TFUniformReplayBuffer`` (rewards clipped to ``[-reward_clip, reward_clip]``
there, not in the metrics); once ``min_replay_size`` agent steps are stored,
``learner.Learner`` runs one gradient step per ``update_period`` agent steps
on batches of ``n_step + 1``-step sequences (the agents' ``n_step_update``:
an ``n``-step return bootstrapped from the target network, which is copied
from the online network every ``target_update_period`` gradient steps).
Sequences that start on an episode boundary (a LAST step; TF-Agents' auto
reset makes the next step a FIRST one) hold no transition and are replaced
(``sample_sequences``).

Counting (the Atari 100k protocol, Kaiser et al. 2020): ``env_steps`` counts
*agent steps* summed over the environments (one agent step = ``frame_skip``
emulator frames, 4 on Atari: 100k agent steps = 400k frames). Evaluation runs
separate environments (on Atari without the life-loss terminal, so that an
episode is a whole game) with an epsilon-greedy policy (``epsilon_eval``),
every ``eval_interval`` agent steps and at the end.

The defaults are data-efficient Rainbow's (van Hasselt, Hessel & Aslanides
2019, "When to use parametric models in reinforcement learning?", appendix
hyper-parameter table), the "Rainbow - data-efficient" setting of the SiT
paper's Table 3: Adam (learning rate 1e-4, epsilon 1.5e-4), batch 32,
discount 0.99, 20-step returns, learning from 1600 agent steps on, one update
per agent step, target network every 2000 updates, gradient norm 10, rewards
clipped to [-1, 1], C51 support of 51 atoms on [-10, 10]. Data-efficient
Rainbow explores with noisy networks, which TF-Agents' DQN agents do not
have; the epsilon-greedy schedule is that of the Atari 100k reference
implementation of data-efficient Rainbow (Dopamine, ``labs/atari_100k/configs/
DER.gin``, Agarwal et al. 2021): epsilon 1 for the first ``min_replay_size``
agent steps, then linearly down to 0.01 over 2000 agent steps; 0.001 in
evaluation. Not reproduced: prioritised replay, dueling and noisy networks.

Outputs under ``root_dir``, as ``train.train_eval``: ``train/`` (TensorBoard:
losses against gradient steps), ``collect/`` (returns, lengths, epsilon,
steps/s against agent steps), ``eval/`` (evaluation returns against agent
steps) and ``evaluations.json`` (every evaluation so far), ``checkpoints/``
(agent, optimizer, counters), ``replay_buffer/`` (the newest replay buffer,
so that a rerun resumes exactly where the checkpoint was: the same data,
weights, optimizer state, counters and epsilon; only the environments start
new episodes), ``policies/`` (SavedModels for ``sit-eval``),
``policy_network.json`` (for export) and ``config.gin``.

Known limitation of TF-Agents' n-step targets: a truncated episode (time
limit, discount 1 on its LAST step) does not cut the n-step return, which
then runs on into the next episode; terminations (discount 0) do cut it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import py_environment
from tf_agents.metrics import py_metrics
from tf_agents.policies import epsilon_greedy_policy, py_tf_eager_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.train import learner
from tf_agents.train.utils import spec_utils, train_utils
from tf_agents.utils import common
from tqdm import tqdm

from sit_keras import xla

# A module reference, not names: train.py may import this module for sit-train's dispatch,
# and the helpers below are only looked up when a run starts.
from sit_keras.agents import checkpoints, evaluate, policy_network, q_networks
from sit_keras.agents import train as ppo_train
from sit_keras.agents.collection import EpisodeSuccessMetric, FixedLengthDriver, metric_results
from sit_keras.agents.environments import load

ALGORITHMS = ("dqn", "ddqn", "c51")
"""``dqn``: ``DqnAgent``; ``ddqn``: ``DdqnAgent`` (double DQN); ``c51``: ``CategoricalDqnAgent``."""

EVALUATIONS_FILE = "evaluations.json"


def epsilon_schedule(
    agent_steps: tf.Tensor | int,
    warmup_steps: int,
    decay_steps: int,
    final_epsilon: float,
    initial_epsilon: float = 1.0,
) -> tf.Tensor:
    """Exploration rate after ``agent_steps``: Dopamine's ``linearly_decaying_epsilon``.

    ``initial_epsilon`` for the first ``warmup_steps`` agent steps (the
    replay buffer fills with, at 1, uniformly random actions), then linear
    down to ``final_epsilon`` at ``warmup_steps + decay_steps``, constant
    afterwards. ``decay_steps = 0`` switches at ``warmup_steps``.

    >>> round(float(epsilon_schedule(2600, warmup_steps=1600, decay_steps=2000, final_epsilon=0.01)), 6)
    0.505
    """
    step = tf.cast(agent_steps, tf.float32)
    steps_left = float(warmup_steps + decay_steps) - step
    fraction = tf.clip_by_value(steps_left / float(max(decay_steps, 1)), 0.0, 1.0)
    return final_epsilon + (initial_epsilon - final_epsilon) * fraction


def learning_starts(min_replay_size: int, num_envs: int, n_step: int) -> int:
    """The agent step of the first update: ``min_replay_size``, and at least one
    ``n_step + 1``-step sequence stored per environment (the buffer samples
    within one environment's block)."""
    return max(min_replay_size, num_envs * (n_step + 1))


def updates_due(agent_steps: int, start: int, update_period: int) -> int:
    """Gradient steps owed after ``agent_steps``: one at ``start``, then one per ``update_period``."""
    return 0 if agent_steps < start else (agent_steps - start) // update_period + 1


def sample_sequences(
    replay_buffer: tf_uniform_replay_buffer.TFUniformReplayBuffer, n_step: int, batch_size: int
) -> tf.data.Dataset:
    """Batches ``(experience, info)`` of uniformly sampled ``n_step + 1``-step sequences, ``[B, n + 1, ...]``.

    A sequence that starts on a LAST step starts with TF-Agents' auto-reset
    "transition" into the next episode, which has nothing to learn from; it
    is replaced by the first valid sequence of its batch (one step in an
    episode's length is such a start, so a batch rarely has any). Filtering
    single sequences instead would be exact but samples three times slower.
    """

    def replace_boundaries(experience, info):
        valid = ~experience.is_boundary()[:, 0]
        rows = tf.where(valid, tf.range(batch_size, dtype=tf.int64), tf.argmax(tf.cast(valid, tf.int64)))
        experience = tf.cond(
            tf.reduce_all(valid),
            lambda: experience,
            lambda: tf.nest.map_structure(lambda t: tf.gather(t, rows), experience),
        )
        return experience, info

    sequences = replay_buffer.as_dataset(sample_batch_size=batch_size, num_steps=n_step + 1)
    return sequences.map(replace_boundaries).prefetch(2)


def _family(env_name: str) -> str:
    return env_name.partition(":")[0]


def evaluation_env_kwargs(
    env_name: str, env_kwargs: Mapping[str, Any] | None, eval_env_kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The evaluation environments' keywords: the training ones updated by ``eval_env_kwargs``.

    On Atari, an evaluation episode is a whole game: ``terminal_on_life_loss``
    is False unless ``eval_env_kwargs`` sets it.
    """
    merged = {**dict(env_kwargs or {}), **dict(eval_env_kwargs or {})}
    if _family(env_name) == "atari" and "terminal_on_life_loss" not in dict(eval_env_kwargs or {}):
        merged["terminal_on_life_loss"] = False
    return merged


def _frames_per_agent_step(env_name: str, env_kwargs: Mapping[str, Any]) -> int:
    return int(env_kwargs.get("frame_skip", 4)) if _family(env_name) == "atari" else 1


def _check_settings(algorithm: str, **positive: float) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}. Expected one of: {', '.join(ALGORITHMS)}.")
    for name, value in positive.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1. Received: {name}={value}")


@gin.configurable(denylist=["root_dir", "strategy"])
def dqn_train_eval(
    root_dir: str,
    # Environment.
    env_name: str = "atari:Pong",
    env_kwargs: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    # Agent: one of ALGORITHMS.
    algorithm: str = "c51",
    # Q-network: any q_networks.Q_NETWORK_ENCODERS name, with its arguments.
    encoder: str = q_networks.DATA_EFFICIENT_CNN,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
    # C51 (Bellemare et al. 2017; Rainbow): atoms and support.
    num_atoms: int = 51,
    min_q_value: float = -10.0,
    max_q_value: float = 10.0,
    # Data-efficient Rainbow (van Hasselt et al. 2019), see the module docstring.
    total_agent_steps: int = 100_000,
    replay_capacity: int = 100_000,
    min_replay_size: int = 1600,
    update_period: int = 1,
    batch_size: int = 32,
    n_step: int = 20,
    target_update_period: int = 2000,
    discount: float = 0.99,
    learning_rate: float = 1e-4,
    adam_epsilon: float = 1.5e-4,
    max_grad_norm: float | None = 10.0,
    reward_clip: float | None = 1.0,
    # Epsilon-greedy (Dopamine's DER.gin): in agent steps.
    epsilon_final: float = 0.01,
    epsilon_decay_steps: int = 2000,
    epsilon_eval: float = 0.001,
    # Batched environment steps between updates (1: update after every step).
    collect_steps_per_iteration: int = 1,
    # Evaluation, in agent steps; 0 disables the periodic ones (the final one stays).
    eval_interval: int = 10_000,
    eval_episodes: int = 10,
    eval_num_envs: int = 1,
    eval_env_kwargs: Mapping[str, Any] | None = None,
    # Bookkeeping, in agent steps (summary_interval: gradient steps).
    log_interval: int = 1000,
    checkpoint_interval: int = 10_000,
    policy_save_interval: int = 50_000,
    summary_interval: int = 1000,
    seed: int = 0,
    progress: bool = True,
    # XLA for the train step (sit_keras.xla): "auto" (on with a GPU), True / "on", False / "off".
    jit_compile: bool | str = "auto",
    strategy: tf.distribute.Strategy | None = None,
) -> dict[str, Any]:
    """Trains a DQN / C51 agent; returns the last metrics and counters, ``evaluations`` and a ``history``.

    Args:
      root_dir: output folder (see the module docstring); rerunning with the
        same folder resumes from its newest checkpoint and replay buffer.
      env_name, env_kwargs, num_envs: passed to ``environments.load``.
      algorithm: ``"dqn"``, ``"ddqn"`` or ``"c51"``.
      encoder, encoder_kwargs, fc_layer_params: the Q-network's torso.
      num_atoms, min_q_value, max_q_value: C51's support (ignored otherwise).
      total_agent_steps: stop after this many agent steps (all environments).
      replay_capacity: agent steps kept in the replay buffer (split evenly
        over the environments), allocated at the start and saved with every
        checkpoint; keep it the same when resuming.
      min_replay_size: agent steps collected before the first update.
      update_period: agent steps per gradient step.
      n_step: steps of the bootstrapped return (the agents get ``n_step + 1``-step sequences).
      target_update_period: gradient steps between target-network copies.
      max_grad_norm: gradient clipping, ``None`` for none.
      reward_clip: rewards are clipped to ``[-reward_clip, reward_clip]`` for
        learning, ``None`` for none; returns in the metrics are unclipped.
      epsilon_final, epsilon_decay_steps: see ``epsilon_schedule`` (the warm-up
        is ``min_replay_size``).
      epsilon_eval: exploration rate of the evaluation policy.
      eval_interval, eval_episodes, eval_num_envs, eval_env_kwargs: see
        ``evaluation_env_kwargs``; evaluation environments are seeded with
        ``seed + 1_000_000``.
      log_interval: agent steps between collect summaries and history entries.
      checkpoint_interval, policy_save_interval: in agent steps; both also at
        the end (``policy_save_interval=0``: no policy exports at all).
      summary_interval: gradient steps between the learner's loss summaries.
      jit_compile: compile the agent's train step with XLA
        (``xla.resolve_jit_compile``; ``"auto"``: when a GPU is visible and
        no ``strategy`` is given). The resolved value is the ``jit_compile``
        hyper-parameter in ``collect/``.
      strategy: a ``tf.distribute.Strategy`` for the learner (default: none).

    Raises:
      ValueError: unknown names (environment, algorithm, encoder), sizes < 1,
        a C51 support with ``min_q_value >= max_q_value``, an unknown
        ``jit_compile`` setting.
    """
    jit_compile = xla.resolve_jit_compile(jit_compile, strategy)
    _check_settings(
        algorithm, num_envs=num_envs, total_agent_steps=total_agent_steps, replay_capacity=replay_capacity,
        update_period=update_period, batch_size=batch_size, n_step=n_step,
        target_update_period=target_update_period, collect_steps_per_iteration=collect_steps_per_iteration,
        eval_episodes=eval_episodes, eval_num_envs=eval_num_envs, log_interval=log_interval,
        checkpoint_interval=checkpoint_interval, summary_interval=summary_interval,
    )  # fmt: skip
    if algorithm == "c51" and min_q_value >= max_q_value:
        raise ValueError(f"min_q_value must be < max_q_value. Received: {min_q_value} >= {max_q_value}")
    strategy = strategy or tf.distribute.get_strategy()
    env_kwargs = dict(env_kwargs or {})
    os.makedirs(root_dir, exist_ok=True)
    # Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's.
    tf_keras.utils.set_random_seed(seed)
    env = load(env_name, num_envs=num_envs, seed=seed, **env_kwargs)
    observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)
    start = learning_starts(min_replay_size, num_envs, n_step)

    with strategy.scope():
        train_step = train_utils.create_train_step()
        env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        network_kwargs: dict[str, Any] = {
            "encoder": encoder, "encoder_kwargs": dict(encoder_kwargs or {}),
            "fc_layer_params": tuple(fc_layer_params),
        }  # fmt: skip
        if algorithm == "c51":
            network_kwargs["num_atoms"] = num_atoms
            q_net = q_networks.EncoderCategoricalQNetwork(observation_spec, action_spec, **network_kwargs)
        else:
            q_net = q_networks.EncoderQNetwork(observation_spec, action_spec, **network_kwargs)
        agent = _make_agent(
            algorithm, time_step_spec, action_spec, q_net,
            optimizer=tf_keras.optimizers.Adam(learning_rate=learning_rate, epsilon=adam_epsilon),
            epsilon_greedy=lambda: epsilon_schedule(env_steps, min_replay_size, epsilon_decay_steps,
                                                    epsilon_final),
            n_step_update=n_step, target_update_period=target_update_period, gamma=discount,
            gradient_clipping=max_grad_norm, train_step_counter=train_step,
            min_q_value=min_q_value, max_q_value=max_q_value,
        )  # fmt: skip
        agent.initialize()
    if jit_compile:
        # Before the learner is made: it traces agent.train.
        agent.train = xla.compile_with_xla(agent.train)

    # Allocated in full now (Atari: 28 kB per agent step, 2.8 GB for 100k); its size must
    # not change between a run and its resumption.
    per_env_length = -(-replay_capacity // num_envs)  # ceil
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=num_envs, max_length=max(per_env_length, n_step + 2)
    )
    # The learner is built before the checkpoint is restored so that the
    # optimizer's slots exist; its data iterator is made once the buffer can
    # be sampled (an iterator may start sampling as soon as it exists).
    dqn_learner = learner.Learner(
        root_dir, train_step, agent,
        # Checkpoints are ours (below): they also hold the agent-step counter.
        checkpoint_interval=-1, summary_interval=summary_interval, strategy=strategy,
    )  # fmt: skip
    checkpointer = checkpoints.restore_training(
        root_dir, env_steps, "agent steps", agent=agent, train_step=train_step
    )
    replay_checkpointer = checkpoints.restore_replay_buffer(root_dir, replay_buffer)
    eval_kwargs = evaluation_env_kwargs(env_name, env_kwargs, eval_env_kwargs)
    extra: dict[str, Any] = {"epsilon_eval": epsilon_eval, "eval_env_kwargs": eval_kwargs}
    if algorithm == "c51":
        extra.update(min_q_value=min_q_value, max_q_value=max_q_value)
    policy_network.write_description(
        root_dir,
        agent="c51" if algorithm == "c51" else "dqn",
        network=q_net,
        network_kwargs=network_kwargs,
        checkpoint_attribute="_q_network",
        env_name=env_name,
        env_kwargs=env_kwargs,
        extra=extra,
    )
    start_steps = int(env_steps.numpy())

    return_metric = py_metrics.AverageReturnMetric(buffer_size=100, batch_size=num_envs)
    success_metric = EpisodeSuccessMetric(buffer_size=100, batch_size=num_envs)
    metrics = [
        return_metric,
        py_metrics.AverageEpisodeLengthMetric(buffer_size=100, batch_size=num_envs),
        success_metric,
    ]

    @tf.function
    def add_batch(trajectory) -> None:
        replay_buffer.add_batch(trajectory)

    def add_to_replay(trajectory) -> None:
        if reward_clip is not None:
            trajectory = trajectory._replace(reward=np.clip(trajectory.reward, -reward_clip, reward_clip))
        add_batch(trajectory)

    driver = FixedLengthDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(
            agent.collect_policy, use_tf_function=True, batch_time_steps=False
        ),
        observers=[add_to_replay, *metrics],
        num_batched_steps=collect_steps_per_iteration,
        info_observers=[success_metric.observe_info],
    )
    collect_writer = tf.summary.create_file_writer(os.path.join(root_dir, "collect"))
    if start_steps == 0:
        settings = locals()
        ppo_train._write_hyperparameters(collect_writer, {name: settings[name] for name in _HYPERPARAMETERS})
    ppo_train._save_operative_config(root_dir)

    evaluator = _Evaluator(
        root_dir, env_name, eval_kwargs, seed + 1_000_000, eval_num_envs, eval_episodes,
        epsilon_greedy_policy.EpsilonGreedyPolicy(agent.policy, epsilon=epsilon_eval),
        _frames_per_agent_step(env_name, env_kwargs),
    )  # fmt: skip
    exporter = ppo_train._PolicyExporter(
        os.path.join(root_dir, learner.POLICY_SAVED_MODEL_DIR), agent, train_step
    )
    loop = _DqnLoop(
        env=env, driver=driver, learner=dqn_learner,
        experience_dataset=lambda: sample_sequences(replay_buffer, n_step, batch_size),
        strategy=strategy, checkpointer=checkpointer, replay_checkpointer=replay_checkpointer,
        exporter=exporter, evaluator=evaluator, writer=collect_writer, metrics=metrics,
        env_steps=env_steps, train_step=train_step, learning_start=start, update_period=update_period,
        epsilon=lambda steps: float(epsilon_schedule(steps, min_replay_size, epsilon_decay_steps,
                                                     epsilon_final)),
        frames_per_agent_step=_frames_per_agent_step(env_name, env_kwargs),
    )  # fmt: skip
    try:
        return loop.run(
            total_agent_steps, num_envs * collect_steps_per_iteration, log_interval, eval_interval,
            checkpoint_interval, policy_save_interval, progress,
        )  # fmt: skip
    finally:
        evaluator.close()
        env.close()


def _make_agent(
    algorithm: str, time_step_spec, action_spec, q_net, *, min_q_value: float, max_q_value: float, **kwargs
) -> dqn_agent.DqnAgent:
    if algorithm == "c51":
        return categorical_dqn_agent.CategoricalDqnAgent(
            time_step_spec, action_spec, categorical_q_network=q_net, min_q_value=min_q_value,
            max_q_value=max_q_value, **kwargs,
        )  # fmt: skip
    # Huber loss (Mnih et al. 2015; DqnAgent's default).
    agent_class = dqn_agent.DdqnAgent if algorithm == "ddqn" else dqn_agent.DqnAgent
    return agent_class(time_step_spec, action_spec, q_network=q_net, **kwargs)


class _Evaluator:
    """Evaluation episodes in separate environments, logged to ``eval/`` and ``evaluations.json``."""

    def __init__(
        self, root_dir: str, env_name: str, env_kwargs: Mapping[str, Any], seed: int, num_envs: int,
        num_episodes: int, policy, frames_per_agent_step: int,
    ):  # fmt: skip
        self._path = os.path.join(root_dir, EVALUATIONS_FILE)
        self._load_args = (env_name, num_envs, seed, dict(env_kwargs))
        self._num_episodes = num_episodes
        self._policy = py_tf_eager_policy.PyTFEagerPolicy(
            policy, use_tf_function=True, batch_time_steps=False
        )
        self._frames = frames_per_agent_step
        self._env = None
        self._writer = tf.summary.create_file_writer(os.path.join(root_dir, "eval"))
        self.evaluations: list[dict[str, Any]] = []
        if os.path.exists(self._path):
            with open(self._path) as f:
                self.evaluations = json.load(f)

    def __call__(self, agent_steps: int, train_step: int) -> dict[str, Any]:
        if self._env is None:
            env_name, num_envs, seed, kwargs = self._load_args
            self._env = load(env_name, num_envs=num_envs, seed=seed, **kwargs)
        start = time.perf_counter()
        episodes = evaluate.run_episodes(self._policy, self._env, self._num_episodes)
        result = {
            "agent_steps": agent_steps,
            "frames": agent_steps * self._frames,
            "train_step": train_step,
            **evaluate.summarize(episodes),
            "returns": [e["return"] for e in episodes],
            "seconds": time.perf_counter() - start,
        }
        # A resumed run replaces evaluations from after its checkpoint.
        self.evaluations = [e for e in self.evaluations if e["agent_steps"] < agent_steps] + [result]
        with open(self._path, "w") as f:
            json.dump(self.evaluations, f, indent=2)
        with self._writer.as_default(step=agent_steps):
            for name in ("mean_return", "std_return", "mean_length"):
                tf.summary.scalar(f"Eval/{name}", result[name])
        self._writer.flush()
        return result

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


def _crosses(previous: int, steps: int, interval: int) -> bool:
    """Whether a multiple of ``interval`` lies in ``(previous, steps]``: events keep their
    schedule across a resume. ``interval = 0``: never."""
    return interval > 0 and steps // interval > previous // interval


@dataclasses.dataclass
class _DqnLoop:
    """The pieces of ``dqn_train_eval``'s loop: collect, learn, log, save, evaluate."""

    env: py_environment.PyEnvironment
    driver: FixedLengthDriver
    learner: learner.Learner
    experience_dataset: Callable[[], tf.data.Dataset]
    strategy: tf.distribute.Strategy
    checkpointer: common.Checkpointer
    replay_checkpointer: common.Checkpointer
    exporter: Any
    evaluator: _Evaluator
    writer: Any
    metrics: list
    env_steps: tf.Variable
    train_step: tf.Variable
    learning_start: int
    update_period: int
    epsilon: Callable[[int], float]
    frames_per_agent_step: int
    iterator: Any = None

    def _learn(self, updates: int):
        if self.iterator is None:
            dataset = self.strategy.distribute_datasets_from_function(lambda _: self.experience_dataset())
            self.iterator = iter(dataset)
        return self.learner.run(iterations=updates, iterator=self.iterator)

    def run(
        self, total: int, steps_per_iteration: int, log_interval: int, eval_interval: int,
        checkpoint_interval: int, policy_save_interval: int, progress: bool,
    ) -> dict[str, Any]:  # fmt: skip
        steps = int(self.env_steps.numpy())
        last_log = steps
        bar = tqdm(total=total, initial=steps, unit="step", disable=not progress, dynamic_ncols=True,
                   smoothing=0.3)  # fmt: skip
        history: list[dict[str, Any]] = []
        results: dict[str, Any] = {}
        loss = float("nan")
        time_step = self.env.reset()
        self.driver.reset_timings()
        # Steps/s count collection and learning: evaluations, checkpoints and exports are paused time.
        window_start, train_seconds, paused_seconds = time.perf_counter(), 0.0, 0.0
        while steps < total:
            time_step, _ = self.driver.run(time_step)
            previous, steps = steps, int(self.env_steps.assign_add(steps_per_iteration).numpy())
            due = updates_due(steps, self.learning_start, self.update_period) - int(self.train_step.numpy())
            if due > 0:
                learn_start = time.perf_counter()
                loss = float(self._learn(due).loss)
                train_seconds += time.perf_counter() - learn_start
            bar.update(steps_per_iteration)
            done = steps >= total
            if done or _crosses(previous, steps, log_interval):
                seconds = time.perf_counter() - window_start - paused_seconds
                results = self._log(steps, steps - last_log, seconds, train_seconds, loss)
                history.append(dict(results))
                bar.set_postfix(ret=f"{results['AverageReturn']:.2f}", eps=f"{results['epsilon']:.3f}",
                                refresh=False)  # fmt: skip
                last_log, train_seconds, paused_seconds = steps, 0.0, 0.0
                self.driver.reset_timings()
                window_start = time.perf_counter()
            pause_start = time.perf_counter()
            if done or _crosses(previous, steps, checkpoint_interval):
                self.checkpointer.save(self.train_step)
                self.replay_checkpointer.save(self.train_step)
            if policy_save_interval and (done or _crosses(previous, steps, policy_save_interval)):
                self.exporter.save()
            if done or _crosses(previous, steps, eval_interval):
                evaluation = self.evaluator(steps, int(self.train_step.numpy()))
                results["eval_mean_return"] = evaluation["mean_return"]
            paused_seconds += time.perf_counter() - pause_start
        bar.close()
        self.writer.flush()
        return {**results, "evaluations": list(self.evaluator.evaluations), "history": history}

    def _log(self, steps: int, window_steps: int, seconds: float, train_seconds: float, loss: float):
        """Collect metrics and speeds of the last window; ``seconds`` exclude evaluations and saving."""
        speed = {
            "SPS": window_steps / seconds,
            "train_fraction": train_seconds / seconds,
            "policy_fraction": self.driver.policy_seconds / seconds,
            "env_fraction": self.driver.env_seconds / seconds,
        }
        results = {
            **metric_results(self.metrics),
            "env_steps": steps,
            "frames": steps * self.frames_per_agent_step,
            "train_step": int(self.train_step.numpy()),
            "epsilon": self.epsilon(steps),
            "loss": loss,
            **speed,
        }
        with self.writer.as_default(step=steps):
            for name in ("AverageReturn", "AverageEpisodeLength", "SuccessRate"):
                tf.summary.scalar(f"Metrics/{name}", results[name])
            tf.summary.scalar("Metrics/epsilon", results["epsilon"])
            for name, value in speed.items():
                tf.summary.scalar(f"charts/{name}", value)
        return results


_HYPERPARAMETERS = (
    "env_name",
    "num_envs",
    "algorithm",
    "encoder",
    "num_atoms",
    "min_q_value",
    "max_q_value",
    "total_agent_steps",
    "replay_capacity",
    "min_replay_size",
    "update_period",
    "batch_size",
    "n_step",
    "target_update_period",
    "discount",
    "learning_rate",
    "adam_epsilon",
    "max_grad_norm",
    "reward_clip",
    "epsilon_final",
    "epsilon_decay_steps",
    "epsilon_eval",
    "seed",
    "jit_compile",
)
