"""sit-keras: symmetry-aware attention for reinforcement learning, in Keras 2.

Importing this package selects Keras 2 (``tf_keras``) for TensorFlow
(``sit_keras._keras_setup``), TensorFlow's BFC arena for CPU tensors unless
the environment names an allocator (``sit_keras._cpu_allocator``), and XLA's
legacy CPU runtime without tree reductions unless ``XLA_FLAGS`` chooses
(``sit_keras._xla_runtime``); each must happen before TensorFlow starts,
allocates or compiles.
"""

from sit_keras._cpu_allocator import prefer_bfc_allocator
from sit_keras._keras_setup import select_legacy_keras
from sit_keras._xla_runtime import prefer_legacy_runtime, skip_tree_reductions

select_legacy_keras()
prefer_bfc_allocator()
prefer_legacy_runtime()
skip_tree_reductions()

__version__ = "0.1.0"
