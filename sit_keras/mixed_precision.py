"""The ``precision`` setting of the trainers: Keras' mixed-precision policies.

- ``"float32"`` (the default): everything in float32;
- ``"mixed_bfloat16"``: bfloat16 compute, float32 variables (CPUs with
  bfloat16 units, TPUs, recent GPUs);
- ``"mixed_float16"``: float16 compute, float32 variables and loss scaling
  (GPUs with tensor cores; on a CPU float16 has no fast kernels).

The layers of this package keep their numerically sensitive parts (softmax,
score maps, normalisation statistics) in float32 under either policy; the
trainers build their models inside ``dtype_policy(precision)`` and keep the
outputs that losses read (logits) in float32.

>>> check_precision("mixed_bfloat16")
'mixed_bfloat16'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tf_keras
from absl import flags

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def check_precision(precision: str) -> str:
    """``precision`` if it is one of ``PRECISIONS``; a ``ValueError`` naming them otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}. Expected one of: {', '.join(PRECISIONS)}.")
    return precision


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Keras' global dtype policy ``precision`` while models are built; the default again after.

    The default (``set_global_policy(None)``) follows ``floatx``; setting
    ``"float32"`` back would pin it.
    """
    tf_keras.mixed_precision.set_global_policy(check_precision(precision))
    try:
        yield
    finally:
        tf_keras.mixed_precision.set_global_policy(None)


def define_precision_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines ``--precision`` (one of ``PRECISIONS``; unset: the gin binding or the default)."""
    flags.DEFINE_enum(
        "precision",
        "float32",
        list(PRECISIONS),
        "Keras dtype policy of the model: float32, mixed_bfloat16 or mixed_float16.",
        flag_values=flag_values,
    )
