"""The ``precision`` setting of the trainers: Keras' mixed-precision policies.

- ``"float32"`` (the default): everything in float32;
- ``"mixed_bfloat16"``: bfloat16 compute, float32 variables (CPUs with
  bfloat16 units, TPUs, recent GPUs);
- ``"mixed_float16"``: float16 compute, float32 variables and loss scaling
  (GPUs with tensor cores; on a CPU float16 has no fast kernels).

The layers of this package keep their numerically sensitive parts (softmax,
score maps, normalisation statistics) in float32 under either policy; the
trainers build their models inside ``dtype_policy(precision)`` and keep the
outputs that losses read (logits) in float32: the networks build their output
heads inside ``full_precision()``.

``dtype_policy`` nests: on exit it restores the global policy that was there
before, an explicitly set one or the unset default that follows ``floatx``.

>>> check_precision("mixed_bfloat16")
'mixed_bfloat16'
>>> with dtype_policy("mixed_bfloat16"):
...     with full_precision():
...         head = tf_keras.mixed_precision.global_policy().name
...     torso = tf_keras.mixed_precision.global_policy().name
>>> head, torso, tf_keras.mixed_precision.global_policy().name
('float32', 'mixed_bfloat16', 'float32')
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tf_keras
from absl import flags

# tf_keras records whether a global policy was set in this module's ``_global_policy``:
# None while unset, when ``global_policy()`` follows ``floatx`` (tf_keras 2.19,
# ``src/mixed_precision/policy.py``; its unexported ``policy_scope`` restores it the same way).
from tf_keras.src.mixed_precision import policy as _keras_policy

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
AUTO = "auto"
"""The trainers' ``precision="auto"``: ``mixed_bfloat16`` where this host trains the model faster in it
than in float32, float32 otherwise; measured once per host and model (``sit_keras.measured_choice``)."""
AUTO_CANDIDATES = ("float32", "mixed_bfloat16")


def check_precision(precision: str, allow_auto: bool = False) -> str:
    """``precision`` if it is in ``PRECISIONS`` (or is ``"auto"``); a ``ValueError`` naming them otherwise."""
    valid = (*PRECISIONS, AUTO) if allow_auto else PRECISIONS
    if precision not in valid:
        raise ValueError(f"Unknown precision {precision!r}. Expected one of: {', '.join(valid)}.")
    return precision


@contextlib.contextmanager
def _global_policy_scope(policy: str | tf_keras.mixed_precision.Policy) -> Iterator[None]:
    """Keras' global dtype policy ``policy`` inside; on exit the one that was set before, or none.

    "None set" is restored with ``set_global_policy(None)``: the default then
    follows ``floatx`` again (float64 tests set it), which setting
    ``"float32"`` explicitly would pin.
    """
    previous = _keras_policy._global_policy  # None: no global policy was set (the floatx default)
    tf_keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        tf_keras.mixed_precision.set_global_policy(previous)


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Keras' global dtype policy ``precision`` while models are built; the previous policy again after.

    Nestable: on exit the global policy is what it was on entry, an
    explicitly set policy or the unset default (which follows ``floatx``).

    Raises:
      ValueError: ``precision`` not in ``PRECISIONS`` (before anything is set).
    """
    with _global_policy_scope(check_precision(precision)):
        yield


def is_mixed(policy: tf_keras.mixed_precision.Policy | None = None) -> bool:
    """Whether ``policy`` (default: the global one) computes in a narrower dtype than its variables."""
    policy = tf_keras.mixed_precision.global_policy() if policy is None else policy
    return policy.compute_dtype != policy.variable_dtype


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """Layers built inside compute in the variable dtype of the current global policy.

    Under ``mixed_bfloat16`` / ``mixed_float16`` the global policy is
    ``"float32"`` inside (the previous one again on exit): the output heads of
    the networks (logits, distribution parameters, values, Q-values) are built
    here, so that losses, log-probabilities and TD targets are computed in
    float32 while the torso computes in the half dtype. Under a policy that is
    not mixed (``float32``, or the ``floatx`` default, e.g. float64) nothing
    changes.
    """
    policy = tf_keras.mixed_precision.global_policy()
    if not is_mixed(policy):
        yield
        return
    with _global_policy_scope(policy.variable_dtype):
        yield


def define_precision_flag(flag_values: flags.FlagValues = flags.FLAGS, allow_auto: bool = False) -> None:
    """Defines ``--precision``: ``PRECISIONS`` (and ``"auto"`` if allowed); unset, the gin binding."""
    auto = (
        ", or auto (mixed_bfloat16 where this host trains the model faster in it; measured once per host and "
        "model, then cached)"
        if allow_auto
        else ""
    )
    flags.DEFINE_enum(
        "precision",
        "float32",
        [*PRECISIONS, AUTO] if allow_auto else list(PRECISIONS),
        f"Keras dtype policy of the model: float32, mixed_bfloat16, mixed_float16{auto}.",
        flag_values=flag_values,
    )
