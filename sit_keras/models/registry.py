"""The one encoder registry: every encoder name, its factory, its inputs and its declared symmetry.

``ENCODERS`` has one ``EncoderEntry`` per name that ``build_encoder``, the
trainers' networks (``sit_keras.agents.networks``), the supervised
classifiers, the export side and ``sit-check-encoders`` take; they read this
table and keep no list of their own. Factories are ``"module:attribute"``
strings imported on first use, so that building one encoder does not import
every model family, and the symmetries are ``sit_keras.symmetry`` constants:
the declaration of the encoder built with its defaults (the built encoder's
``declared_symmetry`` says what its own arguments keep).
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.models.base import Encoder
from sit_keras.symmetry import NO_SYMMETRY, SENSORS, SET, SIET, SIT, SIT_MIRROR_BLIND, Symmetry

INPUTS: tuple[str, ...] = ("image", "vector", "sensors")
"""Input kinds: images ``(H, W, C)``, vectors ``(D,)``, unordered sensor readings ``(N,)`` (any N)."""


@dataclass(frozen=True)
class EncoderEntry:
    """One encoder of the registry.

    Args:
      name: the name every side uses (``train_eval.encoder``, ``build_encoder``).
      factory: ``"module:attribute"``, called as ``factory(image_shape=..., **kwargs)``
        for images and ``factory(input_shape, **kwargs)`` for vectors.
      inputs: one of ``INPUTS``.
      symmetry: the declaration of the encoder built with its defaults.
      recurrent: keeps a state between steps (needs whole sequences to train).
      defaults: constructor arguments under the caller's (a preset of another entry).
      family: the model family whose presets apply (the SiT variants share ``"sit"``).
      description: what it is, with the paper it follows.
    """

    name: str
    factory: str
    inputs: str
    symmetry: Symmetry
    recurrent: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)
    family: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if self.inputs not in INPUTS:
            raise ValueError(f"inputs must be one of {INPUTS}. Received: inputs={self.inputs!r}")
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "family", self.family or self.name)

    def load(self) -> Callable[..., Any]:
        """The factory, imported now."""
        module, attr = self.factory.split(":")
        return getattr(importlib.import_module(module), attr)


_SIT = "sit_keras.models.sit"
ENCODERS: Mapping[str, EncoderEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            EncoderEntry("sit", f"{_SIT}:build_sit", "image", SIT, family="sit", description="SiT, sec. 4"),
            EncoderEntry("sit_star", f"{_SIT}:build_sit_star", "image", SIT, family="sit",
                         description="SiT*: two triangle sums (Table 1)"),
            EncoderEntry("set", f"{_SIT}:build_set", "image", SET, family="sit",
                         description="SeT: the equivariant patch grid"),
            EncoderEntry("siet", f"{_SIT}:build_siet", "image", SIET, family="sit",
                         description="SieT: invariant and equivariant parts"),
            EncoderEntry("sit_dihedral", f"{_SIT}:build_sit_dihedral", "image", SIT_MIRROR_BLIND,
                         family="sit", description="SiT without triangle sums (Fig. 2c)"),
            EncoderEntry("vit", "sit_keras.models.vit:ViTEncoder", "image", NO_SYMMETRY,
                         description="ViT baseline (Table 2)"),
            EncoderEntry("impala_cnn", "sit_keras.models.impala_cnn:ImpalaCNNEncoder", "image", NO_SYMMETRY,
                         description="IMPALA ResNet baseline (Table 2)"),
            EncoderEntry("cnn", "sit_keras.models.cnn:ConvEncoder", "image", NO_SYMMETRY,
                         description="plain CNN baseline (Fig. 8)"),
            EncoderEntry(
                "data_efficient_cnn", "sit_keras.models.cnn:ConvEncoder", "image", NO_SYMMETRY,
                # van Hasselt et al. 2019, appendix (data-efficient Rainbow's network): a preset of "cnn".
                defaults={"filters": (32, 64), "kernel_size": 5, "strides": 5, "output_dim": 256},
                family="cnn", description="data-efficient Rainbow's CNN, a preset of 'cnn'",
            ),
            EncoderEntry("mlp", "sit_keras.models.mlp:mlp_layers", "vector", NO_SYMMETRY,
                         description="dense ReLU layers for vector observations"),
            EncoderEntry(
                "attention_neuron", "sit_keras.models.sensor_encoder:SensorSetEncoder", "sensors", SENSORS,
                recurrent=True, description="AttentionNeuron sensor encoder (Tang & Ha 2021)",
            ),
        )
    }
)  # fmt: skip
"""Every encoder, by name."""

ENCODER_NAMES: tuple[str, ...] = tuple(
    name for name, entry in ENCODERS.items() if entry.inputs == "image" and not entry.defaults
)
"""The image encoders that are no preset of another: what ``sit-check-encoders`` and the classifiers take."""

FEED_FORWARD_NAMES: tuple[str, ...] = tuple(name for name, entry in ENCODERS.items() if not entry.recurrent)
"""The torsos without a state, which every agent takes."""

RECURRENT_NAMES: tuple[str, ...] = tuple(name for name, entry in ENCODERS.items() if entry.recurrent)
"""The torsos with a per-step state (trained on whole sequences)."""


def get_entry(name: str) -> EncoderEntry:
    """The entry of ``name``; a ``ValueError`` naming every encoder otherwise."""
    if name not in ENCODERS:
        raise ValueError(f"Unknown encoder {name!r}. Expected one of: {', '.join(ENCODERS)}.")
    return ENCODERS[name]


def accepted_keywords(name: str) -> set[str]:
    """The constructor keywords encoder ``name`` takes: its factory's, and the class's it builds.

    For a "did you mean" when a user's ``encoder_kwargs`` has a key none of them takes.
    """
    factory = get_entry(name).load()
    classes = [factory] if inspect.isclass(factory) else []
    returned = typing.get_type_hints(factory).get("return") if not classes else None
    if inspect.isclass(returned):
        classes.append(returned)
    callables = [factory] if not inspect.isclass(factory) else []
    callables += [klass.__init__ for cls in classes for klass in cls.__mro__ if "__init__" in vars(klass)]
    return {
        parameter.name
        for function in callables
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
        and parameter.name != "self"
    }


def build_encoder(name: str, input_shape: Sequence[int], **overrides: Any) -> Encoder:
    """Builds the image encoder ``name`` for images of ``input_shape = (H, W, C)``.

    Args:
      name: an image encoder of ``ENCODERS`` (``ENCODER_NAMES`` or a preset
        such as ``"data_efficient_cnn"``).
      input_shape: ``(H, W, C)``.
      **overrides: constructor arguments that replace the defaults (which
        follow the SiT paper's Table 2).

    Returns:
      A built ``Encoder`` mapping ``(B, H, W, C)`` to ``(B, D)``.

    Raises:
      ValueError: unknown name, an encoder that does not take images, invalid sizes or options.
    """
    image_names = [n for n, e in ENCODERS.items() if e.inputs == "image"]
    if name not in image_names:
        raise ValueError(f"Unknown encoder {name!r}. Expected one of: {', '.join(ENCODER_NAMES)}.")
    entry = ENCODERS[name]
    encoder = entry.load()(image_shape=tuple(input_shape), **{**entry.defaults, **overrides})
    # A first call (rather than build()) also records the input signature
    # that SavedModel export needs.
    encoder(tf.zeros((1, *encoder.image_shape), tf.uint8))
    return encoder


def build_feed_forward(
    name: str, input_shape: Sequence[int], **overrides: Any
) -> list[tf_keras.layers.Layer]:
    """The layers of the feed-forward torso ``name`` for one observation of ``input_shape``.

    An image encoder is one layer (``build_encoder``); ``"mlp"`` is its dense
    layers. Raises ``ValueError`` for an unknown or recurrent name, or an
    observation of the wrong rank.
    """
    if name not in FEED_FORWARD_NAMES:
        raise ValueError(f"Unknown encoder {name!r}. Expected one of: {', '.join(FEED_FORWARD_NAMES)}.")
    entry = ENCODERS[name]
    shape = tuple(input_shape)
    if entry.inputs == "vector":
        return list(entry.load()(shape, **{**entry.defaults, **overrides}))
    if len(shape) != 3:
        raise ValueError(
            f"Encoder {name!r} takes image observations of shape (H, W, C). "
            f"Received: observation shape={shape}; use encoder='mlp' for vectors."
        )
    return [build_encoder(name, shape, **overrides)]
