"""The first local block's skip embedding ``[x, 1, 0] [E; e; c]``: a product over a few channels."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from sit_keras.layers.thread_flag import ThreadFlag
from sit_keras.layers.xla_context import in_compiled_function

_matmul = ThreadFlag()  # matmul_embedding_gradients()


def embed_few_channels(rows: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
    """``rows table``: ``(N, R)`` rows of a few channels times ``(R, D)`` -> ``(N, D)``.

    ``LocalGSA._skip`` embeds every pixel of every window this way for the
    first local block's skip connection: ``R = C + 2``, a pixel's values, a 1
    that adds the bias ``e`` and a 0; a window's class token is the row
    ``[0, ..., 0, 1]``, which gives ``c``. Inside a function XLA
    compiles, on float32 or float64, the input's gradient ``dy table^T`` (only
    ``R`` outputs a row, each a sum over ``D``) is the broadcast product
    ``dy[:, None, :] * table[None]`` summed over its last axis, one loop XLA
    fuses, where XLA's oneDNN matmul took 2.38 ms in the SiT's XLA step at
    batch 96 (``N = 104,448``, ``R = 5``, ``D = 64``; docs/speed.md, "The skip
    embedding's gradient under XLA"). Elsewhere it is the matmul's own gradient:
    in a graph the summed form was slower than TensorFlow's matmul in a trial
    on the same host (not recorded). The table's
    gradient is the matmul ``rows^T dy`` either way. The same sums, so float64
    gradients agree to rounding. ``matmul_embedding_gradients()`` keeps the
    matmul's gradient under XLA too, for comparisons.
    """
    rows, table = tf.convert_to_tensor(rows), tf.convert_to_tensor(table)
    summed = rows.dtype in (tf.float32, tf.float64) and not _matmul
    if not (summed and in_compiled_function()):
        return tf.matmul(rows, table)

    @tf.custom_gradient
    def product(rows: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
        def grad(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            by_row = tf.reduce_sum(upstream[:, None, :] * table[None], axis=-1)
            return by_row, tf.matmul(rows, upstream, transpose_a=True)

        return tf.matmul(rows, table), grad

    return product(rows, table)


def matmul_embedding_gradients() -> contextlib.AbstractContextManager[None]:
    """Functions XLA compiles that are traced inside take the matmul's gradient for the skip embedding
    (``embed_few_channels``; this thread): benchmarks compare both forms in one run."""
    return _matmul.on()
