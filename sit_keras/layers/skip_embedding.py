"""The first local block's skip embedding ``[x, 1, 0] [E; e; c]``: a product over a few channels."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from sit_keras.layers.thread_flag import ThreadFlag
from sit_keras.layers.xla_context import in_compiled_function
from sit_keras.native import cpu

_matmul = ThreadFlag()  # matmul_embedding_gradients()
_summed = ThreadFlag()  # summed_embedding_gradients()
# The hosts whose XLA steps take the summed input gradient by default (docs/speed.md, "The skip embedding's
# gradient under XLA"): on an AMD host it took the product 0.77-0.84x as long as XLA's oneDNN matmul, on
# an Intel host with AMX 1.12-1.17x.
SUMMED_GRADIENT_VENDORS = ("AuthenticAMD",)


def sums_gradient_by_default() -> bool:
    """Whether functions XLA compiles take the summed input gradient on this host (``embed_few_channels``)."""
    return cpu.cpu_vendor() in SUMMED_GRADIENT_VENDORS


def _traces_summed_gradient() -> bool:
    """The form this thread traces: a context's choice (the matmul's first), else this host's default."""
    return not _matmul and (bool(_summed) or sums_gradient_by_default())


def embed_few_channels(rows: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
    """``rows table``: ``(N, R)`` rows of a few channels times ``(R, D)`` -> ``(N, D)``.

    ``LocalGSA._skip`` embeds every pixel of every window this way for the
    first local block's skip connection: ``R = C + 2``, a pixel's values, a 1
    that adds the bias ``e`` and a 0; a window's class token is the row
    ``[0, ..., 0, 1]``, which gives ``c``. The input's gradient ``dy table^T``
    has only ``R`` outputs a row, each a sum over ``D``. Inside a function XLA
    compiles, on float32 or float64, on an AMD host (``sums_gradient_by_default``),
    it is the broadcast product ``dy[:, None, :] * table[None]`` summed over
    its last axis, one loop XLA fuses, where XLA's oneDNN matmul took 2.38 ms
    in the SiT's XLA step at batch 96 (``N = 104,448``, ``R = 5``, ``D = 64``).
    On an Intel host with AMX XLA's matmul formed it faster, so on any host but
    an AMD one, and in a graph (where the summed form was slower than
    TensorFlow's matmul in a trial, not recorded), it is the matmul's own
    gradient (docs/speed.md, "The skip embedding's gradient under XLA"). The table's gradient is the matmul
    ``rows^T dy`` either way. The same sums, so float64 gradients agree to
    rounding. ``summed_embedding_gradients()`` and
    ``matmul_embedding_gradients()`` choose a form under XLA on any host, for
    comparisons.
    """
    rows, table = tf.convert_to_tensor(rows), tf.convert_to_tensor(table)
    summed = rows.dtype in (tf.float32, tf.float64) and _traces_summed_gradient()
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


def summed_embedding_gradients() -> contextlib.AbstractContextManager[None]:
    """Functions XLA compiles that are traced inside take the summed input gradient for the skip embedding
    (``embed_few_channels``; this thread), on any host: benchmarks compare both forms in one run."""
    return _summed.on()
