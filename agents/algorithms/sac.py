"""SAC (Haarnoja et al. 2018) for the harness: ``train_eval.agent = 'sac'``, hyper-parameters ``sac.*``.

One iteration: the stochastic policy takes ``collect_steps_per_env`` steps
of each of the ``num_envs`` environments into a ``TFUniformReplayBuffer``;
the ``Learner`` then takes ``train_steps_per_iteration`` gradient steps of
``SharedEncoderSacAgent`` on minibatches of transitions sampled uniformly
from the buffer. Before the first iteration of a run whose buffer is empty
(a fresh run, or a resumed one without ``replay_buffer/``), a uniformly
random policy collects ``initial_collect_steps`` steps (at least two per
environment); they count as environment steps.

The networks (``sac_networks``): the run's encoder (SieT / SiT / ViT / CNN
by name, or ``"mlp"``: with ``encoder_kwargs=None``, no shared layers) is
shared by the actor and the twin critics; the critic loss trains it, the
actor reads its features through stop-gradient. The defaults are Hansen &
Wang's (2021) pixel SAC; configs/dmc/README.md lists where TF-Agents'
``SacAgent`` differs from it. Evaluation runs the greedy policy (the tanh of
the Gaussian's mean).

A transition is a pair of consecutive steps of one environment. Pairs that
start at an episode's LAST step (whose successor is the next episode's FIRST
step, after the automatic reset) are not transitions and are dropped from
the minibatches. Time limits are truncations (discount 1): the targets
bootstrap through them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
import tf_keras
from tf_agents.policies import greedy_policy, random_py_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer

from sit_keras.agents.algorithms.sac_agent import SharedEncoderSacAgent
from sit_keras.agents.networks import encoders, sac_networks
from sit_keras.agents.training import settings_check
from sit_keras.agents.training.algorithm import Algorithm, Run
from sit_keras.agents.training.harness import TrainingLoop
from sit_keras.agents.training.run_settings import RunSettings


@gin.configurable("sac")
@dataclasses.dataclass(frozen=True)
class SAC:
    """SAC's hyper-parameters (gin: ``sac.<name>``).

    Defaults: Hansen & Wang 2021 (DMControl-GB, src/arguments.py), the SAC
    that the SiT paper's appendix F.3 trains SieT with.

    Attributes:
      actor_fc_layer_params, critic_fc_layer_params: the heads' dense layers.
      initial_collect_steps: environment steps of the random policy first.
      collect_steps_per_env: steps of each environment per iteration.
      train_steps_per_iteration: gradient steps per iteration (1 with one
        environment: one update per environment step).
      replay_capacity: transitions kept in total (``replay_capacity //
        num_envs`` per environment); a pixel step of 64x64x9 uint8 takes 37 kB.
      initial_temperature: the entropy temperature alpha at the start.
      target_entropy: ``None``: ``-dim(A)``.
      target_update_tau, target_update_period: soft update of the target
        critics (encoder included) every ``target_update_period`` steps.
      max_grad_norm: gradient clipping by global norm, ``None`` for none.
    """

    actor_fc_layer_params: Sequence[int] = (1024, 1024)
    critic_fc_layer_params: Sequence[int] = (1024, 1024)
    initial_collect_steps: int = 1000
    collect_steps_per_env: int = 1
    train_steps_per_iteration: int = 1
    replay_capacity: int = 100_000
    batch_size: int = 128
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    alpha_learning_rate: float = 1e-4
    actor_beta_1: float = 0.9
    critic_beta_1: float = 0.9
    alpha_beta_1: float = 0.5
    initial_temperature: float = 0.1
    target_entropy: float | None = None
    target_update_tau: float = 0.01
    target_update_period: int = 2
    discount: float = 0.99
    reward_scale_factor: float = 1.0
    max_grad_norm: float | None = None

    def __post_init__(self):
        settings_check.check(self, "sac", RANGES)
        for name in (
            "collect_steps_per_env",
            "train_steps_per_iteration",
            "batch_size",
            "target_update_period",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"sac.{name} must be >= 1. Received: {name}={getattr(self, name)}")
        if self.initial_temperature <= 0:
            raise ValueError(f"sac.initial_temperature must be > 0. Received: {self.initial_temperature}")


SETTINGS = SAC
# Checked before the run starts (settings_check).
RANGES = {
    **{name: settings_check.POSITIVE for name in (
        "actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "max_grad_norm",
        "reward_scale_factor")},
    **{name: settings_check.FRACTION for name in (
        "actor_beta_1", "critic_beta_1", "alpha_beta_1", "target_update_tau", "discount")},
    "initial_collect_steps": settings_check.NON_NEGATIVE,
}  # fmt: skip


def defaults(run: RunSettings, settings: SAC) -> dict[str, Any]:
    """The run defaults for SAC (DMC walker-walk from states)."""
    return {
        "env_name": "dmc:walker-walk",
        "num_envs": 1,
        "encoder": "mlp",
        "total_env_steps": 500_000,
        "log_interval": 1000,
        "summary_interval": 1000,
        "eval_interval": 10_000,
        "num_eval_episodes": 10,
        "checkpoint_interval": 10_000,
        "policy_save_interval": 100_000,
    }


def replay_length(run: RunSettings, settings: SAC) -> int:
    """Steps the replay buffer keeps per environment: the capacity split evenly, at least one transition."""
    return max(2, settings.replay_capacity // run.num_envs)


def minibatch_size(run: RunSettings, settings: SAC) -> int:
    """Observations per gradient step: ``batch_size`` sampled transitions."""
    return settings.batch_size


def stored_observations(run: RunSettings, settings: SAC) -> tuple[int, str]:
    """Observations kept at once (the replay buffer) and the binding that sets them (``memory_check``)."""
    return run.num_envs * replay_length(run, settings), "sac.replay_capacity"


def check(run: RunSettings, settings: SAC) -> None:
    """Raises ``ValueError`` for settings that do not fit together (before the run starts)."""
    encoders.check_encoder(run.encoder, "sac", recurrent=False)
    if settings.initial_collect_steps >= run.total_env_steps:
        raise ValueError(
            f"sac.initial_collect_steps = {settings.initial_collect_steps} (random steps before the first "
            f"update) must be below train_eval.total_env_steps = {run.total_env_steps}, or no update is made."
        )
    if settings.replay_capacity < 2 * run.num_envs:
        raise ValueError(
            f"sac.replay_capacity must hold 2 steps per environment (>= {2 * run.num_envs}). "
            f"Received: replay_capacity={settings.replay_capacity}"
        )


def build(run: Run, settings: SAC) -> Algorithm:
    """``SharedEncoderSacAgent`` and a ``Learner`` on transitions sampled from the replay buffer."""
    rs = run.settings
    if not all(spec.dtype.is_floating for spec in tf.nest.flatten(run.action_spec)):
        raise ValueError(
            f"SAC needs continuous actions; {rs.env_name!r} has the action spec {run.action_spec}."
        )
    actor_kwargs = {
        "encoder": rs.encoder,
        "encoder_kwargs": dict(rs.encoder_kwargs) if rs.encoder_kwargs is not None else None,
        "fc_layer_params": tuple(settings.actor_fc_layer_params),
    }
    agent = run.make_agent(lambda: _agent(run, settings, actor_kwargs))
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=rs.num_envs, max_length=replay_length(rs, settings)
    )

    def experience_dataset() -> tf.data.Dataset:
        # Sample pairs of steps, drop those that start at a LAST step, batch.
        transitions = (
            replay_buffer.as_dataset(sample_batch_size=settings.batch_size, num_steps=2)
            .unbatch()
            .filter(_starts_a_transition)
            .batch(settings.batch_size, drop_remainder=True)
        )
        return run.prefetch(transitions, 1)

    sac = run.learner(agent, experience_dataset_fn=experience_dataset)
    observers = [replay_buffer.add_batch]

    def warm_up(loop: TrainingLoop) -> None:
        """Random steps into an empty buffer (a fresh run, a resume without ``replay_buffer/``, a new worker).

        On a cluster every worker warms up when one's buffer is empty: the workers count their steps alike.
        """
        if not run.on_any_worker(not int(replay_buffer.num_frames().numpy())):
            return
        env, num_envs = run.env, rs.num_envs
        random_policy = random_py_policy.RandomPyPolicy(
            env.time_step_spec(), env.action_spec(), outer_dims=(num_envs,), seed=rs.seed
        )
        driver = loop.driver(random_policy, observers, max(-(-settings.initial_collect_steps // num_envs), 2))
        loop.time_step, _ = driver.run(loop.time_step)
        run.add_env_steps(driver.num_batched_steps * num_envs)

    def learn(unused_env_steps: int) -> dict[str, float]:
        return {"loss": float(sac.run(iterations=settings.train_steps_per_iteration).loss)}

    def log_values(unused_env_steps: int) -> dict[str, float]:
        return {"alpha": float(tf.exp(agent._log_alpha).numpy())}

    return Algorithm(
        agent=agent,
        eval_policy=greedy_policy.GreedyPolicy(agent.policy),
        checkpoint_objects={"agent": agent},
        description={
            "agent": "sac",
            "network": agent._actor_network,
            "network_kwargs": actor_kwargs,
            "checkpoint_attribute": "_actor_network",
        },
        replay_buffer=replay_buffer,
        collect_policy=agent.collect_policy,
        observers=observers,
        batched_steps=settings.collect_steps_per_env,
        env_steps_per_iteration=settings.collect_steps_per_env * rs.num_envs,
        learn=learn,
        warm_up=warm_up,
        log_values=log_values,
    )


def _agent(run: Run, settings: SAC, actor_kwargs: Mapping[str, Any]) -> SharedEncoderSacAgent:
    """The actor, the twin critics on its encoder and the agent (made under the strategy)."""
    target_entropy = settings.target_entropy
    if target_entropy is None:
        target_entropy = -float(sum(s.shape.num_elements() for s in tf.nest.flatten(run.action_spec)))
    actor_net = sac_networks.SacActorNetwork(run.observation_spec, run.action_spec, **actor_kwargs)
    return SharedEncoderSacAgent(
        run.time_step_spec,
        run.action_spec,
        actor_network=actor_net,
        **sac_networks.twin_critics(actor_net, run.action_spec, settings.critic_fc_layer_params),
        actor_optimizer=tf_keras.optimizers.Adam(settings.actor_learning_rate, beta_1=settings.actor_beta_1),
        critic_optimizer=tf_keras.optimizers.Adam(
            settings.critic_learning_rate, beta_1=settings.critic_beta_1
        ),
        alpha_optimizer=tf_keras.optimizers.Adam(settings.alpha_learning_rate, beta_1=settings.alpha_beta_1),
        target_update_tau=settings.target_update_tau,
        target_update_period=settings.target_update_period,
        gamma=settings.discount,
        reward_scale_factor=settings.reward_scale_factor,
        initial_log_alpha=math.log(settings.initial_temperature),
        # Hansen & Wang's (and SAC-AE's) temperature loss: alpha * (-log pi - H), not log alpha.
        use_log_alpha_in_alpha_loss=False,
        target_entropy=target_entropy,
        gradient_clipping=settings.max_grad_norm,
        train_step_counter=run.train_step,
    )


@tf.autograph.experimental.do_not_convert
def _starts_a_transition(trajectory, unused_info) -> tf.Tensor:
    """A sampled pair of steps is a transition unless its first step ends an episode."""
    return tf.logical_not(trajectory.is_boundary()[0])
