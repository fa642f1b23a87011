"""Which dtype the numerically sensitive parts of a layer run in under a mixed-precision policy."""

from __future__ import annotations

import tensorflow as tf

HALF_DTYPES = (tf.float16, tf.bfloat16)


def stable_dtype(compute_dtype: tf.DType | str) -> tf.DType:
    """``float32`` for a half-precision compute dtype, the compute dtype itself otherwise.

    Softmax, LayerNorm statistics and the score maps of GSA run in this dtype:
    bfloat16 keeps 8 bits of mantissa, too few for sums over hundreds of
    scores or for a variance, while float64 layers stay float64 throughout.
    """
    dtype = tf.as_dtype(compute_dtype)
    return tf.float32 if dtype in HALF_DTYPES else dtype
