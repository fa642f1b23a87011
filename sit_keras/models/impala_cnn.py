"""The IMPALA ResNet baseline, as used by DrAC (Raileanu et al., 2020) on Procgen.

The layer stack, one ConvSequence per entry of ``channels``::

    images                                                   (B, H, W, C)
      -> per c in channels:
           Conv3x3(c) -> MaxPool(3, stride 2)                 (B, ceil(H/2), ceil(W/2), c)
           -> 2 x [x + Conv3x3(relu(Conv3x3(relu(x))))]
      -> flatten -> relu                                     (B, h * w * channels[-1])
      -> Dense(output_dim, relu)                             (B, output_dim)
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.native_gradients import NativeGradConv2D, NativeGradMaxPool2D
from sit_keras.models.base import Encoder


def _build(layer: tf_keras.layers.Layer, input_shape: tf.TensorShape) -> None:
    # Built from a parent's `build`, a sublayer is outside its own name scope;
    # entering it keeps variable names unique (as tf_keras' Bidirectional does).
    with tf.name_scope(layer.name):
        layer.build(input_shape)


class _ResidualBlock(tf_keras.layers.Layer):
    """``x + Conv3x3(relu(Conv3x3(relu(x))))`` with ``channels`` in and out.

    Call arguments:
      inputs: ``(B, H, W, channels)``.

    Returns:
      ``(B, H, W, channels)``.
    """

    def __init__(self, channels: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.channels = channels
        policy = self.dtype_policy
        self.conv_0 = NativeGradConv2D(channels, 3, padding="same", dtype=policy, name="conv_0")
        self.conv_1 = NativeGradConv2D(channels, 3, padding="same", dtype=policy, name="conv_1")

    def build(self, input_shape: tf.TensorShape) -> None:
        _build(self.conv_0, input_shape)
        _build(self.conv_1, input_shape)
        super().build(input_shape)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        # `maximum`, not `relu`, on the input: Grappler's remapper fuses the
        # previous block's Conv2D + BiasAdd + Add with a Relu that reads the
        # sum, then fails on this block's sum, which reads it too ("remapper
        # failed: Mutation::Apply error"), and drops the graph's fusions.
        x = self.conv_0(tf.maximum(inputs, tf.zeros((), inputs.dtype)))
        x = self.conv_1(tf.nn.relu(x))
        return inputs + x

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(channels=self.channels)
        return config


class _ConvSequence(tf_keras.layers.Layer):
    """Conv3x3 -> MaxPool(3, stride 2, same) -> two residual blocks.

    Call arguments:
      inputs: ``(B, H, W, C)``.

    Returns:
      ``(B, ceil(H / 2), ceil(W / 2), channels)``.
    """

    def __init__(self, channels: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.channels = channels
        policy = self.dtype_policy
        self.conv = NativeGradConv2D(channels, 3, padding="same", dtype=policy, name="conv")
        # DrAC pads by 1 on both sides (PyTorch); "same" pads only bottom/right
        # for even sizes. Both give ceil(n / 2) outputs, so weights match.
        self.pool = NativeGradMaxPool2D(pool_size=3, strides=2, padding="same", dtype=policy, name="pool")
        self.residual_0 = _ResidualBlock(channels, dtype=policy, name="residual_0")
        self.residual_1 = _ResidualBlock(channels, dtype=policy, name="residual_1")

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        _build(self.conv, input_shape)
        pooled_shape = self.pool.compute_output_shape(input_shape[:-1].concatenate([self.channels]))
        _build(self.residual_0, pooled_shape)
        _build(self.residual_1, pooled_shape)
        super().build(input_shape)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        x = self.pool(self.conv(inputs))
        return self.residual_1(self.residual_0(x))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(channels=self.channels)
        return config


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class ImpalaCNNEncoder(Encoder):
    """IMPALA ResNet (Espeholt et al., 2018) in the form DrAC uses on Procgen.

    With the defaults (``channels=(16, 32, 32)``, ``output_dim=256``) this is
    the UCB-DrAC "Impala-CNN" of Raileanu et al. (2020), 622,144 weights at
    ``image_shape=(64, 64, 3)`` (the SiT paper's "620k", Table 1). The SiT
    paper's CNN baseline keeps the architecture but uses
    ``channels=(4, 8, 16)``, ``output_dim=64`` (Table 2): 79,384 weights at
    ``(64, 64, 3)``, the "79.4k" of the Table 1 caption.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32 and every layer runs in the compute dtype (there is no
    normalisation or softmax to keep in float32); the features are
    returned in the compute dtype.

    Args:
      image_shape: ``(H, W, C)``.
      output_dim: size ``D_out`` of the final ReLU Dense layer (hidden size).
      channels: output channels of each ConvSequence; each halves ``H`` and
        ``W`` (rounding up).
      **kwargs: passed to ``Encoder`` (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)``, ``uint8`` (scaled by 1/255) or float.
      training: Python or tensor boolean (unused: no dropout or batch norm).

    Returns:
      ``(B, D_out)`` features in the compute dtype.

    Raises:
      ValueError: invalid sizes, or (on call) images not of shape ``(B, H, W, C)``.

    >>> encoder = ImpalaCNNEncoder(image_shape=(16, 16, 3), channels=(4, 8, 16), output_dim=64)
    >>> encoder(tf.zeros((2, 16, 16, 3), tf.uint8)).shape
    TensorShape([2, 64])
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_dim: int = 256,
        channels: Sequence[int] = (16, 32, 32),
        **kwargs: Any,
    ):
        super().__init__(image_shape=image_shape, output_dim=output_dim, **kwargs)
        if (
            isinstance(channels, (str, bytes))
            or not isinstance(channels, Sequence)
            or not channels
            or any(isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1 for c in channels)
        ):
            raise ValueError(
                f"channels must be a non-empty sequence of positive integers. Received: channels={channels!r}"
            )
        self.channels = tuple(int(c) for c in channels)

        policy = self.dtype_policy
        self.conv_sequences = [
            _ConvSequence(c, dtype=policy, name=f"conv_sequence_{i}") for i, c in enumerate(self.channels)
        ]
        self.flatten = tf_keras.layers.Flatten(dtype=policy, name="flatten")
        self.hidden = tf_keras.layers.Dense(self.output_dim, activation="relu", dtype=policy, name="hidden")

    def encode(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        del training  # No layer behaves differently in training.
        x = images
        for sequence in self.conv_sequences:
            x = sequence(x)
        # The last residual block ends in a sum, not an activation.
        return self.hidden(tf.nn.relu(self.flatten(x)))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(channels=list(self.channels))
        return config
