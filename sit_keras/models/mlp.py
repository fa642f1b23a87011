"""The ``"mlp"`` torso of vector observations: dense ReLU layers, no symmetry (``symmetry.NO_SYMMETRY``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tf_keras


def mlp_layers(input_shape: Sequence[int], units: Sequence[int] = (64, 64), **unknown: Any) -> list:
    """``Dense(n, activation="relu")`` for each ``n`` in ``units``, for vector observations ``(D,)``.

    Raises:
      ValueError: an observation that is not a vector, or arguments other than ``units``.
    """
    shape = tuple(input_shape)
    if len(shape) != 1:
        raise ValueError(
            f"The 'mlp' encoder takes vector observations of shape (D,). Received: observation shape={shape}"
        )
    if unknown:
        raise ValueError(f"Unknown 'mlp' encoder arguments: {sorted(unknown)}. Expected: ['units'].")
    return [tf_keras.layers.Dense(int(n), activation="relu") for n in units]
