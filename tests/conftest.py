"""Test setup shared by every test module.

``sit_keras`` is imported here, before any test module imports TensorFlow, so
that Keras 2 (``tf_keras``) is selected behind ``tf.keras``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from hypothesis import settings  # noqa: E402

import sit_keras  # noqa: E402, F401  (selects Keras 2 before TensorFlow is imported)

# Few examples and no deadline: TensorFlow's first calls trace graphs and are slow.
settings.register_profile("ci", deadline=None, max_examples=10)
settings.load_profile("ci")
