"""DQN, double DQN and C51 for the harness: ``train_eval.agent = 'dqn'``, hyper-parameters ``dqn.*``.

One iteration: the epsilon-greedy collect policy takes
``collect_steps_per_env`` steps of each environment into a
``TFUniformReplayBuffer`` (rewards clipped to ``[-reward_clip,
reward_clip]`` there, not in the metrics); once ``min_replay_size`` agent
steps are stored, ``learner.Learner`` runs one gradient step per
``update_period`` agent steps on batches of ``n_step + 1``-step sequences
(the agents' ``n_step_update``: an ``n``-step return bootstrapped from the
target network, which is copied from the online network every
``target_update_period`` gradient steps). Sequences that start on an episode
boundary hold no transition and are replaced (``sample_sequences``).

Counting (the Atari 100k protocol, Kaiser et al. 2020): ``env_steps`` counts
*agent steps* summed over the environments (one agent step = ``frame_skip``
emulator frames, 4 on Atari: 100k agent steps = 400k frames; ``frames`` in
the results). Evaluation runs an epsilon-greedy policy (``epsilon_eval``)
on separate environments (on Atari whole games, without the life-loss terminal).

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

Known limitation of TF-Agents' n-step targets: a truncated episode (time
limit, discount 1 on its LAST step) does not cut the n-step return, which
then runs on into the next episode; terminations (discount 0) do cut it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.policies import epsilon_greedy_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer

from sit_keras.agents.networks import encoders, q_networks
from sit_keras.agents.training import settings_check
from sit_keras.agents.training.algorithm import Algorithm, Run
from sit_keras.agents.training.run_settings import RunSettings
from sit_keras.agents.training.settings_check import Range

ALGORITHMS = ("dqn", "ddqn", "c51")
"""``dqn``: ``DqnAgent``; ``ddqn``: ``DdqnAgent`` (double DQN); ``c51``: ``CategoricalDqnAgent``."""


@gin.configurable("dqn")
@dataclasses.dataclass(frozen=True)
class DQN:
    """DQN's hyper-parameters (gin: ``dqn.<name>``); see the module docstring for their source.

    Attributes:
      algorithm: one of ``ALGORITHMS``.
      fc_layer_params: dense layers after the encoder.
      num_atoms, min_q_value, max_q_value: C51's support (ignored otherwise).
      replay_capacity: agent steps kept (split evenly over the environments),
        allocated at the start; keep it the same when resuming.
      min_replay_size: agent steps collected before the first update.
      update_period: agent steps per gradient step.
      n_step: steps of the bootstrapped return.
      target_update_period: gradient steps between target-network copies.
      max_grad_norm: gradient clipping by global norm, ``None`` for none.
      reward_clip: rewards clipped to ``[-reward_clip, reward_clip]`` for
        learning, ``None`` for none; returns in the metrics are unclipped.
      epsilon_final, epsilon_decay_steps: see ``epsilon_schedule`` (the
        warm-up is ``min_replay_size``); ``epsilon_eval``: evaluation.
      collect_steps_per_env: batched environment steps between updates.
    """

    algorithm: str = "c51"
    fc_layer_params: Sequence[int] = ()
    num_atoms: int = 51
    min_q_value: float = -10.0
    max_q_value: float = 10.0
    replay_capacity: int = 100_000
    min_replay_size: int = 1600
    update_period: int = 1
    batch_size: int = 32
    n_step: int = 20
    target_update_period: int = 2000
    discount: float = 0.99
    learning_rate: float = 1e-4
    adam_epsilon: float = 1.5e-4
    max_grad_norm: float | None = 10.0
    reward_clip: float | None = 1.0
    epsilon_final: float = 0.01
    epsilon_decay_steps: int = 2000
    epsilon_eval: float = 0.001
    collect_steps_per_env: int = 1

    def __post_init__(self):
        settings_check.check(self, "dqn", RANGES)
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"Unknown algorithm {self.algorithm!r} (dqn.algorithm). "
                f"Expected one of: {', '.join(ALGORITHMS)}."
            )
        for name in ("replay_capacity", "update_period", "batch_size", "n_step", "target_update_period",
                     "collect_steps_per_env"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"dqn.{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if self.algorithm == "c51" and self.min_q_value >= self.max_q_value:
            raise ValueError(
                f"min_q_value must be < max_q_value. Received: {self.min_q_value} >= {self.max_q_value}"
            )


SETTINGS = DQN
# Checked before the run starts (settings_check).
RANGES = {
    "learning_rate": settings_check.POSITIVE, "adam_epsilon": settings_check.POSITIVE,
    "max_grad_norm": settings_check.POSITIVE, "reward_clip": settings_check.POSITIVE,
    "discount": settings_check.FRACTION, "epsilon_final": settings_check.FRACTION,
    "epsilon_eval": settings_check.FRACTION, "num_atoms": Range(2),
    "min_replay_size": settings_check.NON_NEGATIVE, "epsilon_decay_steps": settings_check.NON_NEGATIVE,
}  # fmt: skip


def defaults(run: RunSettings, settings: DQN) -> dict[str, Any]:
    """The run defaults for DQN (the Atari 100k protocol on Pong)."""
    return {
        "env_name": "atari:Pong",
        "num_envs": 1,
        "encoder": q_networks.DATA_EFFICIENT_CNN,
        "total_env_steps": 100_000,
        "log_interval": 1000,
        "summary_interval": 1000,
        "eval_interval": 10_000,
        "num_eval_episodes": 10,
        "eval_num_envs": 1,
        "checkpoint_interval": 10_000,
        "policy_save_interval": 50_000,
    }


def replay_length(run: RunSettings, settings: DQN) -> int:
    """Steps the replay buffer keeps per environment: the capacity split evenly, at least one n-step run."""
    per_env_length = -(-settings.replay_capacity // run.num_envs)  # ceil
    return max(per_env_length, settings.n_step + 2)


def minibatch_size(run: RunSettings, settings: DQN) -> int:
    """Observations per gradient step: ``batch_size`` sampled transitions."""
    return settings.batch_size


def stored_observations(run: RunSettings, settings: DQN) -> tuple[int, str]:
    """Observations kept at once (the replay buffer) and the binding that sets them (``memory_check``)."""
    return run.num_envs * replay_length(run, settings), "dqn.replay_capacity"


def check(run: RunSettings, settings: DQN) -> None:
    """Raises ``ValueError`` for settings that do not fit together (before the run starts)."""
    encoders.check_encoder(run.encoder, "dqn", recurrent=False)


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
    return sequences.map(replace_boundaries)


def make_agent(
    algorithm: str, time_step_spec, action_spec, q_net, *, min_q_value: float, max_q_value: float, **kwargs
) -> dqn_agent.DqnAgent:
    """The TF-Agents agent of ``algorithm`` on ``q_net`` (``kwargs``: the agents' common arguments)."""
    if algorithm == "c51":
        return categorical_dqn_agent.CategoricalDqnAgent(
            time_step_spec, action_spec, categorical_q_network=q_net, min_q_value=min_q_value,
            max_q_value=max_q_value, **kwargs,
        )  # fmt: skip
    # Huber loss (Mnih et al. 2015; DqnAgent's default).
    agent_class = dqn_agent.DdqnAgent if algorithm == "ddqn" else dqn_agent.DqnAgent
    return agent_class(time_step_spec, action_spec, q_network=q_net, **kwargs)


def build(run: Run, settings: DQN) -> Algorithm:
    """A DQN agent and a ``Learner`` that runs the updates due after each collection."""
    rs = run.settings
    network_kwargs: dict[str, Any] = {
        "encoder": rs.encoder, "encoder_kwargs": dict(rs.encoder_kwargs or {}),
        "fc_layer_params": tuple(settings.fc_layer_params),
    }  # fmt: skip
    if settings.algorithm == "c51":
        network_kwargs["num_atoms"] = settings.num_atoms
    agent = run.make_agent(lambda: _agent(run, settings, network_kwargs))
    # Allocated in full now (Atari: 28 kB per agent step, 2.8 GB for 100k); its size must
    # not change between a run and its resumption.
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=rs.num_envs, max_length=replay_length(rs, settings)
    )
    # The learner is made now, so that the optimizer's slots exist when the checkpoint is
    # restored; its data iterator once the buffer can be sampled (an iterator may start
    # sampling as soon as it exists).
    dqn = run.learner(agent)
    learn = _DueUpdates(run, settings, replay_buffer, dqn)

    def log_values(env_steps: int) -> dict[str, float]:
        epsilon = epsilon_schedule(
            env_steps, settings.min_replay_size, settings.epsilon_decay_steps, settings.epsilon_final
        )
        return {"epsilon": float(epsilon)}

    @tf.function
    def add_batch(trajectory) -> None:
        replay_buffer.add_batch(trajectory)

    def add_to_replay(trajectory) -> None:
        if settings.reward_clip is not None:
            clip = settings.reward_clip
            trajectory = trajectory._replace(reward=np.clip(trajectory.reward, -clip, clip))
        add_batch(trajectory)

    extra: dict[str, Any] = {"epsilon_eval": settings.epsilon_eval, "eval_env_kwargs": rs.eval_kwargs}
    if settings.algorithm == "c51":
        extra.update(min_q_value=settings.min_q_value, max_q_value=settings.max_q_value)
    return Algorithm(
        agent=agent,
        eval_policy=epsilon_greedy_policy.EpsilonGreedyPolicy(agent.policy, epsilon=settings.epsilon_eval),
        checkpoint_objects={"agent": agent},
        description={
            "agent": "c51" if settings.algorithm == "c51" else "dqn",
            "network": agent._q_network,
            "network_kwargs": network_kwargs,
            "checkpoint_attribute": "_q_network",
            "extra": extra,
        },
        replay_buffer=replay_buffer,
        collect_policy=agent.collect_policy,
        observers=[add_to_replay],
        batched_steps=settings.collect_steps_per_env,
        env_steps_per_iteration=settings.collect_steps_per_env * rs.num_envs,
        learn=learn,
        log_values=log_values,
    )


class _DueUpdates:
    """``learn``: the gradient steps owed after a collection (``updates_due``); the replay
    iterator is made at the first of them, once the buffer can be sampled."""

    def __init__(self, run: Run, settings: DQN, replay_buffer, dqn_learner):
        self._run = run
        self._settings = settings
        self._replay_buffer = replay_buffer
        self._learner = dqn_learner
        self._start = learning_starts(settings.min_replay_size, run.settings.num_envs, settings.n_step)
        self._iterator = None
        self._loss = float("nan")

    def __call__(self, env_steps: int) -> dict[str, float]:
        run, settings = self._run, self._settings
        due = updates_due(env_steps, self._start, settings.update_period) - int(run.train_step.numpy())
        if due > 0:
            if self._iterator is None:
                dataset = run.strategy.distribute_datasets_from_function(
                    lambda _: run.prefetch(
                        sample_sequences(self._replay_buffer, settings.n_step, settings.batch_size), 2
                    )
                )
                self._iterator = iter(dataset)
            self._loss = float(self._learner.run(iterations=due, iterator=self._iterator).loss)
        return {"loss": self._loss}


def _agent(run: Run, settings: DQN, network_kwargs: dict[str, Any]) -> dqn_agent.DqnAgent:
    """The Q-network and the agent (``Run.make_agent`` calls it under the strategy)."""
    if settings.algorithm == "c51":
        q_net = q_networks.EncoderCategoricalQNetwork(run.observation_spec, run.action_spec, **network_kwargs)
    else:
        q_net = q_networks.EncoderQNetwork(run.observation_spec, run.action_spec, **network_kwargs)
    env_steps = run.env_steps
    return make_agent(
        settings.algorithm,
        run.time_step_spec,
        run.action_spec,
        q_net,
        optimizer=tf_keras.optimizers.Adam(
            learning_rate=settings.learning_rate, epsilon=settings.adam_epsilon
        ),
        epsilon_greedy=lambda: epsilon_schedule(
            env_steps, settings.min_replay_size, settings.epsilon_decay_steps, settings.epsilon_final
        ),
        n_step_update=settings.n_step,
        target_update_period=settings.target_update_period,
        gamma=settings.discount,
        gradient_clipping=settings.max_grad_norm,
        train_step_counter=run.train_step,
        min_q_value=settings.min_q_value,
        max_q_value=settings.max_q_value,
    )
