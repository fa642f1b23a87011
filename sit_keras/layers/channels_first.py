"""The channels-first projection ``W^T x`` with a fast kernel gradient on CPU."""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from sit_keras import native
from sit_keras.layers.thread_flag import ThreadFlag
from sit_keras.layers.xla_context import in_compiled_function

_folded = ThreadFlag()  # folded_kernel_gradients()


def project_channels_first(kernel: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """``W^T x``: ``(R, N)`` kernel, ``(R, L)`` channels-first inputs -> ``(N, L)``.

    The GSA layers keep their tokens channels first (``L`` = batch x tokens,
    often 10^5 columns). The value is ``tf.matmul(kernel, x, transpose_a=True)``;
    only the kernel's gradient is taken differently. TensorFlow's MatMul
    gradient forms it as ``x dy^T``, a product over the long axis with its
    second operand transposed; TensorFlow's CPU kernels ran it 2.7x (``R = 64``)
    to 6.1x (``R = 6``) slower than the same product formed as ``(dy x^T)^T``
    on an AVX2 host, and that 2-D product in turn 2.0x (``R = 64``) slower than
    the same product as a batched matmul of one matrix on an AVX512_BF16 host
    (``benchmarks/channels_first_grad.py``, docs/speed.md). Same sums, so
    float64 gradients agree to rounding.

    Where the native kernels are usable (``sit_keras.native.usable``) and the
    tokens are float32 or float64, the projection and its kernel gradient are
    native ops instead (``native.project_channels_first``): 1.71x faster
    forward and 1.30x forward and backward than TensorFlow's matmuls on an
    AVX2 host (docs/speed.md, "The projection in a native op"); under XLA too
    where their XLA kernels are built (``sit_keras.native.XLA_LIBRARY``).
    Where TensorFlow runs oneDNN's kernels (the Intel hosts and the AMD one
    with AVX512_BF16; ``native.projection_gradients_by_matmul``) the gradients of the native
    projection are TensorFlow's matmuls (``matmul_gradients``; XLA's dots under
    XLA), which were faster there (docs/speed.md, "The projection's gradients
    by oneDNN's matmuls").
    bfloat16 tokens and kernel on a CPU with AMX (mixed_bfloat16) run the
    projection and the input's gradient as ``native.project_bfloat16``, outside
    XLA; the kernel's gradient stays TensorFlow's batched matmul (docs/speed.md,
    "The projection in bfloat16 on AMX tiles").
    """
    # Tensors, not variables: a kernel read from a variable (in the compute dtype under a mixed
    # policy) reaches the variable through that read, outside the custom gradient.
    kernel, x = tf.convert_to_tensor(kernel), tf.convert_to_tensor(x)
    same_float = x.dtype in (tf.float32, tf.float64) and kernel.dtype == x.dtype
    if same_float and native.usable(x.dtype, native.PROJECTION_OPS):
        by_matmul = native.projection_gradients_by_matmul()
        return native.project_channels_first(kernel, x, matmul_gradients if by_matmul else None)
    on_amx = (
        x.dtype == kernel.dtype == tf.bfloat16
        and native.projects_bfloat16_on_amx()
        and native.usable(x.dtype, native.BFLOAT16_PROJECTION_OPS)
    )

    @tf.custom_gradient
    def projection(kernel: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        def grad(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            if on_amx:
                transposed = tf.transpose(kernel)
                return kernel_gradient_by_matmul(x, upstream), native.project_bfloat16(transposed, upstream)
            return matmul_gradients(kernel, x, upstream)

        if on_amx:
            return native.project_bfloat16(kernel, x), grad
        return tf.matmul(kernel, x, transpose_a=True), grad

    return projection(kernel, x)


def matmul_gradients(kernel: tf.Tensor, x: tf.Tensor, upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The projection's gradients as TensorFlow's matmuls: the kernel's and the input's, ``W dy``."""
    return kernel_gradient_by_matmul(x, upstream), tf.matmul(kernel, upstream)


def kernel_gradient_by_matmul(x: tf.Tensor, upstream: tf.Tensor) -> tf.Tensor:
    """The kernel's gradient ``(dy x^T)^T``, ``(R, N)``, as a batch of one: TensorFlow's CPU batched matmul
    runs this long product faster than its 2-D one.

    Under XLA the small ``(N, R)`` product is transposed by a gather: XLA folds a transpose into the dot
    and forms ``x dy^T`` instead, which oneDNN's matmul formed in 15.64 ms against 14.48 for ``dy x^T`` in
    the SiT's XLA step on an AMD host (docs/speed.md, "The kernel gradient's transpose under XLA"); it
    does not fold a gather. (An optimisation barrier before the transpose kept the product too, but XLA
    then returned wrong values for some small shapes.) ``folded_kernel_gradients()`` lets XLA fold it,
    for comparisons; the whole XLA step took 0.961-0.991x as long with the gather there.
    """
    product = tf.matmul(upstream[None], x[None], transpose_b=True)[0]
    if not in_compiled_function() or _folded or not product.shape.is_fully_defined():
        return tf.transpose(product)
    outputs, rows = product.shape
    # order[r N + n] = n R + r: where the transpose's entry (r, n) lies in the product.
    order = np.arange(outputs * rows).reshape(outputs, rows).T.reshape(-1)
    return tf.reshape(tf.gather(tf.reshape(product, [-1]), order), [rows, outputs])


def folded_kernel_gradients() -> contextlib.AbstractContextManager[None]:
    """Functions XLA compiles that are traced inside let XLA fold the kernel gradient's transpose into its dot
    (``kernel_gradient_by_matmul``; this thread): benchmarks compare both forms in one run."""
    return _folded.on()
