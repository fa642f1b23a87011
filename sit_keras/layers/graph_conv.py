"""Depth-wise convolution with graph-symmetric kernels (SiT paper Listing 4, Table 2, appendix F.5)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras import graphs, native
from sit_keras.layers.graph_weights import NearIdentity
from sit_keras.layers.indexing import expand_shared
from sit_keras.symmetry import EQUIVARIANT, Symmetry, graph_symmetry

# Input channels up to which a depth-wise convolution with a depth multiplier runs
# in the dense form (``GraphConv2D.uses_dense_form``): an RGB or RGBA image.
DENSE_FORM_MAX_CHANNELS = 4


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GraphConv2D(tf_keras.layers.Layer):
    """A depth-wise convolution whose kernel shares weights like a graph matrix.

    The kernel entry at offset ``(dy, dx)`` from the kernel centre is the
    weight of that offset's class in ``sit_keras.graphs.kernel_indices``, so
    a ``"rotation"`` kernel is unchanged by every element of D4 and the
    convolution commutes with them on square maps (with ``"same"`` padding,
    or ``"valid"`` padding whose windows tile the map). It serves as

    - the SiT stem: "one initial conv. layer with shared graph weights and a
      subsequent max. pooling layer" (Table 2 caption, appendix F.5), and
    - the graph matrix ``G @ x`` in convolution form (Listing 4).

    Precision: under a mixed policy the kernel (built from float32 weights)
    and the convolution run in the compute dtype, like Keras' own
    convolutions.

    Args:
      kernel_size: side of the square kernel; odd for ``padding="same"``.
      symmetry: a name from ``sit_keras.graphs.SYMMETRIES``.
      strides: stride of the convolution.
      padding: ``"same"`` or ``"valid"``.
      depth_multiplier: output channels per input channel.
      use_bias: add a bias per output channel.
      graph_init_stddev: noise of the near-identity initial kernel.
      seed: seed of the initial noise.
      **kwargs: ``tf_keras.layers.Layer`` arguments.

    Call arguments:
      inputs: ``(B, H, W, C)``.

    Returns:
      ``(B, H', W', C * depth_multiplier)``.
    """

    def __init__(
        self,
        kernel_size: int,
        symmetry: str = "rotation",
        strides: int = 1,
        padding: str = "same",
        depth_multiplier: int = 1,
        use_bias: bool = True,
        graph_init_stddev: float = 0.1,
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.kernel_size = int(kernel_size)
        self.symmetry = graphs.resolve_symmetry(symmetry)
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be 'same' or 'valid'. Received: padding={padding!r}")
        if padding == "same" and self.kernel_size % 2 == 0:
            raise ValueError(f"A 'same' graph convolution needs an odd kernel_size. Received: {kernel_size}")
        self.strides = int(strides)
        self.padding = padding
        self.depth_multiplier = int(depth_multiplier)
        self.use_bias = bool(use_bias)
        self.graph_init_stddev = float(graph_init_stddev)
        self.seed = seed
        self._kernel_index, self._num_classes = graphs.kernel_indices(self.kernel_size, self.symmetry)

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 4 or input_shape[-1] is None:
            raise ValueError(f"GraphConv2D expects maps (B, H, W, C). Received: shape={input_shape}")
        channels = int(input_shape[-1])
        self.in_channels = channels
        centre = self.kernel_size // 2
        # Start near "the centre pixel only" (odd kernels) or "the mean of the window" (even).
        if self.kernel_size % 2:
            rows, value = [int(self._kernel_index[centre, centre])], 1.0
        else:
            rows, value = range(self._num_classes), 1.0 / self.kernel_size**2
        self.graph_weights = self.add_weight(
            "graph_weights",
            (self._num_classes, channels * self.depth_multiplier),
            initializer=NearIdentity(rows, value, self.graph_init_stddev, self.seed),
        )
        if self.use_bias:
            self.bias = self.add_weight("bias", (channels * self.depth_multiplier,), initializer="zeros")
        super().build(input_shape)

    def kernel(self) -> tf.Tensor:
        """The ``(k, k, C, depth_multiplier)`` depth-wise kernel built from the shared weights."""
        k = self.kernel_size
        kernel = expand_shared(self.graph_weights, self._kernel_index)  # (k, k, C * m)
        return tf.reshape(kernel, [k, k, self.in_channels, self.depth_multiplier])

    def dense_kernel(self) -> tf.Tensor:
        """The same convolution as a dense ``(k, k, C, C * depth_multiplier)`` kernel, block-diagonal.

        Output channel ``c * m + j`` reads input channel ``c`` only, with the
        depth-wise kernel's ``[:, :, c, j]``; every other entry is zero.
        """
        kernel = self.kernel()
        k, channels, multiplier = self.kernel_size, self.in_channels, self.depth_multiplier
        blocks = tf.eye(channels, dtype=kernel.dtype)[None, None, :, :, None] * kernel[:, :, None, :, :]
        return tf.reshape(blocks, [k, k, channels, channels * multiplier])

    @property
    def uses_dense_form(self) -> bool:
        """Whether ``call`` convolves with ``dense_kernel`` instead of the depth-wise kernel.

        With a depth multiplier, TensorFlow's depth-wise convolution is slow on a
        CPU, its kernel's gradient most: under XLA the chiral stem's train step
        took 15x the dense form's (``depthwise_5x5`` against ``graph_conv_stem``,
        ``benchmarks/reference/xla_cpu_ops_dense_stem.json``). On few input
        channels (an image's) the dense form costs little more: ``C`` times the
        multiply-adds, the added products zero. The values are the same up to
        the order of the float sums.
        """
        return self.depth_multiplier > 1 and self.in_channels <= DENSE_FORM_MAX_CHANNELS

    def uses_native_op(self, dtype: tf.DType) -> bool:
        """Whether ``call``, traced now on ``dtype`` maps, runs the native op ``native.depthwise_conv``.

        TensorFlow's CPU depth-wise convolution copies each window of the input
        before its arithmetic: on the SiT's 64x64 RGB images, batch 96, its
        forward and kernel gradient took 30 ms, 7% of the train step, for
        10 M multiply-adds. The op covers the stem's case: stride 1, "same"
        padding (an odd kernel), no depth multiplier; and only where
        ``native.usable`` (a train step or a driver's forward pass, not a
        SavedModel's signature; under XLA through the op's XLA kernel).
        """
        return (
            self.depth_multiplier == 1
            and self.strides == 1
            and self.padding == "same"
            and self.kernel_size % 2 == 1
            and native.usable(dtype, native.STEM_OPS)
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if inputs.shape.rank != 4 or inputs.shape[-1] != self.in_channels:
            raise ValueError(
                f"{self.name} expects maps (B, H, W, {self.in_channels}). Received: {inputs.shape}"
            )
        stride = [1, self.strides, self.strides, 1]
        padding = self.padding.upper()
        if self.uses_dense_form:
            out = tf.nn.conv2d(inputs, self.dense_kernel(), strides=stride, padding=padding)
        elif self.uses_native_op(inputs.dtype):
            # The op adds the bias (read in the compute dtype, as `out + self.bias` would).
            bias = tf.convert_to_tensor(self.bias) if self.use_bias else None
            return native.depthwise_conv(inputs, self.kernel()[..., 0], bias)
        else:
            out = tf.nn.depthwise_conv2d(inputs, self.kernel(), strides=stride, padding=padding)
        return out + self.bias if self.use_bias else out

    @property
    def declared_symmetry(self) -> Symmetry:
        """Output feature maps transform with the input under the D4 elements that keep the kernel's graph.

        Exact with ``"same"`` padding at stride 1 (or windows that tile the map);
        a ``"chiral"`` kernel of 5x5 or more keeps the rotations and breaks the
        flips (SiT Listing 4, ``sit_keras.graphs``).
        """
        return graph_symmetry(
            self.symmetry,
            triangles=0,
            square=True,
            acts_on="image",
            output="output feature maps transform with the input: f(g x) = g f(x)",
            parts=(("output", EQUIVARIANT),),
            chiral_breaks=self.kernel_size >= 5,
            reference="SiT Listing 4, Table 2 (graph conv)",
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            kernel_size=self.kernel_size,
            symmetry=self.symmetry,
            strides=self.strides,
            padding=self.padding,
            depth_multiplier=self.depth_multiplier,
            use_bias=self.use_bias,
            graph_init_stddev=self.graph_init_stddev,
            seed=self.seed,
        )
        return config
