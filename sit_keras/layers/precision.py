"""Which dtype the numerically sensitive parts of a layer run in under a mixed-precision policy."""

from __future__ import annotations

import tensorflow as tf

HALF_DTYPES = (tf.float16, tf.bfloat16)


def stable_dtype(compute_dtype: tf.DType | str) -> tf.DType:
    """``float32`` for a half-precision compute dtype, the compute dtype itself otherwise.

    Softmax, LayerNorm statistics and the score maps of GSA (but for the one
    in ``score_map_dtype``) run in this dtype:
    bfloat16 keeps 8 bits of mantissa, too few for sums over hundreds of
    scores or for a variance, while float64 layers stay float64 throughout.
    """
    dtype = tf.as_dtype(compute_dtype)
    return tf.float32 if dtype in HALF_DTYPES else dtype


def score_map_dtype(compute_dtype: tf.DType | str) -> tf.DType:
    """The dtype of GSA's score map where it is one matmul (the triangle sums' ``matrix`` form).

    bfloat16 under ``mixed_bfloat16``, ``stable_dtype`` otherwise. The map
    reads scores that a bfloat16 matmul produced, each of its rows holds a
    handful of nonzero weights, and oneDNN accumulates bfloat16 products in
    float32: running it in bfloat16 adds one rounding of its output (and of
    its weights); on an AMD host with AVX512_BF16 it took about half its
    float32 time (docs/speed.md, "On an AMD host with AVX512_BF16"). float16
    keeps float32 for its range (at most 65504).
    """
    dtype = tf.as_dtype(compute_dtype)
    return tf.bfloat16 if dtype == tf.bfloat16 else stable_dtype(dtype)
