"""Building sublayers explicitly, under their own names."""

from __future__ import annotations

import tensorflow as tf
import tf_keras


def build_sublayer(layer: tf_keras.layers.Layer, input_shape: tf.TensorShape) -> None:
    """``layer.build(input_shape)`` inside ``layer``'s name scope.

    Keras names a sublayer's variables after it only when the first call
    builds it; built explicitly (as wrapping layers should), two sublayers
    would otherwise both own a ``qkv_kernel:0`` and HDF5 weight files could
    not hold them.
    """
    with tf.name_scope(layer.name):
        layer.build(input_shape)
