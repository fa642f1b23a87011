"""``build_classifier(model, input_shape, num_classes)``: an image classifier by name.

Two kinds of model:

- any encoder of ``sit_keras.models.ENCODER_NAMES`` followed by a linear
  head on its features::

      images (B, H, W, C) uint8 -> encoder -> (B, D) -> Dense(num_classes) -> logits (B, num_classes)

  The head reads the encoder's output only, so a rotation-invariant encoder
  (``sit``, ``sit_star``, ``sit_dihedral``) gives an invariant classifier.
- ``group_transformer:<group>``: a group equivariant self-attention network
  (GSA-Net, Romero & Cordonnier, ICLR 2021) from
  ``sit_keras.models.group_transformer.build_group_transformer``, which ends
  in its own logits.

Every model gets size defaults from a *preset* named after the images it is
meant for (the GSA-Net presets): ``"digits"`` (8x8, scikit-learn's digits),
``"rotmnist"`` (28x28, MNIST and rotated MNIST), ``"cifar10"`` (32x32).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.groups import GROUP_NAMES
from sit_keras.models import ENCODER_NAMES, build_encoder, registry

GROUP_TRANSFORMER_PREFIX = "group_transformer:"

PRESETS: tuple[str, ...] = ("digits", "rotmnist", "cifar10")
# Image side -> preset, for callers that give no preset.
PRESET_FOR_SIDE: dict[int, str] = {8: "digits", 28: "rotmnist", 32: "cifar10"}


# Encoder constructor arguments per preset; a caller's overrides replace them.
# The registry's defaults are for 64x64 Procgen frames (SiT paper, Table 2);
# these shrink the patch grids so that the same architectures fit smaller images.
ENCODER_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    "digits": {
        # 3x3 graph-conv stem, then 2x2 tiling windows: a 4x4 grid of 16
        # global tokens; exact C4 invariance needs the side (8) to be a
        # multiple of pool_size * window (= 2).
        "sit": {
            "preset": "procgen",
            "pool_size": 1,
            "window": 2,
            "dim": 32,
            "num_heads": 4,
            "local_layers": 1,
            "global_layers": 2,
        },
        # 2x2 patches: 16 tokens, as SiT's global grid.
        "vit": {"patch_size": 2, "embed_dim": 32, "num_layers": 2, "num_heads": 4, "mlp_dim": 64},
        "cnn": {"filters": (16, 32), "strides": 2},
        "impala_cnn": {"channels": (16, 32), "output_dim": 64},
    },
    "rotmnist": {
        # Stem, 2x2 max-pool (14x14), 2x2 windows: a 7x7 global grid.
        "sit": {"preset": "procgen", "pool_size": 2, "window": 2},
        "vit": {"patch_size": 4},  # 7x7 tokens
        "cnn": {},
        "impala_cnn": {"channels": (16, 32, 32), "output_dim": 256},
    },
    "cifar10": {
        # Stem, 2x2 max-pool (16x16), 2x2 windows: an 8x8 global grid.
        "sit": {"preset": "procgen", "pool_size": 2, "window": 2},
        "vit": {"patch_size": 4},  # 8x8 tokens
        "cnn": {},
        "impala_cnn": {},
    },
}

GROUP_TRANSFORMER_NAMES: tuple[str, ...] = tuple(f"{GROUP_TRANSFORMER_PREFIX}{g}" for g in GROUP_NAMES)
MODEL_NAMES: tuple[str, ...] = (*ENCODER_NAMES, *GROUP_TRANSFORMER_NAMES)


def preset_for_shape(input_shape: Sequence[int]) -> str:
    """The preset for square images of side 8, 28 or 32; ``ValueError`` for other shapes."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 3 or shape[0] != shape[1] or shape[0] not in PRESET_FOR_SIDE:
        sides = ", ".join(f"{side} ({name})" for side, name in PRESET_FOR_SIDE.items())
        raise ValueError(
            f"No preset for images of shape {shape}: pass preset= (one of {', '.join(PRESETS)}) or use "
            f"square (H, W, C) images of side {sides}."
        )
    return PRESET_FOR_SIDE[shape[0]]


def encoder_overrides(model: str, preset: str) -> dict[str, Any]:
    """The preset's constructor arguments for encoder ``model`` (a copy)."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Expected one of: {', '.join(PRESETS)}.")
    key = registry.ENCODERS[model].family if model in registry.ENCODERS else model
    return dict(ENCODER_OVERRIDES[preset].get(key, {}))


def _build_group_transformer(
    group: str, input_shape: Sequence[int], num_classes: int, preset: str, overrides: dict[str, Any]
) -> tf_keras.Model:
    # Imported on use, as the encoder registry does: only these models need it.
    module = importlib.import_module("sit_keras.models.group_transformer")
    return module.build_group_transformer(group, input_shape, num_classes, preset=preset, **overrides)


def build_classifier(
    model: str,
    input_shape: Sequence[int],
    num_classes: int,
    preset: str | None = None,
    **overrides: Any,
) -> tf_keras.Model:
    """Builds classifier ``model`` mapping images ``(B, *input_shape)`` to logits ``(B, num_classes)``.

    Args:
      model: an encoder name of ``ENCODER_NAMES`` (encoder + Dense head) or
        ``"group_transformer:<group>"`` (e.g. ``"group_transformer:p4"``).
      input_shape: ``(H, W, C)``.
      num_classes: number of classes (logits).
      preset: ``"digits"``, ``"rotmnist"`` or ``"cifar10"``: the size
        defaults; ``None`` picks it from the image side (8, 28, 32).
      **overrides: constructor arguments of the encoder (or of the group
        transformer) that replace the preset's.

    Returns:
      A built ``tf_keras.Model``; encoder classifiers take ``uint8`` images.

    Raises:
      ValueError: unknown model or preset, bad sizes.

    >>> classifier = build_classifier("cnn", (8, 8, 1), 10)
    >>> classifier(tf.zeros((2, 8, 8, 1), tf.uint8)).shape
    TensorShape([2, 10])
    """
    input_shape = tuple(int(d) for d in input_shape)
    if num_classes < 1:
        raise ValueError(f"num_classes must be positive. Received: num_classes={num_classes}")
    preset = preset_for_shape(input_shape) if preset is None else preset
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Expected one of: {', '.join(PRESETS)}.")
    if model not in MODEL_NAMES:
        raise ValueError(f"Unknown model {model!r}. Expected one of: {', '.join(MODEL_NAMES)}.")
    if model in GROUP_TRANSFORMER_NAMES:
        group = model[len(GROUP_TRANSFORMER_PREFIX) :]
        classifier = _build_group_transformer(group, input_shape, num_classes, preset, overrides)
        if not _mixed_policy():
            return classifier
        images = tf_keras.Input(shape=input_shape, dtype=tf.uint8, name="images")
        logits = tf_keras.layers.Activation("linear", dtype="float32", name="float32_logits")(
            classifier(images)
        )
        return tf_keras.Model(images, logits, name=classifier.name)
    encoder = build_encoder(model, input_shape, **{**encoder_overrides(model, preset), **overrides})
    images = tf_keras.Input(shape=input_shape, dtype=tf.uint8, name="images")
    head_dtype = "float32" if _mixed_policy() else None
    logits = tf_keras.layers.Dense(num_classes, dtype=head_dtype, name="logits")(encoder(images))
    return tf_keras.Model(images, logits, name=f"{model}_classifier")


def _mixed_policy() -> bool:
    """Whether Keras' global policy computes in float16 / bfloat16: then the logits are made float32.

    Keras' advice for mixed precision: the loss (softmax cross-entropy) reads float32 logits.
    """
    return tf_keras.mixed_precision.global_policy().compute_dtype in ("float16", "bfloat16")
