"""Layer normalisation without its affine part, with a hand-written gradient.

The GSA blocks' LayerNorm feeds straight into the query/key/value projection,
so its scale ``gamma`` and offset ``beta`` fold into that projection
(``GraphSymmetricAttention.project_qkv``) and only the standardisation is
left. Keras' unfused LayerNorm (epsilon 1e-6 keeps it off TensorFlow's fused
kernel) differentiates it through several broadcast reductions; the closed
form below needs two.
"""

from __future__ import annotations

import tensorflow as tf

from sit_keras.layers.precision import stable_dtype


def standardize(x: tf.Tensor, epsilon: float) -> tf.Tensor:
    """``(x - mean(x)) / sqrt(var(x) + epsilon)`` over the last axis.

    The gradient is ``r * (dy - mean(dy) - y * mean(dy * y))`` with
    ``r = 1 / sqrt(var + epsilon)``, the exact derivative of the forward.
    A float16 / bfloat16 input is standardised in float32 (its statistics
    would lose most of their digits) and the result returned in its dtype.
    """
    dtype = x.dtype
    return tf.cast(_standardize(tf.cast(x, stable_dtype(dtype)), epsilon), dtype)


def _standardize(x: tf.Tensor, epsilon: float) -> tf.Tensor:
    @tf.custom_gradient
    def forward(x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inverse_std = tf.math.rsqrt(variance + tf.constant(epsilon, x.dtype))  # not rounded to float32
        y = (x - mean) * inverse_std

        def grad(dy: tf.Tensor) -> tf.Tensor:
            mean_dy = tf.reduce_mean(dy, axis=-1, keepdims=True)
            mean_dy_y = tf.reduce_mean(dy * y, axis=-1, keepdims=True)
            return inverse_std * (dy - mean_dy - y * mean_dy_y)

        return y, grad

    return forward(x)
