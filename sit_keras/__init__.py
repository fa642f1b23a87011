"""sit-keras: symmetry-aware attention for reinforcement learning, in Keras 2.

Importing this package selects Keras 2 (``tf_keras``) for TensorFlow
(``sit_keras._keras_setup``) and TensorFlow's BFC arena for CPU tensors unless
the environment names an allocator (``sit_keras._cpu_allocator``); both must
happen before TensorFlow starts.
"""

from sit_keras._cpu_allocator import prefer_bfc_allocator
from sit_keras._keras_setup import select_legacy_keras

select_legacy_keras()
prefer_bfc_allocator()

__version__ = "0.1.0"
