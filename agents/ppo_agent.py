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
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.ppo import ppo_clip_agent
from tf_agents.specs import tensor_spec
from tf_agents.utils import common

from sit_keras.agents.augmentation import Augmentation


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
    """

    def __init__(
        self, *args: Any, augmentation: Augmentation | None = None, drac_coef: float = 0.0, **kwargs
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
        self._current_distribution = None

    def policy_gradient_loss(
        self,
        time_steps,
        actions,
        sample_action_log_probs,
        advantages,
        current_policy_distribution,
        weights,
        debug_summaries=False,
    ):
        # get_loss computes pi(. | s) once and hands it to this method; keep it
        # (for this trace) so that the diagnostics and DrAC reuse it.
        self._current_distribution = current_policy_distribution
        return super().policy_gradient_loss(
            time_steps,
            actions,
            sample_action_log_probs,
            advantages,
            current_policy_distribution,
            weights,
            debug_summaries=debug_summaries,
        )

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
        loss_info = super().get_loss(
            time_steps,
            actions,
            act_log_probs,
            returns,
            normalized_advantages,
            action_distribution_parameters,
            weights,
            train_step,
            debug_summaries,
            old_value_predictions=old_value_predictions,
            training=training,
        )
        current = self._current_distribution
        self._write_diagnostics(current, actions, act_log_probs, returns, old_value_predictions, weights)
        if self._drac_coef == 0:
            return loss_info
        policy_reg, value_reg = self._drac_regularisers(time_steps, current, weights, training)
        _write_loss_scalar("drac_policy", policy_reg, self.train_step_counter)
        _write_loss_scalar("drac_value", value_reg, self.train_step_counter)
        total = loss_info.loss + self._drac_coef * (policy_reg + value_reg)
        return tf_agent.LossInfo(total, loss_info.extra)

    def _drac_regularisers(self, time_steps, current_distribution, weights, training):
        observations = time_steps.observation
        # The learner's minibatches are (B, 1, H, W, C); augmentations take (N, H, W, C).
        shape = tf.shape(observations)
        flat = tf.reshape(observations, tf.concat([[-1], shape[-3:]], axis=0))
        augmented = tf.reshape(self._augmentation(flat), shape)
        batch_size = shape[0]
        # Targets at s under the current parameters, held fixed.
        target_logits = tf.stop_gradient(current_distribution.logits_parameter())
        augmented_distribution, _ = self._actor_net(augmented, time_steps.step_type, (), training=training)
        target = type(augmented_distribution)(logits=target_logits)
        policy_reg = _weighted_mean(target.kl_divergence(augmented_distribution), weights)
        value_state = self._collect_policy.get_initial_value_state(batch_size)
        values, _ = self._collect_policy.apply_value_network(
            observations, time_steps.step_type, value_state=value_state, training=False
        )
        augmented_values, _ = self._collect_policy.apply_value_network(
            augmented, time_steps.step_type, value_state=value_state, training=training
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
