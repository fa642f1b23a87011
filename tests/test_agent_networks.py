"""The TF-Agents actor and value networks on the package's encoders."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from sit_keras.agents.networks import actor_critic
from sit_keras.testing import ROTATIONS, assert_invariant, tolerance

IMAGE_SPEC = tensor_spec.BoundedTensorSpec((14, 14, 3), tf.uint8, 0, 255)
DISCRETE = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
CONTINUOUS = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
# A small SiT for 14x14 images: graph-conv stem + 2x2 pooling (7x7 tokens),
# one local (3x3 windows) and one global GSA layer.
SMALL_SIT = {
    "preset": "minigrid",
    "dim": 16,
    "num_heads": 2,
    "stem_kernel_size": 3,
    "pool_size": 2,
    "window": 3,
    "local_layers": 1,
    "global_layers": 1,
    "output_dim": 16,
}
CNN = {"filters": (8,), "strides": 1, "output_dim": 16}


def _images(*outer: int, seed: int = 0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).integers(0, 256, (*outer, 14, 14, 3), dtype=np.uint8))


@pytest.mark.parametrize("encoder, kwargs", [("cnn", CNN), ("sit", SMALL_SIT)])
def test_actor_trains_the_encoder(encoder, kwargs):
    # A Keras-3 encoder inside a tf-agents Network would be missing here and
    # silently never train (shared/notes/dependencies.md).
    actor = actor_critic.EncoderActorNetwork(IMAGE_SPEC, DISCRETE, encoder, kwargs)
    actor.create_variables()
    encoder_layer = actor._torso.layers[0]
    assert encoder_layer.trainable_variables
    network_vars = {v.ref() for v in actor.trainable_variables}
    assert all(v.ref() in network_vars for v in encoder_layer.trainable_variables)

    images = _images(4)
    actions = tf.constant([0, 1, 2, 3], tf.int64)
    with tf.GradientTape() as tape:
        distribution, _ = actor(images, training=True)
        loss = -tf.reduce_mean(distribution.log_prob(actions))
    gradients = tape.gradient(loss, encoder_layer.trainable_variables)
    assert all(g is not None for g in gradients)


def test_actor_and_value_accept_time_and_batch_dims():
    actor = actor_critic.EncoderActorNetwork(IMAGE_SPEC, DISCRETE, "cnn", CNN, fc_layer_params=(8,))
    value = actor_critic.EncoderValueNetwork(IMAGE_SPEC, "cnn", CNN)
    for outer in [(5,), (3, 2)]:
        distribution, _ = actor(_images(*outer))
        assert distribution.logits.shape == (*outer, 4)
        values, _ = value(_images(*outer))
        assert values.shape == outer


def test_continuous_actions_get_a_normal_projection():
    actor = actor_critic.EncoderActorNetwork(IMAGE_SPEC, CONTINUOUS, "cnn", CNN)
    distribution, _ = actor(_images(3))
    assert distribution.sample().shape == (3, 2)
    # The mean is squashed into the action bounds (PPO clips samples to them).
    assert np.all(np.abs(distribution.mean().numpy()) <= 1.0)


def test_copy_gives_fresh_weights():
    actor = actor_critic.EncoderActorNetwork(IMAGE_SPEC, DISCRETE, "cnn", CNN)
    actor.create_variables()
    twin = actor.copy(name="twin")
    twin.create_variables()
    assert len(twin.trainable_variables) == len(actor.trainable_variables)
    assert not {v.ref() for v in twin.trainable_variables} & {v.ref() for v in actor.trainable_variables}


def test_sit_policy_is_rotation_invariant():
    # Relative actions (forward/backward/left/right) make the invariant policy
    # the right one for a rotated MiniGrid: the rotated state needs the same action.
    actor = actor_critic.EncoderActorNetwork(IMAGE_SPEC, DISCRETE, "sit", SMALL_SIT)
    actor.create_variables()
    for variable in actor.trainable_variables:  # away from the initial near-identity weights
        variable.assign_add(tf.random.normal(variable.shape, stddev=0.05, seed=1))

    def logits(images):
        return actor(images)[0].logits

    assert_invariant(logits, _images(3, seed=2), ROTATIONS, tol=tolerance(tf.float32))


def test_vector_observations_use_the_mlp():
    spec = tensor_spec.TensorSpec((4,), tf.float32)
    value = actor_critic.EncoderValueNetwork(spec, "mlp", {"units": (8, 8)})
    values, _ = value(tf.zeros((6, 4)))
    assert values.shape == (6,)


@pytest.mark.parametrize(
    "spec, encoder, kwargs, match",
    [
        (IMAGE_SPEC, "resnet", None, "Unknown encoder 'resnet'"),
        (IMAGE_SPEC, "mlp", None, r"vector observations of shape \(D,\)"),
        (tensor_spec.TensorSpec((4,), tf.float32), "cnn", None, r"image observations of shape \(H, W, C\)"),
        (tensor_spec.TensorSpec((4,), tf.float32), "mlp", {"layers": 2}, "Unknown 'mlp' encoder arguments"),
    ],
)
def test_bad_encoder_choices_are_clear(spec, encoder, kwargs, match):
    with pytest.raises(ValueError, match=match):
        actor_critic.EncoderValueNetwork(spec, encoder, kwargs)
