"""Selects Keras 2 (``tf_keras``) before TensorFlow is imported.

TF-Agents and tensorflow-probability only work with the legacy Keras 2 API,
which TensorFlow exposes as ``tf.keras`` only when ``TF_USE_LEGACY_KERAS=1`` is
set *before* TensorFlow's first import. Keras 3 layers inside a TF-Agents
network are silently left out of its trainable variables, so a wrong setting
must fail loudly instead of training half a model.
"""

from __future__ import annotations

import os
import sys

KERAS3_MESSAGE = (
    "sit_keras needs Keras 2 (the `tf_keras` package) behind `tf.keras`, but "
    "TensorFlow was already imported with Keras 3 (`tf.keras` is `keras` {version}). "
    "Either `import sit_keras` before `import tensorflow`, or set the environment "
    "variable TF_USE_LEGACY_KERAS=1 before Python starts."
)


def select_legacy_keras() -> None:
    """Sets ``TF_USE_LEGACY_KERAS=1``, or raises if it is too late to do so.

    Raises:
      ImportError: TensorFlow is already imported and its ``tf.keras`` is Keras 3.
    """
    if "tensorflow" not in sys.modules:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        return
    import tensorflow as tf

    # Under legacy Keras, `tf.keras` is the module `tf_keras.api._v2.keras`.
    if not getattr(tf.keras, "__name__", "").startswith("tf_keras"):
        version = getattr(tf.keras, "__version__", "unknown")
        raise ImportError(KERAS3_MESSAGE.format(version=version))
