"""sit-keras: symmetry-aware attention for reinforcement learning, in Keras 2.

Importing this package selects Keras 2 (``tf_keras``) for TensorFlow; see
``sit_keras._keras_setup``.
"""

from sit_keras._keras_setup import select_legacy_keras

select_legacy_keras()

__version__ = "0.1.0"
