"""Encoder passes per train step: SAC and PPO + DrAC run each once, and compute the same update.

``SharedEncoderSacAgent`` (``sac_agent``) and ``DrACPPOAgent.get_loss``
(``ppo_agent``) reuse encoder outputs that TF-Agents' ``SacAgent`` and
``PPOAgent`` recompute. The counts below are per train step, counted at the
image encoders (``sit_keras.models.base.Encoder.call``) in eager mode, where
each call is one pass. The references are TF-Agents' stock agents with the
same weights: for SAC ``SacAgent`` itself, for PPO ``PPOClipAgent.get_loss``
plus DrAC's two regularisers written out with their own passes.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.agents.ppo import ppo_clip_agent
from tf_agents.agents.sac import sac_agent as tfa_sac_agent
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.algorithms.ppo_agent import DrACPPOAgent
from sit_keras.agents.algorithms.sac_agent import SharedEncoderSacAgent
from sit_keras.agents.networks import actor_critic, sac_networks
from sit_keras.models.base import Encoder

TINY_CNN = {"filters": (4,), "strides": 4, "output_dim": 16}
TINY_SIET = {
    "dim": 8, "num_heads": 2, "stem_kernel_size": 0, "pool_size": 1, "window": 4,
    "local_layers": 1, "global_layers": 1, "output_dim": 8,
}  # fmt: skip
SAC_OBSERVATION_SPEC = tensor_spec.BoundedTensorSpec((16, 16, 3), tf.uint8, 0, 255)
SAC_ACTION_SPEC = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
PPO_OBSERVATION_SPEC = tensor_spec.BoundedTensorSpec((14, 14, 3), tf.uint8, 0, 255)
PPO_ACTION_SPEC = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
PPO_CNN = {"filters": (4,), "strides": 1, "output_dim": 8}
DRAC_COEF = 0.1


@pytest.fixture
def encoder_calls(monkeypatch) -> collections.Counter:
    """Counts ``Encoder.call`` per encoder object (``id``) while the test runs."""
    counts: collections.Counter = collections.Counter()
    call = Encoder.call

    @functools.wraps(call)
    def counting_call(self, images, training=None):
        counts[id(self)] += 1
        return call(self, images, training=training)

    monkeypatch.setattr(Encoder, "call", counting_call)
    return counts


def _image_encoder(torso: tf_keras.layers.Layer) -> Encoder:
    """The image encoder inside a torso (``actor_critic.build_torso``'s Sequential)."""
    (encoder,) = [layer for layer in torso.layers if isinstance(layer, Encoder)]
    return encoder


def _copy_variables(source, target, perturb_seed: int | None = None) -> list[tuple[tf.Variable, tf.Variable]]:
    """Gives ``target``'s variables ``source``'s values (optionally perturbed first); returns the pairs."""
    rng = np.random.default_rng(perturb_seed)
    pairs = list(zip(source.variables, target.variables, strict=True))
    for a, b in pairs:
        assert a.shape == b.shape and a.dtype == b.dtype, (a.name, b.name)
        if perturb_seed is not None and a.dtype == tf.float32:
            a.assign(a + rng.normal(0, 0.05, a.shape).astype(np.float32))
        b.assign(a)
    return pairs


def _assert_gradients_equal(recorded, reference, pairs) -> None:
    """``recorded``/``reference``: lists of ``{variable id: gradient}``, one per optimizer step."""
    to_reference = {id(a): id(b) for a, b in pairs}
    assert len(recorded) == len(reference)
    for step, (mine, theirs) in enumerate(zip(recorded, reference, strict=True)):
        assert len(mine) == len(theirs) > 0, step
        for variable_id, gradient in mine.items():
            expected = theirs[to_reference[variable_id]]
            np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-6, err_msg=f"step {step}")


# -- SAC --------------------------------------------------------------------------------------------
def _sac_agent(agent_class, encoder: str, encoder_kwargs) -> tfa_sac_agent.SacAgent:
    actor = sac_networks.SacActorNetwork(SAC_OBSERVATION_SPEC, SAC_ACTION_SPEC, encoder, encoder_kwargs, (8,))
    agent = agent_class(
        ts.time_step_spec(SAC_OBSERVATION_SPEC),
        SAC_ACTION_SPEC,
        actor_network=actor,
        **sac_networks.twin_critics(actor, SAC_ACTION_SPEC, (8,)),
        # Adam's first step is lr * g / (|g| + epsilon): with the default epsilon (1e-7) a gradient
        # entry near zero, equal to the reference within the gradients' atol (1e-6), can move its
        # weight by up to lr. epsilon 1e-3 makes the step smooth in g, so equal gradients give
        # weights equal to lr / epsilon * 1e-6 = 1e-5 (the weights' atol) however they are rounded.
        actor_optimizer=tf_keras.optimizers.Adam(1e-2, epsilon=1e-3),
        critic_optimizer=tf_keras.optimizers.Adam(1e-2, epsilon=1e-3),
        alpha_optimizer=tf_keras.optimizers.Adam(1e-2, epsilon=1e-3),
        target_update_tau=0.5,
        target_update_period=1,
        initial_log_alpha=-1.0,
        use_log_alpha_in_alpha_loss=False,
    )
    agent.initialize()
    return agent


def _sac_experience(agent):
    experience = tensor_spec.sample_spec_nest(agent.collect_data_spec, seed=3, outer_dims=(6, 2))
    mid = tf.fill([6, 2], ts.StepType.MID)
    reward = tf.random.stateless_uniform([6, 2], seed=(3, 4))
    return experience._replace(step_type=mid, next_step_type=mid, reward=reward, discount=tf.ones([6, 2]))


def _record_sac_gradients(agent, monkeypatch) -> list[dict[int, np.ndarray]]:
    recorded = []
    apply = agent._apply_gradients

    def recording(gradients, variables, optimizer):
        pairs = zip(gradients, variables, strict=True)
        recorded.append({id(v): tf.convert_to_tensor(g).numpy() for g, v in pairs})
        return apply(gradients, variables, optimizer)

    monkeypatch.setattr(agent, "_apply_gradients", recording)
    return recorded


def test_sac_train_step_runs_each_encoder_pass_once(encoder_calls):
    """Stock SacAgent: E 7 times, E' twice. Ours: E(s), E(s'), E(s) after the critic step; E'(s') once."""
    for agent_class, expected in [(tfa_sac_agent.SacAgent, (7, 2)), (SharedEncoderSacAgent, (3, 1))]:
        agent = _sac_agent(agent_class, "cnn", TINY_CNN)
        experience = _sac_experience(agent)
        agent.train(experience)  # the first call also builds; count the second
        encoder_calls.clear()
        agent.train(experience)
        shared = _image_encoder(agent._actor_network.encoder)
        target = _image_encoder(agent._target_critic_network_1.encoder)
        assert (encoder_calls[id(shared)], encoder_calls[id(target)]) == expected, agent_class
        assert sum(encoder_calls.values()) == sum(expected)


@pytest.mark.parametrize("encoder, encoder_kwargs", [("cnn", TINY_CNN), ("siet", TINY_SIET)])
def test_sac_train_step_equals_tf_agents_sac(encoder, encoder_kwargs, monkeypatch):
    """Same losses, gradients (critic, actor, alpha steps) and updated weights as TF-Agents' SacAgent."""
    agent = _sac_agent(SharedEncoderSacAgent, encoder, encoder_kwargs)
    reference = _sac_agent(tfa_sac_agent.SacAgent, encoder, encoder_kwargs)
    pairs = _copy_variables(agent, reference, perturb_seed=1)
    experience = _sac_experience(agent)

    # Test-time losses (no update between them); the same random draws for both agents.
    tf.random.set_seed(11)
    loss = agent.loss(experience)
    tf.random.set_seed(11)
    expected_loss = reference.loss(experience)
    np.testing.assert_allclose(loss.loss, expected_loss.loss, rtol=1e-5, atol=1e-6)

    recorded = _record_sac_gradients(agent, monkeypatch)
    expected = _record_sac_gradients(reference, monkeypatch)
    tf.random.set_seed(12)
    info = agent.train(experience)
    tf.random.set_seed(12)
    expected_info = reference.train(experience)
    for name in ("critic_loss", "actor_loss", "alpha_loss"):
        np.testing.assert_allclose(
            getattr(info.extra, name), getattr(expected_info.extra, name), rtol=1e-5, atol=1e-6, err_msg=name
        )
    _assert_gradients_equal(recorded, expected, pairs)
    # The critic step's gradient reaches the shared encoder; the actor step's does not.
    encoder_ids = {id(v) for v in agent._actor_network.encoder.trainable_weights}
    assert encoder_ids <= set(recorded[0]) and not encoder_ids & set(recorded[1])
    for a, b in pairs:  # after the three optimizer steps and the soft target update
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.name)


def test_sac_agent_needs_the_shared_encoder():
    actor = sac_networks.SacActorNetwork(SAC_OBSERVATION_SPEC, SAC_ACTION_SPEC, "cnn", TINY_CNN, (8,))
    critics = sac_networks.twin_critics(actor, SAC_ACTION_SPEC, (8,))
    common = {"actor_optimizer": None, "critic_optimizer": None, "alpha_optimizer": None}
    own_encoder = critics["critic_network"].copy(shared_encoder=None, name="OwnEncoderCritic")
    with pytest.raises(ValueError, match="must use the actor's encoder"):
        SharedEncoderSacAgent(
            ts.time_step_spec(SAC_OBSERVATION_SPEC),
            SAC_ACTION_SPEC,
            actor_network=actor,
            **{**critics, "critic_network_2": own_encoder},
            **common,
        )
    with pytest.raises(ValueError, match="share one encoder of their own"):
        SharedEncoderSacAgent(
            ts.time_step_spec(SAC_OBSERVATION_SPEC),
            SAC_ACTION_SPEC,
            actor_network=actor,
            **{**critics, "target_critic_network_2": own_encoder},
            **common,
        )


# -- PPO + DrAC -------------------------------------------------------------------------------------
def _flip(images: tf.Tensor) -> tf.Tensor:
    """A deterministic augmentation (left-right flip), so that both agents see the same f(s)."""
    return tf.reverse(images, axis=[2])


class _ReferenceDrACAgent(ppo_clip_agent.PPOClipAgent):
    """The straightforward formulation: TF-Agents' get_loss, then DrAC with its own passes at s."""

    def get_loss(self, time_steps, actions, act_log_probs, returns, normalized_advantages,
                 action_distribution_parameters, weights, train_step, debug_summaries,
                 old_value_predictions=None, training=False):  # fmt: skip
        loss_info = super().get_loss(
            time_steps, actions, act_log_probs, returns, normalized_advantages,
            action_distribution_parameters, weights, train_step, debug_summaries,
            old_value_predictions=old_value_predictions, training=training,
        )  # fmt: skip
        observations, step_type = time_steps.observation, time_steps.step_type
        augmented = tf.reshape(_flip(tf.reshape(observations, (-1, 14, 14, 3))), tf.shape(observations))
        pi_s, _ = self._actor_net(observations, step_type, (), training=training)
        pi_fs, _ = self._actor_net(augmented, step_type, (), training=training)
        target = type(pi_fs)(logits=tf.stop_gradient(pi_s.logits_parameter()))
        weights = tf.cast(weights, tf.float32)
        policy_reg = tf.reduce_sum(target.kl_divergence(pi_fs) * weights) / tf.reduce_sum(weights)
        v_s, _ = self._value_net(observations, step_type, (), training=False)
        v_fs, _ = self._value_net(augmented, step_type, (), training=training)
        value_reg = tf.reduce_sum(tf.square(v_fs - tf.stop_gradient(v_s)) * weights) / tf.reduce_sum(weights)
        return loss_info._replace(loss=loss_info.loss + DRAC_COEF * (policy_reg + value_reg))


def _ppo_agent(agent_class, value_clipping: float, **kwargs):
    actor = actor_critic.EncoderActorNetwork(PPO_OBSERVATION_SPEC, PPO_ACTION_SPEC, "cnn", PPO_CNN, (8,))
    value = actor_critic.EncoderValueNetwork(PPO_OBSERVATION_SPEC, "cnn", PPO_CNN, (8,))
    agent = agent_class(
        ts.time_step_spec(PPO_OBSERVATION_SPEC),
        PPO_ACTION_SPEC,
        optimizer=tf_keras.optimizers.Adam(1e-2),
        actor_net=actor,
        value_net=value,
        greedy_eval=False,
        importance_ratio_clipping=0.2,
        entropy_regularization=0.01,
        value_pred_loss_coef=0.5,
        value_clipping=value_clipping,
        num_epochs=1,
        use_gae=True,
        use_td_lambda_return=True,
        normalize_rewards=False,
        normalize_observations=False,
        gradient_clipping=0.5,
        compute_value_and_advantage_in_train=False,
        update_normalizers_in_train=False,
        **kwargs,
    )
    agent.initialize()
    return agent


def _drac_agent(value_clipping: float = 0.0) -> DrACPPOAgent:
    return _ppo_agent(DrACPPOAgent, value_clipping, augmentation=_flip, drac_coef=DRAC_COEF)


def _ppo_experience(agent, batch: int = 8):
    """A learner minibatch ``(B, 1)`` with collection-time logits, values, returns and advantages."""
    experience = tensor_spec.sample_spec_nest(agent.training_data_spec, seed=5, outer_dims=(batch, 1))
    rng = np.random.default_rng(5)
    step_type = np.full((batch, 1), int(ts.StepType.MID), np.int32)
    next_step_type = step_type.copy()
    step_type[0], next_step_type[0] = ts.StepType.LAST, ts.StepType.FIRST  # a boundary: weight 0
    policy_info = {
        "dist_params": {"logits": tf.constant(rng.normal(0, 1, (batch, 1, 4)), tf.float32)},
        "value_prediction": tf.constant(rng.normal(0, 1, (batch, 1)), tf.float32),
        "return": tf.constant(rng.normal(0, 1, (batch, 1)), tf.float32),
        "advantage": tf.constant(rng.normal(0, 1, (batch, 1)), tf.float32),
    }
    return experience._replace(
        step_type=tf.constant(step_type),
        next_step_type=tf.constant(next_step_type),
        discount=tf.ones((batch, 1)),
        action=tf.constant(rng.integers(0, 4, (batch, 1)), tf.int64),
        observation=tf.constant(rng.integers(0, 256, (batch, 1, 14, 14, 3)), tf.uint8),
        policy_info=policy_info,
    )


def _record_ppo_gradients(agent, monkeypatch) -> list[dict[int, np.ndarray]]:
    recorded = []
    optimizer = agent._optimizer
    apply = optimizer.apply_gradients

    def recording(grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        recorded.append({id(v): tf.convert_to_tensor(g).numpy() for g, v in grads_and_vars})
        return apply(grads_and_vars, *args, **kwargs)

    monkeypatch.setattr(optimizer, "apply_gradients", recording)
    return recorded


def test_drac_update_runs_each_network_once_over_s_and_fs(encoder_calls, monkeypatch):
    """pi(s), V(s), pi(f(s)), V(f(s)): one actor-encoder and one value-encoder pass, each over [s; f(s)].

    TF-Agents' get_loss runs V(s) twice (the collect policy's ``_distribution``
    adds one whose value it drops) and DrAC's value target was a third; the
    written-out reference also runs pi(s) again for DrAC's policy target.
    """
    agent = _drac_agent()
    experience = _ppo_experience(agent, batch=8)
    agent.train(experience)  # the first call also builds; count the second
    batches = []
    counting_call = Encoder.call  # encoder_calls' call, which this one wraps

    def recording_call(self, images, training=None):
        batches.append(images.shape[0])
        return counting_call(self, images, training=training)

    monkeypatch.setattr(Encoder, "call", recording_call)
    encoder_calls.clear()
    agent.train(experience)
    actor_encoder = _image_encoder(agent._actor_net._torso)
    value_encoder = _image_encoder(agent._value_net._torso)
    assert encoder_calls[id(actor_encoder)] == 1
    assert encoder_calls[id(value_encoder)] == 1
    assert sum(encoder_calls.values()) == 2 and batches == [16, 16]

    reference = _ppo_agent(_ReferenceDrACAgent, 0.0)
    reference.train(experience)
    encoder_calls.clear()
    reference.train(experience)
    assert encoder_calls[id(_image_encoder(reference._actor_net._torso))] == 3  # pi(s) twice, pi(f(s))
    assert encoder_calls[id(_image_encoder(reference._value_net._torso))] == 4  # V(s) 3 times, V(f(s))


@pytest.mark.parametrize("value_clipping", [0.0, 0.1])
def test_drac_update_equals_the_stock_loss_plus_drac(value_clipping, monkeypatch):
    """Same loss terms, gradients and updated weights as PPOClipAgent.get_loss plus DrAC."""
    agent = _drac_agent(value_clipping)
    reference = _ppo_agent(_ReferenceDrACAgent, value_clipping)
    pairs = _copy_variables(agent._actor_net, reference._actor_net, perturb_seed=2)
    pairs += _copy_variables(agent._value_net, reference._value_net, perturb_seed=3)
    experience = _ppo_experience(agent)

    recorded = _record_ppo_gradients(agent, monkeypatch)
    expected = _record_ppo_gradients(reference, monkeypatch)
    info = agent.train(experience)
    expected_info = reference.train(experience)
    np.testing.assert_allclose(info.loss, expected_info.loss, rtol=1e-5, atol=1e-6)
    for name in ("policy_gradient_loss", "value_estimation_loss", "entropy_regularization_loss"):
        np.testing.assert_allclose(
            getattr(info.extra, name), getattr(expected_info.extra, name), rtol=1e-5, atol=1e-6, err_msg=name
        )
    assert float(info.loss) != pytest.approx(
        float(expected_info.extra.policy_gradient_loss + expected_info.extra.value_estimation_loss)
    )  # the DrAC terms are in the total
    _assert_gradients_equal(recorded, expected, pairs)
    for a, b in pairs:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.name)
