"""TF-Agents' SAC with each pass of the shared encoder run once per batch and weights.

TF-Agents' ``SacAgent._train`` (tf_agents 0.19, ``agents/sac/sac_agent.py``)
calls its networks one by one. With ``sac_networks``' one encoder E behind the
actor and both critics, and E' behind both target critics, a train step runs
E seven times and E' twice:

    critic loss  a' ~ pi(. | s')                    E(s')
                 Q'_1(s', a'), Q'_2(s', a')         E'(s') x 2
                 Q_1(s, a), Q_2(s, a)               E(s) x 2
    (critic optimizer step: E and the critic heads move)
    actor loss   a ~ pi(. | s)                      E(s)
                 Q_1(s, a), Q_2(s, a)               E(s) x 2
    (actor optimizer step: the actor's head moves, E does not)
    alpha loss   a ~ pi(. | s)                      E(s)

``SharedEncoderSacAgent`` computes the same losses and gradients with four
passes, E(s), E(s') and E'(s') for the critic loss and E(s) again for the
actor and alpha losses:

    critic loss  E(s)    -> Q_1, Q_2 heads (the loss trains E through them)
                 E(s')   -> actor head (next actions, no gradient)
                 E'(s')  -> Q'_1, Q'_2 heads (E' is shared by the targets)
    actor loss   E(s) after the critic step -> actor head (through
                 ``tf.stop_gradient``) and Q_1, Q_2 heads
    alpha loss   the same features -> actor head

E(s) is run twice because the critic's optimizer step changes E between the
critic loss and the actor loss: TF-Agents (like SAC-AE, Yarats et al. 2019,
and DrQ, Kostrikov et al. 2020) computes the actor loss with the updated
encoder, so the second pass is a different function of s, as the target's
pass is. The actor's step does not change E (its trainable weights leave E
out, ``sac_networks.SacActorNetwork``), so the alpha loss reuses the actor
loss's features.

The ``training`` flag: TF-Agents reads E(s) for the actor loss with
``training=True`` for the actor and ``False`` for the critics; the one pass
here uses ``False``. The two are the same function for every encoder of this
package (none keeps batch statistics, and dropout rates default to 0); an
encoder configured with dropout would see one dropout mask per pass here
instead of one per network.

The networks, policies, checkpoints (same attributes as ``SacAgent``),
``PolicySaver`` exports and ``policy_network.json`` are ``SacAgent``'s.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.sac import sac_agent
from tf_agents.policies import actor_policy
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common, nest_utils

from sit_keras.agents.networks.sac_networks import SacActorNetwork, SacCriticNetwork

# Encoder features and the number of outer dims (1: (B, D); 2: (B, T, D)).
Features = tuple[tf.Tensor, int]


class SharedEncoderSacAgent(sac_agent.SacAgent):
    """``SacAgent`` that runs each encoder pass once per batch (see the module docstring).

    Args:
      time_step_spec, action_spec: as ``SacAgent``.
      actor_network: a ``SacActorNetwork``; its encoder E is the critics' too.
      critic_network, critic_network_2: ``SacCriticNetwork``s on E
        (``sac_networks.twin_critics``).
      target_critic_network, target_critic_network_2: ``SacCriticNetwork``s
        sharing one encoder E' of their own.
      **kwargs: the other ``SacAgent`` arguments (optimizers, ``gamma``,
        ``target_update_tau``, ...). ``actor_policy_ctor`` must be
        ``ActorPolicy``: the losses read the actor network directly.

    Raises:
      ValueError: networks of other classes, critics not on the actor's
        encoder, targets on two encoders or on E, or another policy class.
    """

    def __init__(
        self,
        time_step_spec: ts.TimeStep,
        action_spec: Any,
        *,
        actor_network: SacActorNetwork,
        critic_network: SacCriticNetwork,
        critic_network_2: SacCriticNetwork,
        target_critic_network: SacCriticNetwork,
        target_critic_network_2: SacCriticNetwork,
        **kwargs: Any,
    ):
        _check_networks(
            actor_network, critic_network, critic_network_2, target_critic_network, target_critic_network_2
        )
        policy_ctor = kwargs.get("actor_policy_ctor", actor_policy.ActorPolicy)
        if policy_ctor is not actor_policy.ActorPolicy:
            raise ValueError(
                f"SharedEncoderSacAgent reads the actor network directly and needs actor_policy_ctor="
                f"ActorPolicy. Received: actor_policy_ctor={policy_ctor}"
            )
        super().__init__(
            time_step_spec,
            action_spec,
            critic_network=critic_network,
            actor_network=actor_network,
            critic_network_2=critic_network_2,
            target_critic_network=target_critic_network,
            target_critic_network_2=target_critic_network_2,
            **kwargs,
        )

    # -- the train step -------------------------------------------------------
    def _train(self, experience, weights):
        """``SacAgent._train``: critic step, actor step, alpha step, target update, on shared features."""
        time_steps, policy_steps, next_time_steps = self._as_transition(experience)
        actions = policy_steps.action

        # The shared encoder's variables once, in the networks' order: a set's order follows memory
        # addresses, and workers of a cluster must create the optimizer's slots in the same order.
        critic_variables = [
            *self._critic_network_1.trainable_variables,
            *self._critic_network_2.trainable_variables,
        ]
        trainable_critic_variables = list({id(v): v for v in critic_variables}.values())
        if not trainable_critic_variables:
            raise ValueError("No trainable critic variables to optimize.")
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(trainable_critic_variables)
            features = self._actor_network.encode(time_steps.observation, training=True)
            critic_loss = self._critic_loss_weight * self._critic_loss_on(
                features,
                time_steps,
                actions,
                next_time_steps,
                td_errors_loss_fn=self._td_errors_loss_fn,
                gamma=self._gamma,
                reward_scale_factor=self._reward_scale_factor,
                weights=weights,
                training=True,
            )
        tf.debugging.check_numerics(critic_loss, "Critic loss is inf or nan.")
        critic_grads = tape.gradient(critic_loss, trainable_critic_variables)
        self._apply_gradients(critic_grads, trainable_critic_variables, self._critic_optimizer)

        # The critic's step moved E: one new pass at s for the actor and alpha losses.
        features = self._actor_network.encode(time_steps.observation, training=False)
        trainable_actor_variables = self._actor_network.trainable_variables
        if not trainable_actor_variables:
            raise ValueError("No trainable actor variables to optimize.")
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(trainable_actor_variables)
            actor_loss = self._actor_loss_weight * self._actor_loss_on(
                features, time_steps, weights=weights, training=True
            )
        tf.debugging.check_numerics(actor_loss, "Actor loss is inf or nan.")
        actor_grads = tape.gradient(actor_loss, trainable_actor_variables)
        self._apply_gradients(actor_grads, trainable_actor_variables, self._actor_optimizer)

        alpha_variable = [self._log_alpha]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(alpha_variable)
            alpha_loss = self._alpha_loss_weight * self._alpha_loss_on(features, time_steps, weights=weights)
        tf.debugging.check_numerics(alpha_loss, "Alpha loss is inf or nan.")
        alpha_grads = tape.gradient(alpha_loss, alpha_variable)
        self._apply_gradients(alpha_grads, alpha_variable, self._alpha_optimizer)

        self._write_losses(critic_loss, actor_loss, alpha_loss)
        self.train_step_counter.assign_add(1)
        self._update_target()
        return tf_agent.LossInfo(
            loss=critic_loss + actor_loss + alpha_loss,
            extra=sac_agent.SacLossInfo(
                critic_loss=critic_loss, actor_loss=actor_loss, alpha_loss=alpha_loss
            ),
        )

    def _loss(self, experience, weights=None, training: bool = False):
        """``SacAgent._loss`` (no update between the losses): one pass each of E(s), E(s'), E'(s')."""
        time_steps, policy_steps, next_time_steps = self._as_transition(experience)
        features = self._actor_network.encode(time_steps.observation, training=training)
        critic_loss = self._critic_loss_weight * self._critic_loss_on(
            features,
            time_steps,
            policy_steps.action,
            next_time_steps,
            td_errors_loss_fn=self._td_errors_loss_fn,
            gamma=self._gamma,
            reward_scale_factor=self._reward_scale_factor,
            weights=weights,
            training=training,
        )
        tf.debugging.check_numerics(critic_loss, "Critic loss is inf or nan.")
        actor_loss = self._actor_loss_weight * self._actor_loss_on(
            features, time_steps, weights=weights, training=training
        )
        tf.debugging.check_numerics(actor_loss, "Actor loss is inf or nan.")
        alpha_loss = self._alpha_loss_weight * self._alpha_loss_on(features, time_steps, weights=weights)
        tf.debugging.check_numerics(alpha_loss, "Alpha loss is inf or nan.")
        self._write_losses(critic_loss, actor_loss, alpha_loss)
        return tf_agent.LossInfo(
            loss=critic_loss + actor_loss + alpha_loss,
            extra=sac_agent.SacLossInfo(
                critic_loss=critic_loss, actor_loss=actor_loss, alpha_loss=alpha_loss
            ),
        )

    def _write_losses(self, critic_loss: tf.Tensor, actor_loss: tf.Tensor, alpha_loss: tf.Tensor) -> None:
        with tf.name_scope("Losses"):
            tf.summary.scalar("critic_loss", critic_loss, step=self.train_step_counter)
            tf.summary.scalar("actor_loss", actor_loss, step=self.train_step_counter)
            tf.summary.scalar("alpha_loss", alpha_loss, step=self.train_step_counter)

    # -- the losses of SacAgent, on observations ------------------------------
    def critic_loss(
        self,
        time_steps: ts.TimeStep,
        actions: Any,
        next_time_steps: ts.TimeStep,
        td_errors_loss_fn,
        gamma: float = 1.0,
        reward_scale_factor: float = 1.0,
        weights: tf.Tensor | None = None,
        training: bool = False,
    ) -> tf.Tensor:
        """``SacAgent.critic_loss`` with one pass each of E(s), E(s') and E'(s')."""
        features = self._actor_network.encode(time_steps.observation, training=training)
        return self._critic_loss_on(
            features, time_steps, actions, next_time_steps, td_errors_loss_fn, gamma,
            reward_scale_factor, weights, training,
        )  # fmt: skip

    def actor_loss(
        self, time_steps: ts.TimeStep, weights: tf.Tensor | None = None, training: bool | None = True
    ) -> tf.Tensor:
        """``SacAgent.actor_loss`` with one pass of E(s) for the actor and both critics."""
        features = self._actor_network.encode(time_steps.observation, training=False)
        return self._actor_loss_on(features, time_steps, weights=weights, training=training)

    def alpha_loss(
        self, time_steps: ts.TimeStep, weights: tf.Tensor | None = None, training: bool = False
    ) -> tf.Tensor:
        """``SacAgent.alpha_loss``; ``training`` is unused there too (the actor runs with False)."""
        del training
        features = self._actor_network.encode(time_steps.observation, training=False)
        return self._alpha_loss_on(features, time_steps, weights=weights)

    # -- the same losses, on encoder features ---------------------------------
    def _actions_and_log_probs_on(self, features: Features, training: bool) -> tuple[Any, tf.Tensor]:
        """``SacAgent._actions_and_log_probs``: a reparameterised sample of pi and its log-probability."""
        distribution = self._actor_network.distribution_from_features(*features, training=training)
        actions = tf.nest.map_structure(lambda d: d.sample(), distribution)
        return actions, common.log_probability(distribution, actions, self.action_spec)

    def _critic_loss_on(
        self,
        features: Features,
        time_steps: ts.TimeStep,
        actions: Any,
        next_time_steps: ts.TimeStep,
        td_errors_loss_fn,
        gamma: float = 1.0,
        reward_scale_factor: float = 1.0,
        weights: tf.Tensor | None = None,
        training: bool = False,
    ) -> tf.Tensor:
        """``SacAgent.critic_loss`` with ``features = E(s)``.

        ``sum_i loss(y, Q_i(s, a))`` with the TD target
        ``y = r_scale * r + gamma * d * (min_i Q'_i(s', a') - alpha log pi(a' | s'))``,
        ``a' ~ pi(. | s')``, held fixed; aggregated over the batch with the
        critics' regularisation losses.
        """
        with tf.name_scope("critic_loss"):
            nest_utils.assert_same_structure(actions, self.action_spec)
            nest_utils.assert_same_structure(time_steps, self.time_step_spec)
            nest_utils.assert_same_structure(next_time_steps, self.time_step_spec)

            # The actor and the target critics are not updated by the critic loss.
            next_features = self._actor_network.encode(next_time_steps.observation, training=False)
            next_actions, next_log_pis = self._actions_and_log_probs_on(next_features, training=False)
            target_features, target_rank = self._target_critic_network_1.encode(
                next_time_steps.observation, training=False
            )
            target_q_values1 = self._target_critic_network_1.q_from_features(
                target_features, next_actions, target_rank, training=False
            )
            target_q_values2 = self._target_critic_network_2.q_from_features(
                target_features, next_actions, target_rank, training=False
            )
            target_q_values = (
                tf.minimum(target_q_values1, target_q_values2) - tf.exp(self._log_alpha) * next_log_pis
            )
            td_targets = tf.stop_gradient(
                reward_scale_factor * next_time_steps.reward
                + gamma * next_time_steps.discount * target_q_values
            )

            state_features, outer_rank = features
            pred_td_targets1 = self._critic_network_1.q_from_features(
                state_features, actions, outer_rank, training
            )
            pred_td_targets2 = self._critic_network_2.q_from_features(
                state_features, actions, outer_rank, training
            )
            critic_loss = td_errors_loss_fn(td_targets, pred_td_targets1) + td_errors_loss_fn(
                td_targets, pred_td_targets2
            )
            if critic_loss.shape.rank > 1:  # sum over the time dimension
                critic_loss = tf.reduce_sum(critic_loss, axis=range(1, critic_loss.shape.rank))
            critic_loss = common.aggregate_losses(
                per_example_loss=critic_loss,
                sample_weight=weights,
                regularization_loss=self._critic_network_1.losses + self._critic_network_2.losses,
            ).total_loss
            self._critic_loss_debug_summaries(td_targets, pred_td_targets1, pred_td_targets2)
            return critic_loss

    def _actor_loss_on(
        self,
        features: Features,
        time_steps: ts.TimeStep,
        weights: tf.Tensor | None = None,
        training: bool | None = True,
    ) -> tf.Tensor:
        """``SacAgent.actor_loss`` with ``features = E(s)``.

        ``alpha log pi(a | s) - min_i Q_i(s, a)`` with ``a ~ pi(. | s)``
        reparameterised, aggregated over the batch.
        """
        with tf.name_scope("actor_loss"):
            nest_utils.assert_same_structure(time_steps, self.time_step_spec)
            actions, log_pi = self._actions_and_log_probs_on(features, training=bool(training))
            # The critics are not updated by the actor loss (their weights are not watched).
            state_features, outer_rank = features
            target_q_values1 = self._critic_network_1.q_from_features(state_features, actions, outer_rank)
            target_q_values2 = self._critic_network_2.q_from_features(state_features, actions, outer_rank)
            target_q_values = tf.minimum(target_q_values1, target_q_values2)
            actor_loss = tf.exp(self._log_alpha) * log_pi - target_q_values
            if actor_loss.shape.rank > 1:  # sum over the time dimension
                actor_loss = tf.reduce_sum(actor_loss, axis=range(1, actor_loss.shape.rank))
            actor_loss = common.aggregate_losses(
                per_example_loss=actor_loss,
                sample_weight=weights,
                regularization_loss=self._actor_network.losses,
            ).total_loss
            self._actor_loss_debug_summaries(actor_loss, actions, log_pi, target_q_values, time_steps)
            return actor_loss

    def _alpha_loss_on(
        self, features: Features, time_steps: ts.TimeStep, weights: tf.Tensor | None = None
    ) -> tf.Tensor:
        """``SacAgent.alpha_loss`` with ``features = E(s)``.

        ``alpha * (-log pi(a | s) - H)`` (or ``log alpha * ...`` with
        ``use_log_alpha_in_alpha_loss``), ``a ~ pi(. | s)``, the bracket held fixed.
        """
        with tf.name_scope("alpha_loss"):
            nest_utils.assert_same_structure(time_steps, self.time_step_spec)
            # The actor is not updated by the alpha loss.
            _, log_pi = self._actions_and_log_probs_on(features, training=False)
            entropy_diff = tf.stop_gradient(-log_pi - self._target_entropy)
            if self._use_log_alpha_in_alpha_loss:
                alpha_loss = self._log_alpha * entropy_diff
            else:
                alpha_loss = tf.exp(self._log_alpha) * entropy_diff
            if alpha_loss.shape.rank > 1:  # sum over the time dimension
                alpha_loss = tf.reduce_sum(alpha_loss, axis=range(1, alpha_loss.shape.rank))
            alpha_loss = common.aggregate_losses(
                per_example_loss=alpha_loss, sample_weight=weights
            ).total_loss
            self._alpha_loss_debug_summaries(alpha_loss, entropy_diff)
            return alpha_loss


def _check_networks(actor: Any, critic_1: Any, critic_2: Any, target_1: Any, target_2: Any) -> None:
    """Checks the sharing that ``SharedEncoderSacAgent`` relies on.

    E behind the actor and both critics; E', another encoder, behind both targets.
    """
    if not isinstance(actor, SacActorNetwork):
        raise ValueError(f"actor_network must be a SacActorNetwork. Received: {type(actor).__name__}")
    critics = {
        "critic_network": critic_1,
        "critic_network_2": critic_2,
        "target_critic_network": target_1,
        "target_critic_network_2": target_2,
    }
    for name, critic in critics.items():
        if not isinstance(critic, SacCriticNetwork):
            raise ValueError(f"{name} must be a SacCriticNetwork. Received: {type(critic).__name__}")
    if critic_1.encoder is not actor.encoder or critic_2.encoder is not actor.encoder:
        raise ValueError(
            "critic_network and critic_network_2 must use the actor's encoder "
            "(sac_networks.twin_critics builds them so)."
        )
    if target_2.encoder is not target_1.encoder or target_1.encoder is actor.encoder:
        raise ValueError(
            "target_critic_network and target_critic_network_2 must share one encoder of their own, "
            "not the actor's (sac_networks.twin_critics builds them so)."
        )
