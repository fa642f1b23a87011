"""The small CNN baseline of the SiT paper (Figure 8; F.1 for MiniGrid).

The layer stack, one convolution per entry of ``filters``::

    images                                                  (B, H, W, C)
      -> per f in filters: Conv2D(f, kernel_size, strides, same, relu)
                                                            (B, h, w, filters[-1])
      -> flatten                                            (B, h * w * filters[-1])
      -> Dense(output_dim, relu)                            (B, output_dim)

Each convolution maps a side ``n`` to ``ceil(n / strides)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.native_gradients import NativeGradConv2D
from sit_keras.models.base import Encoder


def _is_positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= 1


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class ConvEncoder(Encoder):
    """Plain CNN: strided ReLU convolutions, then one ReLU Dense layer.

    The defaults are the Procgen CNN of the SiT paper's Figure 8: four
    convolutions with ``[4, 8, 16, 32]`` channels and hidden size 64, "40k
    weights"; at ``image_shape=(64, 64, 3)`` this encoder has 39,048. The
    MiniGrid CNN of F.1 ("two convolution layers, two fully connected ones",
    the second being the policy head) is e.g.
    ``ConvEncoder((14, 14, 3), filters=(16, 32), strides=1)``.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32 and every layer runs in the compute dtype (there is no
    normalisation or softmax to keep in float32); the features are
    returned in the compute dtype.

    Args:
      image_shape: ``(H, W, C)``.
      output_dim: size ``D_out`` of the final ReLU Dense layer (hidden size).
      filters: output channels of each convolution.
      kernel_size: side of the square convolution kernels.
      strides: stride of every convolution.
      **kwargs: passed to ``Encoder`` (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)``, ``uint8`` (scaled by 1/255) or float.
      training: Python or tensor boolean (unused: no dropout or batch norm).

    Returns:
      ``(B, D_out)`` features in the compute dtype.

    Raises:
      ValueError: invalid sizes, or (on call) images not of shape ``(B, H, W, C)``.

    >>> encoder = ConvEncoder(image_shape=(14, 14, 3), filters=(16, 32), strides=1)
    >>> encoder(tf.zeros((2, 14, 14, 3), tf.uint8)).shape
    TensorShape([2, 64])
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_dim: int = 64,
        filters: Sequence[int] = (4, 8, 16, 32),
        kernel_size: int = 3,
        strides: int = 2,
        **kwargs: Any,
    ):
        super().__init__(image_shape=image_shape, output_dim=output_dim, **kwargs)
        if (
            isinstance(filters, (str, bytes))
            or not isinstance(filters, Sequence)
            or not filters
            or not all(_is_positive_int(f) for f in filters)
        ):
            raise ValueError(
                f"filters must be a non-empty sequence of positive integers. Received: filters={filters!r}"
            )
        for name, value in (("kernel_size", kernel_size), ("strides", strides)):
            if not _is_positive_int(value):
                raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
        self.filters = tuple(int(f) for f in filters)
        self.kernel_size = int(kernel_size)
        self.strides = int(strides)

        policy = self.dtype_policy
        self.convs = [
            NativeGradConv2D(
                f,
                self.kernel_size,
                strides=self.strides,
                padding="same",
                activation="relu",
                dtype=policy,
                name=f"conv_{i}",
            )
            for i, f in enumerate(self.filters)
        ]
        self.flatten = tf_keras.layers.Flatten(dtype=policy, name="flatten")
        self.hidden = tf_keras.layers.Dense(self.output_dim, activation="relu", dtype=policy, name="hidden")

    def encode(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        del training  # No layer behaves differently in training.
        x = images
        for conv in self.convs:
            x = conv(x)
        return self.hidden(self.flatten(x))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(filters=list(self.filters), kernel_size=self.kernel_size, strides=self.strides)
        return config
