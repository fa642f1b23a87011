"""Supervised image classification: datasets, classifiers and the ``sit-train-supervised`` trainer.

``sit_keras.supervised.train`` (the gin-configurable ``train_supervised`` and
the entry point) is not imported here: ``python -m sit_keras.supervised.train``
would otherwise register its gin configurable twice.
"""

from sit_keras.supervised.classifiers import MODEL_NAMES, build_classifier
from sit_keras.supervised.datasets import DATASET_NAMES, dataset_spec, load_dataset, rotate_images

__all__ = [
    "DATASET_NAMES",
    "MODEL_NAMES",
    "build_classifier",
    "dataset_spec",
    "load_dataset",
    "rotate_images",
]
