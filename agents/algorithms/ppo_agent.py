"""TF-Agents' PPO-clip with the DrAC regulariser and CleanRL-style diagnostics.

DrAC (Raileanu et al. 2021, "Automatic Data Augmentation for Generalization
in Deep RL", eq. 4-6) keeps PPO's loss on the original observations ``s`` and
adds, with coefficient ``alpha_r``,

    G_pi = KL[ pi(. | s) || pi(. | f(s)) ]            (the policy regulariser)
    G_V  = (V(f(s)) - V(s))^2                          (the value regulariser)

where ``f`` is the augmentation and the ``s`` terms are held fixed (no
gradient). Raileanu et al. estimate ``G_pi`` with the log-probability of
sampled actions; we use the exact KL of the two distributions, which is what
the estimator estimates. With ``drac_coef=0`` the agent is plain
``PPOClipAgent``.

The diagnostics are written as TensorBoard scalars under ``losses/``:
``approx_kl`` (mean of ``(r - 1) - log r`` over the minibatch, ``r`` the
probability ratio), ``clipfrac`` (share of samples with ``|r - 1| > clip``),
``explained_variance`` (of the returns by the collection-time values) and,
with DrAC, ``drac_policy`` and ``drac_value``.

Network passes per minibatch update: ``pi(. | s)``, ``V(s)``, and with DrAC
``pi(. | f(s))`` and ``V(f(s))``; each is computed once and read by every term
that needs it (``get_loss``). When the value head sits on the actor's torso
(``ppo.shared_torso``), ``pi(. | s)`` and ``V(s)`` come from one torso pass.
With DrAC and feed-forward networks, each network takes ``s`` and ``f(s)`` in
one pass over the ``2 B`` observations ``[s; f(s)]``: the same values in half
the passes (docs/speed.md, "One pass for s and f(s)").
TF-Agents' ``PPOAgent.get_loss`` runs ``V(s)`` twice (once inside the collect
policy's ``_distribution``, whose value is dropped, and once in
``value_estimation_loss``) and DrAC's value target was a third pass.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.ppo import ppo_agent, ppo_clip_agent
from tf_agents.specs import tensor_spec
from tf_agents.utils import common, nest_utils

from sit_keras.agents.algorithms.augmentation import Augmentation
from sit_keras.agents.networks import actor_critic


def _weighted_mean(values: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    weights = tf.cast(weights, values.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), tf.reduce_sum(weights))


def _write_loss_scalar(name: str, value: tf.Tensor, step: tf.Variable) -> None:
    # A trailing "/" makes the scope absolute: the tag stays "losses/<name>"
    # inside the agent's "epoch_<i>" and the learner's while-loop scopes.
    with tf.name_scope("losses/"):
        tf.summary.scalar(name, value, step=step)


def explained_variance(predictions: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """``1 - Var[targets - predictions] / Var[targets]`` over the weighted samples (1 is perfect)."""
    mean_target = _weighted_mean(targets, weights)
    var_target = _weighted_mean(tf.square(targets - mean_target), weights)
    residual = targets - predictions
    var_residual = _weighted_mean(tf.square(residual - _weighted_mean(residual, weights)), weights)
    return 1.0 - tf.math.divide_no_nan(var_residual, var_target)


class DrACPPOAgent(ppo_clip_agent.PPOClipAgent):
    """``PPOClipAgent`` plus the DrAC regulariser (eq. 4-6 of Raileanu et al.).

    Args:
      *args, **kwargs: as ``PPOClipAgent``.
      augmentation: ``f``, a function of a batch of observations; required
        when ``drac_coef > 0``.
      drac_coef: ``alpha_r``; 0.1 in the paper's Procgen runs.
      normalize_advantages: True (TF-Agents' PPO): the surrogate sees each
        minibatch's advantages scaled to zero mean and unit variance. False
        (IMPALA's and CleanRL's ``norm_adv=False``): it sees the GAE
        advantages themselves, ``A = R^lambda - V_old`` (``returns`` minus the
        stored value predictions, as ``use_td_lambda_return`` builds them).
        Normalising scales pure value noise up to unit variance when no reward
        has been seen yet.
      actor_frozen_train_steps: the first gradient steps train the value
        network alone: the policy-gradient, entropy, KL and DrAC policy terms
        are multiplied by 0 until the train step counter reaches it, so an
        actor started from trained weights (``ppo.initial_actor_dir``) is not
        moved by a critic that has not learned its returns yet.
    """

    def __init__(
        self,
        *args: Any,
        augmentation: Augmentation | None = None,
        drac_coef: float = 0.0,
        normalize_advantages: bool = True,
        actor_frozen_train_steps: int = 0,
        **kwargs,
    ):
        if drac_coef < 0:
            raise ValueError(f"drac_coef must be >= 0. Received: drac_coef={drac_coef}")
        if drac_coef > 0 and augmentation is None:
            raise ValueError("DrAC (drac_coef > 0) needs an augmentation function.")
        super().__init__(*args, **kwargs)
        if drac_coef > 0 and not all(tensor_spec.is_discrete(s) for s in tf.nest.flatten(self.action_spec)):
            raise ValueError(
                f"DrAC here supports discrete actions only. Received: action_spec={self.action_spec}"
            )
        self._augmentation = augmentation
        self._drac_coef = float(drac_coef)
        if not normalize_advantages and not (self._use_gae and self._use_td_lambda_return):
            raise ValueError(
                "normalize_advantages=False reads the advantages as returns - value predictions, "
                "which needs use_gae=True and use_td_lambda_return=True."
            )
        self._normalize_advantages = bool(normalize_advantages)
        if actor_frozen_train_steps < 0:
            raise ValueError(f"actor_frozen_train_steps must be >= 0. Received: {actor_frozen_train_steps}")
        self._actor_frozen_train_steps = int(actor_frozen_train_steps)

    def get_loss(
        self,
        time_steps,
        actions,
        act_log_probs,
        returns,
        normalized_advantages,
        action_distribution_parameters,
        weights,
        train_step,
        debug_summaries,
        old_value_predictions=None,
        training=False,
    ) -> tf_agent.LossInfo:
        """``PPOAgent.get_loss`` (TF-Agents 0.19) plus DrAC, with ``pi(. | s)`` and ``V(s)`` run once.

        The terms are TF-Agents': the clipped surrogate, the value loss, L2
        and entropy regularisation and the KL penalty, summed; then
        ``drac_coef * (G_pi + G_V)``. ``pi(. | s)`` feeds the surrogate, the
        entropy, the KL penalty, the diagnostics and ``G_pi``'s target;
        ``V(s)`` (with ``training``) feeds the value loss and ``G_V``'s target.
        (The dropped passes ran with ``training=False``: the same function for
        the encoders here, which keep no batch statistics and whose dropout
        rates default to 0.) With ``debug_summaries`` the value loss writes its
        scalars, not TF-Agents' histograms.
        """
        batch_size = nest_utils.get_outer_shape(time_steps, self._time_step_spec)[0]
        policy_state = self._collect_policy.get_initial_state(batch_size)
        actor_state = policy_state.get("actor_network_state", ()) if policy_state else ()
        shared = actor_critic.shares_torso(self._actor_net, self._value_net)
        augmented_outputs = None
        if self._drac_coef > 0 and self._passes_s_and_fs_together(actor_state):
            current, values, augmented_outputs = self._outputs_at_s_and_fs(time_steps, shared, training)
        elif shared and self._observation_normalizer is None:
            # ppo.shared_torso: one encoder pass for both heads.
            current, values = actor_critic.actor_and_value(
                self._actor_net, self._value_net, time_steps.observation, training
            )
        else:
            # The collect policy's _apply_actor_network (observation normaliser included), without
            # the V(s) that its _distribution adds for the collect-time policy info.
            current, _ = self._collect_policy._apply_actor_network(time_steps, actor_state, training=training)
            values, _ = self._collect_policy.apply_value_network(
                time_steps.observation,
                time_steps.step_type,
                value_state=self._collect_policy.get_initial_value_state(batch_size),
                training=training,
            )
        value_estimation_loss = self._value_loss_from_predictions(
            values, returns, weights, old_value_predictions, debug_summaries
        )
        if self._normalize_advantages:
            advantages = normalized_advantages
        else:
            advantages = returns - old_value_predictions
        policy_gradient_loss = self.policy_gradient_loss(
            time_steps,
            actions,
            tf.stop_gradient(act_log_probs),
            tf.stop_gradient(advantages),
            current,
            weights,
            debug_summaries=debug_summaries,
        )
        zero = tf.zeros_like(policy_gradient_loss)
        if self._policy_l2_reg > 0.0 or self._value_function_l2_reg > 0.0 or self._shared_vars_l2_reg > 0.0:
            l2_regularization_loss = self.l2_regularization_loss(debug_summaries)
        else:
            l2_regularization_loss = zero
        with tf.name_scope("entropy_regularization"):
            outer_rank = nest_utils.get_outer_rank(time_steps, self.time_step_spec)
            entropy = common.entropy(current, self.action_spec, outer_rank)
            entropy = tf.zeros_like(weights, tf.float32) if entropy is None else tf.cast(entropy, tf.float32)
        if self._entropy_regularization > 0.0:
            entropy_regularization_loss = self.entropy_regularization_loss(
                time_steps, entropy, weights, debug_summaries
            )
        else:
            entropy_regularization_loss = zero
        with tf.name_scope("Losses/"):
            tf.summary.scalar("entropy", tf.reduce_mean(entropy * weights), step=self.train_step_counter)
        if self._initial_adaptive_kl_beta == 0 and self._kl_cutoff_factor == 0:
            kl_penalty_loss = zero
        else:
            kl_penalty_loss = self.kl_penalty_loss(
                time_steps, action_distribution_parameters, current, weights, debug_summaries
            )
        actor_weight = self._actor_weight()
        total = (
            actor_weight * (policy_gradient_loss + entropy_regularization_loss + kl_penalty_loss)
            + value_estimation_loss
            + l2_regularization_loss
        )
        extra = ppo_agent.PPOLossInfo(
            policy_gradient_loss=policy_gradient_loss,
            value_estimation_loss=value_estimation_loss,
            l2_regularization_loss=l2_regularization_loss,
            entropy_regularization_loss=entropy_regularization_loss,
            kl_penalty_loss=kl_penalty_loss,
            clip_fraction=self._clip_fraction,
        )
        self._write_diagnostics(current, actions, act_log_probs, returns, old_value_predictions, weights)
        if self._drac_coef == 0:
            return tf_agent.LossInfo(total, extra)
        policy_reg, value_reg = self._drac_regularisers(
            time_steps, current, weights, training, values=values, augmented_outputs=augmented_outputs
        )
        _write_loss_scalar("drac_policy", policy_reg, self.train_step_counter)
        _write_loss_scalar("drac_value", value_reg, self.train_step_counter)
        return tf_agent.LossInfo(total + self._drac_coef * (actor_weight * policy_reg + value_reg), extra)

    def _actor_weight(self) -> tf.Tensor:
        """0.0 while the actor is frozen (``actor_frozen_train_steps``), then 1.0."""
        if not self._actor_frozen_train_steps:
            return tf.constant(1.0)
        started = self.train_step_counter >= self._actor_frozen_train_steps
        return tf.cast(started, tf.float32)

    def value_estimation_loss(
        self,
        time_steps,
        returns,
        weights,
        old_value_predictions=None,
        debug_summaries=False,
        training=False,
    ) -> tf.Tensor:
        """``PPOAgent.value_estimation_loss``: one pass of ``V(s)``, then ``_value_loss_from_predictions``."""
        batch_size = nest_utils.get_outer_shape(time_steps, self._time_step_spec)[0]
        values, _ = self._collect_policy.apply_value_network(
            time_steps.observation,
            time_steps.step_type,
            value_state=self._collect_policy.get_initial_value_state(batch_size),
            training=training,
        )
        return self._value_loss_from_predictions(
            values, returns, weights, old_value_predictions, debug_summaries
        )

    def _value_loss_from_predictions(
        self, value_preds, returns, weights, old_value_predictions=None, debug_summaries=False
    ) -> tf.Tensor:
        """The value loss of ``PPOAgent.value_estimation_loss`` on given predictions ``V(s)``.

        ``(R - V)^2``, or with ``value_clipping`` the larger of it and
        ``(R - V_clipped)^2`` (``V_clipped`` within the clipping of the
        collection-time values), averaged over the weighted samples and
        scaled by ``value_pred_loss_coef``.

        Raises:
          ValueError: value clipping without ``old_value_predictions``.
        """
        error = tf.math.squared_difference(returns, value_preds)
        if self._value_clipping > 0:
            if old_value_predictions is None:
                raise ValueError("old_value_predictions is None but needed for value clipping.")
            clipped = old_value_predictions + tf.clip_by_value(
                value_preds - old_value_predictions, -self._value_clipping, self._value_clipping
            )
            error = tf.maximum(error, tf.math.squared_difference(returns, clipped))
        if self._aggregate_losses_across_replicas:
            loss = common.aggregate_losses(per_example_loss=error, sample_weight=weights).total_loss
        else:
            loss = tf.math.reduce_mean(error * weights)
        loss = loss * self._value_pred_loss_coef
        if debug_summaries:
            step = self.train_step_counter
            tf.summary.scalar("value_pred_avg", tf.reduce_mean(value_preds), step=step)
            tf.summary.scalar("value_actual_avg", tf.reduce_mean(returns), step=step)
            tf.summary.scalar("value_estimation_loss", loss, step=step)
        if self._check_numerics:
            loss = tf.debugging.check_numerics(loss, "value_estimation_loss")
        return loss

    def _augmented(self, observations: tf.Tensor) -> tf.Tensor:
        """``f(s)`` for the learner's ``(B, 1, H, W, C)`` minibatch (augmentations take ``(N, H, W, C)``)."""
        shape = tf.shape(observations)
        flat = tf.reshape(observations, tf.concat([[-1], shape[-3:]], axis=0))
        return tf.reshape(self._augmentation(flat), shape)

    def _passes_s_and_fs_together(self, actor_state: Any) -> bool:
        """Whether ``[s; f(s)]`` can go through each network at once: feed-forward networks (no state to
        split) and no observation normaliser (the collect policy's, which ``f(s)``'s passes skip)."""
        stateless = not tf.nest.flatten(actor_state) and not tf.nest.flatten(self._value_net.state_spec)
        return stateless and self._observation_normalizer is None

    def _outputs_at_s_and_fs(self, time_steps, shared: bool, training: bool):
        """``pi(. | s)``, ``V(s)`` and ``(pi(. | f(s)), V(f(s)))``, each network run once over ``[s; f(s)]``.

        Each observation's outputs are those of a pass over its own half: the
        networks treat the observations of a batch independently.
        """
        observations = time_steps.observation
        both = tf.concat([observations, self._augmented(observations)], axis=0)
        step_types = tf.concat([time_steps.step_type, time_steps.step_type], axis=0)
        if shared:
            distribution, values = actor_critic.actor_and_value(
                self._actor_net, self._value_net, both, training
            )
        else:
            distribution, _ = self._actor_net(both, step_types, (), training=training)
            values, _ = self._value_net(both, step_types, (), training=training)
        at_s, at_fs = (
            type(distribution)(logits=logits, dtype=distribution.dtype)
            for logits in tf.split(distribution.logits_parameter(), 2, axis=0)
        )
        values_at_s, values_at_fs = tf.split(values, 2, axis=0)
        return at_s, values_at_s, (at_fs, values_at_fs)

    def _drac_regularisers(
        self, time_steps, current_distribution, weights, training, values=None, augmented_outputs=None
    ):
        """``(G_pi, G_V)`` of DrAC, weighted means over the minibatch.

        ``current_distribution`` is ``pi(. | s)`` and ``values`` is ``V(s)``
        (computed here, ``training=False``, when not given); both are held
        fixed. ``augmented_outputs``: ``(pi(. | f(s)), V(f(s)))`` when the
        networks ran on ``f(s)`` already, else one pass each here.
        """
        observations = time_steps.observation
        value_state = self._collect_policy.get_initial_value_state(tf.shape(observations)[0])
        # Targets at s under the current parameters, held fixed.
        target_logits = tf.stop_gradient(current_distribution.logits_parameter())
        if augmented_outputs is None:
            augmented = self._augmented(observations)
            augmented_distribution, _ = self._actor_net(
                augmented, time_steps.step_type, (), training=training
            )
            augmented_values, _ = self._collect_policy.apply_value_network(
                augmented, time_steps.step_type, value_state=value_state, training=training
            )
        else:
            augmented_distribution, augmented_values = augmented_outputs
        target = type(augmented_distribution)(logits=target_logits)
        policy_reg = _weighted_mean(target.kl_divergence(augmented_distribution), weights)
        if values is None:
            values, _ = self._collect_policy.apply_value_network(
                observations, time_steps.step_type, value_state=value_state, training=False
            )
        value_reg = _weighted_mean(tf.square(augmented_values - tf.stop_gradient(values)), weights)
        return policy_reg, value_reg

    def _write_diagnostics(self, current_distribution, actions, old_log_probs, returns, old_values, weights):
        log_probs = common.log_probability(current_distribution, actions, self.action_spec)
        log_ratio = log_probs - old_log_probs
        ratio = tf.exp(log_ratio)
        step = self.train_step_counter
        # The low-variance KL estimator (r - 1) - log r of Schulman's note, as in CleanRL.
        _write_loss_scalar("approx_kl", _weighted_mean((ratio - 1.0) - log_ratio, weights), step)
        clipped = tf.cast(tf.abs(ratio - 1.0) > self._importance_ratio_clipping, tf.float32)
        _write_loss_scalar("clipfrac", _weighted_mean(clipped, weights), step)
        if old_values is not None:
            _write_loss_scalar("explained_variance", explained_variance(old_values, returns, weights), step)
