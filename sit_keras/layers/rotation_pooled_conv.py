"""A convolution lifted to the quarter turns and max-pooled over them: a stem that sees directions."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.symmetry import EQUIVARIANT, Symmetry, graph_symmetry


def quarter_turns(kernel: tf.Tensor) -> tf.Tensor:
    """``(k, k, C, F) -> (k, k, C, 4 * F)``: the kernel turned by 0, 1, 2 and 3 quarter turns."""
    turns = [kernel]
    for _ in range(3):
        # One quarter turn of the spatial axes: transpose, then reverse the rows (np.rot90).
        turns.append(tf.reverse(tf.transpose(turns[-1], [1, 0, 2, 3]), axis=[0]))
    return tf.concat(turns, axis=-1)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class RotationPooledConv2D(tf_keras.layers.Layer):
    """A full convolution applied in its four quarter turns, then the max over the turns.

    This is GSA-Nets' lifting layer followed by their pooling over the group
    axis (Romero & Cordonnier 2021, eq. 14 and Fig. F.1, on the rotation
    group R4), with a convolution in place of the lifting self-attention: the
    lifting gives one response per rotation of the kernel, ``(B, H, W, 4, F)``,
    and the max over the rotation axis keeps the spatial map equivariant.

    Why a SiT stem needs it (docs/lavacrossing.md): a graph convolution's
    kernel gives one weight to the four rotations of an offset, so a stem
    feature can say how far a neighbour lies, never in which direction. A free
    kernel sees "the agent faces this way and lava lies one cell ahead" in one
    linear filter; the turned copies see it for every heading, and the max
    keeps whichever heading is there. The kernel is not mirror-symmetric, so
    the stem tells mirror images apart, as a ``"chiral"`` graph stem does.

    Symmetry on square maps (``"same"`` padding, stride 1, odd kernel): the
    output maps rotate with the input, ``f(rot x) = rot f(x)``, for the four
    quarter turns; the reflections are broken (a generic kernel is chiral).

    Args:
      filters: output channels ``F``.
      kernel_size: side of the square kernel; odd, so that ``"same"`` padding
        is symmetric and the rotations exact.
      use_bias: add a bias per output channel (shared by the turns).
      padding: ``"same"`` (zeros) or ``"valid"`` (none: for maps already
        padded on every side alike, as ``SiTEncoder(border_value=...)`` pads).
      seed: seed of the Glorot-uniform kernel initialiser.
      **kwargs: ``tf_keras.layers.Layer`` arguments.

    Call arguments:
      inputs: ``(B, H, W, C)``.

    Returns:
      ``(B, H, W, F)``.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int,
        use_bias: bool = True,
        seed: int | None = None,
        padding: str = "same",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if int(filters) < 1:
            raise ValueError(f"filters must be a positive integer. Received: filters={filters}")
        if int(kernel_size) < 1 or int(kernel_size) % 2 == 0:
            raise ValueError(
                f"kernel_size must be a positive odd integer (symmetric padding keeps the rotations exact). "
                f"Received: kernel_size={kernel_size}"
            )
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be 'same' or 'valid'. Received: padding={padding!r}")
        self.padding = padding
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.use_bias = bool(use_bias)
        self.seed = seed

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 4 or input_shape[-1] is None:
            raise ValueError(f"RotationPooledConv2D expects maps (B, H, W, C). Received: shape={input_shape}")
        self.in_channels = int(input_shape[-1])
        k = self.kernel_size
        self.kernel = self.add_weight(
            "kernel",
            (k, k, self.in_channels, self.filters),
            initializer=tf_keras.initializers.GlorotUniform(seed=self.seed),
        )
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), initializer="zeros")
        super().build(input_shape)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if inputs.shape.rank != 4 or inputs.shape[-1] != self.in_channels:
            raise ValueError(
                f"{self.name} expects maps (B, H, W, {self.in_channels}). Received: {inputs.shape}"
            )
        lifted = tf.nn.conv2d(inputs, quarter_turns(self.kernel), strides=1, padding=self.padding.upper())
        shape = tf.shape(lifted)
        turns = tf.reshape(lifted, tf.concat([shape[:3], [4, self.filters]], axis=0))
        pooled = tf.reduce_max(turns, axis=3)
        return pooled + self.bias if self.use_bias else pooled

    @property
    def declared_symmetry(self) -> Symmetry:
        """The output maps rotate with the input (C4, exact); every reflection is broken."""
        return graph_symmetry(
            "chiral",
            triangles=0,
            square=True,
            acts_on="image",
            output="output feature maps rotate with the input: f(rot x) = rot f(x)",
            parts=(("output", EQUIVARIANT),),
            chiral_breaks=self.kernel_size >= 3,
            reference="GSA-Nets eq. 14 (lifting) and Fig. F.1 (pooling over the group), R4",
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            filters=self.filters,
            kernel_size=self.kernel_size,
            use_bias=self.use_bias,
            seed=self.seed,
            padding=self.padding,
        )
        return config
