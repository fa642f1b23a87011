"""Features standardised across states by running statistics: an actor head that cannot go blind.

An attention encoder whose class token starts by averaging its tokens outputs
about what every state shares: on LavaCrossing the part of its features that
changes with the state is a few percent of the shared part
(docs/lavacrossing.md, "Why the attention starts blind"). A linear head on such
features changes its logits in every state alike, and PPO's reward-free updates
then shrink the small state-dependent part until the policy plays one move
everywhere. ``FeatureStandardization`` takes the shared part away: each feature
minus its running mean over the training batches, divided by its running
standard deviation, so what reaches the head is what tells states apart, at
unit scale.

The statistics are bias-corrected exponential averages of the training batches'
means and mean squares (as Adam's moments), updated only in ``training`` calls
and never back-propagated: the layer is the same function for the policy that
collects and for the learner's ratio within an iteration, up to their slow drift.
Before its first training batch it is the identity. It acts on each feature
alone, so an invariant encoder's features stay invariant (rotations, flips,
permutations, whatever the encoder promises).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras


class FeatureStandardization(tf_keras.layers.Layer):
    """``(x - mean) / sqrt(var + epsilon)`` per feature, with running statistics of the training batches.

    Args:
      momentum: weight of the old statistics in each update (0.99: about the
        last 100 training batches).
      epsilon: added to the variance; a feature that is constant over the
        batches comes out as 0 rather than as noise.
    """

    def __init__(self, momentum: float = 0.99, epsilon: float = 1e-3, **kwargs: Any):
        super().__init__(**kwargs)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1). Received: momentum={momentum}")
        if not epsilon > 0.0:
            raise ValueError(f"epsilon must be > 0. Received: epsilon={epsilon}")
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)

    def build(self, input_shape: tf.TensorShape) -> None:
        units = tf.TensorShape(input_shape)[-1]
        if units is None:
            raise ValueError(f"FeatureStandardization needs a known last dimension. Received: {input_shape}")
        # Float32 statistics under a mixed policy too (a bfloat16 running average would stall);
        # float64 ones in a float64 model.
        self.stats_dtype = tf.float64 if self.dtype == "float64" else tf.float32
        kwargs = {"trainable": False, "dtype": self.stats_dtype, "experimental_autocast": False}
        self.moving_mean = self.add_weight("moving_mean", (units,), initializer="zeros", **kwargs)
        self.moving_square = self.add_weight("moving_square", (units,), initializer="zeros", **kwargs)
        self.update_count = self.add_weight("update_count", (), initializer="zeros", **kwargs)
        super().build(input_shape)

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        x = tf.cast(inputs, self.stats_dtype)
        if training:
            rows = tf.reshape(x, [-1, x.shape[-1]])
            old = self.momentum
            self.moving_mean.assign(old * self.moving_mean + (1.0 - old) * tf.reduce_mean(rows, 0))
            self.moving_square.assign(old * self.moving_square + (1.0 - old) * tf.reduce_mean(rows * rows, 0))
            self.update_count.assign_add(1.0)
        seen = self.update_count > 0.0
        one = tf.ones((), self.stats_dtype)
        correction = tf.where(
            seen, 1.0 - tf.pow(tf.constant(self.momentum, self.stats_dtype), self.update_count), one
        )
        mean = tf.where(seen, self.moving_mean / correction, tf.zeros_like(self.moving_mean))
        variance = tf.maximum(self.moving_square / correction - tf.square(mean), 0.0)
        scale = tf.where(seen, tf.math.rsqrt(variance + self.epsilon), tf.ones_like(variance))
        return tf.cast((x - mean) * scale, inputs.dtype)

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon}
