"""Pooling of signals on a plane group: the invariant readout and the spatial pooling between stages."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from sit_keras.layers.precision import stable_dtype
from sit_keras.symmetry import EQUIVARIANT, INVARIANT, Symmetry, plane_group_symmetry

# The pooling layers take signals on any plane group; they are declared (and checked) on p4m, the
# largest grid-exact group of GSA-Nets, which contains z2, p4 and mz2.
_POOLING_GROUP = "p4m"


def _check_group_signal(layer: tf_keras.layers.Layer, shape: tf.TensorShape, need_spatial: bool) -> None:
    spatial_unknown = need_spatial and (shape.rank != 5 or shape[1] is None or shape[2] is None)
    if shape.rank != 5 or spatial_unknown:
        known = " with known H, W" if need_spatial else ""
        raise ValueError(
            f"{type(layer).__name__} expects signals on a group (B, H, W, |H|, D){known}. "
            f"Received: shape={tuple(shape)}"
        )


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupPooling(tf_keras.layers.Layer):
    """GSA-Nets' GlobalPooling (Fig. F.1): max over the group axis, then mean over space.

    Symmetry: invariant to the whole plane group acting by the regular
    representation, ``f(L_g y) = f(y)``, whenever ``g`` permutes the pixels
    (every element of a grid-exact group on a square image, and cyclic
    translations): the max does not see the order of the group axis and the
    mean not the order of the pixels.

    Precision: the max runs in the compute dtype (it is exact); the mean over
    space is accumulated in float32 under a mixed policy
    (``precision.stable_dtype``) and returned in the compute dtype.

    Call arguments:
      inputs: ``(B, H, W, |H|, D)``.

    Returns:
      ``(B, D)``.

    >>> import sit_keras
    >>> from sit_keras.layers.group_pooling import GroupPooling
    >>> GroupPooling()(tf.ones((2, 3, 3, 4, 5))).shape
    TensorShape([2, 5])
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        _check_group_signal(self, inputs.shape, need_spatial=False)
        pooled = tf.reduce_max(inputs, axis=3)
        mean = tf.reduce_mean(tf.cast(pooled, stable_dtype(pooled.dtype)), axis=[1, 2])
        return tf.cast(mean, pooled.dtype)

    @property
    def declared_symmetry(self) -> Symmetry:
        """Invariant under every element of the plane group (GSA-Nets Fig. F.1)."""
        return plane_group_symmetry(
            _POOLING_GROUP, INVARIANT, "group_signal", "the pooled features are invariant: f(L_g y) = f(y)"
        )

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        input_shape = tf.TensorShape(input_shape)
        return tf.TensorShape([input_shape[0], input_shape[-1]])


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupSpatialMaxPooling(tf_keras.layers.Layer):
    """Spatial max pooling at stride 2 that keeps the pooling grid symmetric about the image centre.

    GSA-Nets pools 2x2 between stages (appendix F). An even side is tiled by
    2x2 windows; on an odd side a 2x2 tiling would drop the last row, which
    a rotation or mirror moves elsewhere, so there the windows are 3x3 and
    centred on the even pixels ``0, 2, ..., side - 1`` (padded with ``-inf``).
    Either way the pooled grid is mapped to itself by the dihedral group.

    Symmetry: for ``g`` in a grid-exact group on square images,
    ``f(L_g y) = L_g f(y)`` with the regular representation on both sides
    (the group axis is left alone).

    Precision: a max, exact in any dtype; it runs in the compute dtype.

    Call arguments:
      inputs: ``(B, H, W, |H|, D)`` with known ``H, W``.

    Returns:
      ``(B, ceil(H / 2), ceil(W / 2), |H|, D)``.

    >>> import sit_keras
    >>> from sit_keras.layers.group_pooling import GroupSpatialMaxPooling
    >>> GroupSpatialMaxPooling()(tf.ones((2, 7, 6, 4, 5))).shape
    TensorShape([2, 4, 3, 4, 5])
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        _check_group_signal(self, inputs.shape, need_spatial=True)
        height, width, order, dim = (int(d) for d in inputs.shape[1:])
        flat = tf.reshape(inputs, [-1, height, width, order * dim])
        # Odd sides: one -inf row / column on each side and a 3-wide window.
        pad_h, pad_w = height % 2, width % 2
        if pad_h or pad_w:
            low = tf.constant(inputs.dtype.min, inputs.dtype)
            flat = tf.pad(flat, [[0, 0], [pad_h, pad_h], [pad_w, pad_w], [0, 0]], constant_values=low)
        pooled = tf.nn.max_pool2d(flat, ksize=[2 + pad_h, 2 + pad_w], strides=[2, 2], padding="VALID")
        out_h, out_w = (height + 1) // 2, (width + 1) // 2
        return tf.reshape(pooled, [-1, out_h, out_w, order, dim])

    @property
    def declared_symmetry(self) -> Symmetry:
        """Equivariant: the pooled grid is mapped to itself by the dihedral group (GSA-Nets appendix F)."""
        return plane_group_symmetry(
            _POOLING_GROUP, EQUIVARIANT, "group_signal", "the pooled signal transforms with the input"
        )

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        b, h, w, n, d = tf.TensorShape(input_shape).as_list()
        return tf.TensorShape(
            [b, None if h is None else (h + 1) // 2, None if w is None else (w + 1) // 2, n, d]
        )
