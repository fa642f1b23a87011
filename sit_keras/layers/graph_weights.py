"""Trainable shared weights of graph matrices, their initialiser and graph-symmetric dropout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class NearIdentity(tf_keras.initializers.Initializer):
    """``base + N(0, stddev^2)`` for a ``(num_classes, channels)`` weight table.

    ``base`` is ``base_value`` in the rows ``base_rows`` and 0 elsewhere. With
    the self-loop class as ``base_rows`` a graph matrix starts as the identity
    plus noise, so a GSA layer starts close to plain attention and the
    symmetry it keeps is broken only slightly, as the SiT paper describes
    ("Explicit & Adaptive Symmetry Breaking", section 3).
    """

    def __init__(
        self, base_rows: Sequence[int] = (), base_value: float = 1.0, stddev: float = 0.1, seed=None
    ):
        self.base_rows = [int(r) for r in base_rows]
        self.base_value = float(base_value)
        self.stddev = float(stddev)
        self.seed = seed

    def __call__(self, shape, dtype=None, **kwargs) -> tf.Tensor:
        dtype = tf.as_dtype(dtype or tf_keras.backend.floatx())
        base = np.zeros(shape, dtype=dtype.as_numpy_dtype)
        base[self.base_rows] = self.base_value
        noise = tf_keras.initializers.RandomNormal(stddev=self.stddev, seed=self.seed)(shape, dtype=dtype)
        return tf.constant(base, dtype=dtype) + noise

    def get_config(self) -> dict[str, Any]:
        return {
            "base_rows": self.base_rows,
            "base_value": self.base_value,
            "stddev": self.stddev,
            "seed": self.seed,
        }


def graph_symmetric_dropout(weights: tf.Tensor, rate: float, training: bool | None) -> tf.Tensor:
    """Drops whole shared weights of a graph matrix (SiT paper, section 4, "Graph Symmetric Dropout").

    One Bernoulli draw per *shared weight* (row of the class table), used by
    every entry of the graph matrix that shares it and by the whole batch, so
    the dropped graph keeps the symmetry of the undropped one. Kept weights
    are scaled by ``1 / (1 - rate)`` as in inverted dropout.
    """
    if not rate or not training:
        return weights
    keep = 1.0 - rate
    mask = tf.cast(tf.random.uniform(tf.shape(weights)) < keep, weights.dtype)
    return weights * mask / tf.cast(keep, weights.dtype)
