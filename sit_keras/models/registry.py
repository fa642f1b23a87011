"""``build_encoder(name, input_shape, **overrides)``: every encoder by name."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from sit_keras.models.base import Encoder

# name -> (module, factory). Imported on first use so that building one
# encoder does not import every model family.
_FACTORIES: dict[str, tuple[str, str]] = {
    "sit": ("sit_keras.models.sit", "build_sit"),
    "sit_star": ("sit_keras.models.sit", "build_sit_star"),
    "set": ("sit_keras.models.sit", "build_set"),
    "siet": ("sit_keras.models.sit", "build_siet"),
    "sit_dihedral": ("sit_keras.models.sit", "build_sit_dihedral"),
    "vit": ("sit_keras.models.vit", "ViTEncoder"),
    "impala_cnn": ("sit_keras.models.impala_cnn", "ImpalaCNNEncoder"),
    "cnn": ("sit_keras.models.cnn", "ConvEncoder"),
}

ENCODER_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def build_encoder(name: str, input_shape: Sequence[int], **overrides: Any) -> Encoder:
    """Builds the encoder ``name`` for images of ``input_shape = (H, W, C)``.

    Args:
      name: one of ``ENCODER_NAMES``.
      input_shape: ``(H, W, C)``.
      **overrides: constructor arguments that replace the defaults (which
        follow the SiT paper's Table 2).

    Returns:
      A built ``Encoder`` mapping ``(B, H, W, C)`` to ``(B, D)``.

    Raises:
      ValueError: unknown name, invalid sizes or options.
    """
    if name not in _FACTORIES:
        raise ValueError(f"Unknown encoder {name!r}. Expected one of: {', '.join(ENCODER_NAMES)}.")
    module, attr = _FACTORIES[name]
    factory = getattr(importlib.import_module(module), attr)
    encoder = factory(image_shape=tuple(input_shape), **overrides)
    # A first call (rather than build()) also records the input signature
    # that SavedModel export needs.
    encoder(tf.zeros((1, *encoder.image_shape), tf.uint8))
    return encoder
