"""Keras' ``Conv2D`` and ``MaxPool2D`` whose convolutions and gradients, under XLA, are native ops.

The CNN baselines (the IMPALA-CNN of DrAC and the MiniGrid CNN) are stacks of
3x3 "same" convolutions on few channels, the IMPALA-CNN's with 3x3 max pooling
of stride 2. Compiled by XLA on a CPU, a convolution's kernel gradient is a
oneDNN call that took up to 9x as long as TensorFlow's own op in a graph, and
the pooling's gradient a select-and-scatter that took 2-4x: most of the
IMPALA-CNN's XLA step (docs/speed.md, "Where XLA loses the IMPALA-CNN's step");
and each convolution a oneDNN call that creates its primitive on every call.
These layers compute the same functions as Keras' layers, with the same weights
and configs; inside ``tf.function(jit_compile=True)`` the convolution (with
its bias and a ReLU activation) and its input's gradient are the native op
``SitConv2D`` (on few channels, where ``native.native_convolution_applies``),
the gradients ``SitConv2DKernelGrad`` and ``SitStridedMaxPoolGrad``, all
through their XLA kernels, and the bias's gradient a product with a vector of
ones, where XLA's own sum took 3-5x as long (``sit_keras.native.conv2d``,
``sit_keras.native.strided_max_pool``; docs/speed.md, "The MiniGrid CNN's step
under XLA").
In a graph, where TensorFlow's ops are as fast, and wherever the native ops do
not apply (other strides, padding or dtypes; no XLA kernels built), they are
Keras' layers unchanged.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from sit_keras import native
from sit_keras.layers.xla_context import in_compiled_function

# In bfloat16 TensorFlow's own convolutions and pooling are faster; the ops compute in float32 or float64.
_NATIVE_DTYPES = (tf.float32, tf.float64)


def _native_gradient_here(dtype: tf.DType, ops: frozenset[str]) -> bool:
    """Whether a layer traced now on ``dtype`` inputs takes its gradient from ``ops``: under XLA only."""
    return tf.as_dtype(dtype) in _NATIVE_DTYPES and in_compiled_function() and native.usable(dtype, ops)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class NativeGradConv2D(tf_keras.layers.Conv2D):
    """``tf_keras.layers.Conv2D``; under XLA its convolution and gradients are native ops where they apply.

    Symmetry: none of its own (a learned convolution is equivariant to
    translations of the pixel grid away from its borders, as Keras' layer is).

    The native ops apply to stride 1, "same" padding, no dilation, one group,
    an odd square kernel, channels last, float32 or float64, in a function XLA
    compiles with the op's XLA kernel built (``native.usable``). Arguments,
    call and config are Keras' ``Conv2D``'s.
    """

    def uses_native_op(self, dtype: tf.DType) -> bool:
        """Whether ``call``, traced now on ``dtype`` inputs, convolves with the native ops."""
        return (
            tuple(self.strides) == (1, 1)
            and self.padding == "same"
            and tuple(self.dilation_rate) == (1, 1)
            and self.groups == 1
            and self.data_format == "channels_last"
            and self.kernel_size[0] == self.kernel_size[1]
            and self.kernel_size[0] % 2 == 1
            and _native_gradient_here(dtype, native.CONV_OPS)
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if not self.uses_native_op(inputs.dtype):
            return super().call(inputs)
        bias = tf.cast(self.bias, inputs.dtype) if self.use_bias else None
        # A relu is the convolution's own: the op takes it as it stores its sums.
        relu = self.activation is tf_keras.activations.relu
        outputs = native.conv2d(inputs, tf.cast(self.kernel, inputs.dtype), bias, relu=relu)
        return outputs if relu or self.activation is None else self.activation(outputs)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class NativeGradMaxPool2D(tf_keras.layers.MaxPool2D):
    """``tf_keras.layers.MaxPool2D``; under XLA its gradient is a native op where it applies.

    Symmetry: none of its own (Keras' pooling; equivariant to translations by
    multiples of the stride away from the borders).

    The native op applies to square windows larger than their stride (which
    overlap) of at most 64 positions, "same" padding, channels last, float32
    or float64, in a function XLA compiles with the op's XLA kernel built.
    Arguments, call and config are Keras' ``MaxPool2D``'s.
    """

    def uses_native_op(self, dtype: tf.DType) -> bool:
        """Whether ``call``, traced now on ``dtype`` inputs, takes its gradient from the native op."""
        size, stride = self.pool_size, self.strides
        return (
            size[0] == size[1]
            and stride[0] == stride[1]
            and stride[0] < size[0]
            and size[0] ** 2 <= native.MAX_STRIDED_POOL_POSITIONS
            and self.padding == "same"
            and self.data_format == "channels_last"
            and _native_gradient_here(dtype, native.STRIDED_POOL_OPS)
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if self.uses_native_op(inputs.dtype):
            return native.strided_max_pool(inputs, self.pool_size[0], self.strides[0])
        return super().call(inputs)
