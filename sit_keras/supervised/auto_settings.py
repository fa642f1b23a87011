"""``sit-train-supervised``'s ``auto`` settings: the classifier timed both ways on this host.

``precision="auto"`` chooses float32 or mixed_bfloat16, ``jit_compile="auto"``
XLA or TensorFlow's graph executor, as ``sit-train`` does
(``sit_keras.agents.training.auto_settings``). Each times Keras' own train step
of the run's classifier (``train_on_batch``: forward, backward and Adam) on a
random batch of the data's shape and batch size, and returns
``sit_keras.measured_choice``'s choice, cached per host and model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tf_keras

from sit_keras import measured_choice, mixed_precision, xla


@dataclasses.dataclass(frozen=True)
class Classifier:
    """What is timed: ``build(precision, jit_compile)`` compiles the run's classifier; ``description``
    (JSON-able: the classifier's arguments) is what the cache knows it by, with the batch's shape."""

    build: Callable[[str, bool], tf_keras.Model]
    description: Mapping[str, Any]
    image_shape: tuple[int, ...]
    num_classes: int
    batch_size: int

    def describe(self) -> dict[str, Any]:
        """The cache key's model."""
        return {**self.description, "image_shape": list(self.image_shape), "batch_size": self.batch_size}

    def train_step(self, precision: str, jit_compile: bool) -> measured_choice.Step:
        """One ``train_on_batch`` of a new classifier on a fixed random batch."""
        classifier = self.build(precision, jit_compile)
        random = np.random.default_rng(0)
        images = random.uniform(size=(self.batch_size, *self.image_shape)).astype(np.float32)
        labels = random.integers(0, self.num_classes, size=(self.batch_size,))
        return lambda: classifier.train_on_batch(images, labels)


def choose_precision(classifier: Classifier) -> measured_choice.Choice:
    """float32 or mixed_bfloat16, whichever trains the classifier faster here (measured or cached)."""
    candidates = {
        precision: (lambda precision=precision: classifier.train_step(precision, False))
        for precision in mixed_precision.AUTO_CANDIDATES
    }
    return measured_choice.fastest("precision", classifier.describe(), candidates, default="float32")


def choose_jit_compile(classifier: Classifier, precision: str) -> measured_choice.Choice:
    """``"on"`` (XLA) or ``"off"``, whichever trains the classifier in ``precision`` faster here."""
    model = {**classifier.describe(), "precision": precision}
    return xla.choose_jit_compile(model, lambda jit_compile: classifier.train_step(precision, jit_compile))
