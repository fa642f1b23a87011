"""Group actions on images and patch grids, and exact symmetry assertions.

Every promised symmetry in this package is checked with these helpers: a
function ``f`` is *invariant* under a transformation ``g`` when
``f(g x) = f(x)`` and *equivariant* when ``f(g x) = g' f(x)`` for the matching
action ``g'`` on the output (SiT paper, section 2).

The actions of the dihedral group D4 (90-degree rotations and the four
reflections) permute the pixels of a square grid exactly, so the checks can
be tight: errors are relative to the output's largest magnitude and must stay
under ``tolerance(dtype)`` in float64 and float32. In float16 and bfloat16 the
tolerance comes from the model's own rounding against its float64 twin
(``ErrorModel``, ``float64_twin``; docs/testing.md).

``f`` is evaluated once on the batch ``concat([x, g x])``: layers whose
training-mode randomness is shared by the whole batch (graph-symmetric
dropout drops shared *weights*) are then checked in training mode too.

Images and patch grids are ``(B, H, W, C)``; the spatial axes are 1 and 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

Transform = Callable[[tf.Tensor], tf.Tensor]


def rot90(x: tf.Tensor, k: int = 1) -> tf.Tensor:
    """Rotates the spatial axes of ``(B, H, W, C)`` by ``k`` quarter turns (counter-clockwise)."""
    x = tf.convert_to_tensor(x)
    k = k % 4
    if k == 0:
        return x
    if k == 2:
        return tf.reverse(x, axis=[1, 2])
    swapped = tf.transpose(x, [0, 2, 1, 3])
    # counter-clockwise: new[i, j] = old[j, W-1-i]; clockwise: new[i, j] = old[H-1-j, i].
    return tf.reverse(swapped, axis=[1]) if k == 1 else tf.reverse(swapped, axis=[2])


def flip_h(x: tf.Tensor) -> tf.Tensor:
    """Mirrors left and right (reverses the width axis)."""
    return tf.reverse(tf.convert_to_tensor(x), axis=[2])


def flip_v(x: tf.Tensor) -> tf.Tensor:
    """Mirrors top and bottom (reverses the height axis)."""
    return tf.reverse(tf.convert_to_tensor(x), axis=[1])


def transpose(x: tf.Tensor) -> tf.Tensor:
    """Reflects in the main diagonal."""
    return tf.transpose(tf.convert_to_tensor(x), [0, 2, 1, 3])


def anti_transpose(x: tf.Tensor) -> tf.Tensor:
    """Reflects in the anti-diagonal."""
    return rot90(transpose(x), 2)


def permute_grid(x: tf.Tensor, permutation: np.ndarray) -> tf.Tensor:
    """Permutes the ``H * W`` positions of ``(B, H, W, C)``: position ``p`` gets input ``permutation[p]``."""
    x = tf.convert_to_tensor(x)
    _, h, w, c = x.shape
    flat = tf.reshape(x, [-1, h * w, c])
    return tf.reshape(tf.gather(flat, permutation, axis=1), [-1, h, w, c])


def shift(x: tf.Tensor, dy: int, dx: int) -> tf.Tensor:
    """Cyclically shifts the spatial axes by ``(dy, dx)`` positions."""
    return tf.roll(tf.convert_to_tensor(x), shift=[dy, dx], axis=[1, 2])


ROTATIONS: dict[str, Transform] = {
    "rot90": lambda x: rot90(x, 1),
    "rot180": lambda x: rot90(x, 2),
    "rot270": lambda x: rot90(x, 3),
}
"""The non-trivial elements of the rotation group C4."""

REFLECTIONS: dict[str, Transform] = {
    "flip_h": flip_h,
    "flip_v": flip_v,
    "transpose": transpose,
    "anti_transpose": anti_transpose,
}
"""The four reflections of the dihedral group D4."""

DIHEDRAL: dict[str, Transform] = {**ROTATIONS, **REFLECTIONS}
"""The seven non-trivial elements of D4, the symmetries of the square."""


def tolerance(dtype: tf.DType | str) -> float:
    """Relative error allowed for an exact symmetry computed in ``dtype`` without a reference.

    float64 and float32: fixed bounds far above the measured rounding
    (~1e-15, ~1e-6). float16 and bfloat16, the compute dtypes of mixed
    precision, in unit roundoffs ``u`` (float16: 20 u = 9.8e-3; bfloat16:
    8 u = 3.1e-2): a rough bound for one-off comparisons (e.g. a traced graph
    against the eager call). It is not an error model: the rounding of a
    symmetry check grows with the length of each sum and with depth, and
    depends on the kernels that run. Symmetry checks in low precision pass
    ``model=ErrorModel(float64 twin, dtype)`` to ``assert_invariant`` /
    ``assert_equivariant`` instead, which derive their tolerance from the model.
    """
    dtype = tf.as_dtype(dtype)
    if dtype == tf.float16:
        return 20 * 2.0**-11
    if dtype == tf.bfloat16:
        return 8 * 2.0**-8
    return {"float64": 1e-10, "float32": 2e-5}[dtype.name]


def broken_threshold(dtype: tf.DType | str) -> float:
    """Smallest relative error that counts as a *broken* symmetry in ``dtype``: twice ``tolerance``.

    The deliberately broken symmetries (flips of the rotation-preserving
    triangle sums) change the output by 1e-2 to 1 on perturbed weights.
    """
    return max(2 * tolerance(dtype), 1e-4)


def rounding_budget(dtype: tf.DType | str) -> float:
    """Largest relative error of a mixed-precision model against its float64 twin that counts as rounding.

    Not a symmetry tolerance (see ``ErrorModel``): a bound on the model's own
    accuracy, so that a low-precision-only bug (a wrong cast, a branch that only
    the compute dtype takes) cannot hide inside a tolerance derived from it.
    Relative to ``max |f|``, the largest entry's error: float16 128 u = 6.3e-2,
    bfloat16 128 u = 0.5. Measured on every kernel setting of ``docs/testing.md``:
    at most 2.0e-2 (float16) and 0.23 (bfloat16, the SeT patch grid, whose
    projection cancels; 0.12 elsewhere): a wrong branch errs by order 1.
    """
    dtype = tf.as_dtype(dtype)
    if dtype == tf.float16:
        return 128 * 2.0**-11
    if dtype == tf.bfloat16:
        return 128 * 2.0**-8
    return 1e3 * tolerance(dtype)


def _relative_error(a: tf.Tensor, b: tf.Tensor) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-30)
    return float(np.max(np.abs(a - b)) / scale)


def _paired_outputs(fn: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, transform: Transform):
    x = tf.convert_to_tensor(x)
    both = fn(tf.concat([x, transform(x)], axis=0))
    batch = int(x.shape[0])
    return both[:batch], both[batch:]


def invariance_error(fn: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, transform: Transform) -> float:
    """``max |f(g x) - f(x)| / max |f(x)|``."""
    original, transformed = _paired_outputs(fn, x, transform)
    return _relative_error(transformed, original)


def equivariance_error(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transform: Transform,
    output_transform: Transform | None = None,
) -> float:
    """``max |f(g x) - g' f(x)| / max |f(x)|``; ``g'`` defaults to ``g``."""
    original, transformed = _paired_outputs(fn, x, transform)
    return _relative_error(transformed, (output_transform or transform)(original))


def _identity(y: tf.Tensor) -> tf.Tensor:
    return y


@dataclass(frozen=True)
class ErrorModel:
    """The tolerance of a symmetry check in low precision, derived from the model's own rounding.

    ``exact`` is the checked function's float64 twin (same code, same weights,
    ``dtype="float64"``), ``dtype`` the compute dtype of the checked function.
    On the batch ``z = [x, g x]`` both are evaluated once; with
    ``d(z) = f(z) - f64(z)`` the low-precision rounding and ``g'`` the output
    action (a permutation of entries, or the identity for invariance), the
    triangle inequality gives, entry by entry,

        ``|f(g x) - g' f(x)| <= |d(g x)| + |d(x)| + |f64(g x) - g' f64(x)|``.

    So the check is: the twin holds the symmetry exactly (``tolerance(float64)``),
    and ``f`` holds it within ``tolerance = max|d(x)| + max|d(g x)|``, the
    rounding measured on this very input (relative to ``max |f|``, as every
    error here). The bound needs no assumption about how the kernels round:
    which instructions run (oneDNN with AMX or AVX512-FP16, emulated float16,
    Eigen) changes ``d``, and so the tolerance, never the verdict on a correct
    model. A structural bug (a misplaced graph weight) breaks the twin's
    symmetry and fails whatever the rounding; a bug that only the low
    precision path has shows as a rounding error beyond ``rounding_budget(dtype)``.
    """

    exact: Callable[[tf.Tensor], tf.Tensor]
    dtype: tf.DType | str

    def check(self, fn: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, g_in: Transform, g_out: Transform):
        """``(error, tolerance, rounding, exact_error)`` of ``f(g x) = g' f(x)`` on ``x``."""
        x = tf.convert_to_tensor(x)
        batch = int(x.shape[0])
        z = tf.concat([x, g_in(x)], axis=0)
        low = tf.cast(fn(z), tf.float64)
        ref = tf.cast(self.exact(z), tf.float64)
        scale = max(float(tf.reduce_max(tf.abs(low))), 1e-30)
        ref_scale = max(float(tf.reduce_max(tf.abs(ref))), 1e-30)

        def largest(t: tf.Tensor) -> float:
            return float(tf.reduce_max(tf.abs(t)))

        error = largest(low[batch:] - g_out(low[:batch])) / scale
        exact_error = largest(ref[batch:] - g_out(ref[:batch])) / ref_scale
        rounding = (largest(low[:batch] - ref[:batch]) / scale, largest(low[batch:] - ref[batch:]) / scale)
        tol = rounding[0] + rounding[1] + tolerance(tf.float64) * ref_scale / scale
        return error, tol, max(rounding), exact_error


def _check(errors: Mapping[str, float], passes: Callable[[float], bool], what: str) -> dict[str, float]:
    failed = {name: err for name, err in errors.items() if not passes(err)}
    if failed:
        raise AssertionError(f"{what}; relative errors: {failed} (all: {dict(errors)})")
    return dict(errors)


SYMMETRY_RECORDS: list[dict[str, Any]] = []
"""Every check made with an ``ErrorModel`` in this process (``tests/conftest.py`` reports them)."""


def _check_with_model(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    pairs: Mapping[str, tuple[Transform, Transform]],
    model: ErrorModel,
    what: str,
) -> dict[str, float]:
    budget = rounding_budget(model.dtype)
    errors, report = {}, {}
    for name, (g_in, g_out) in pairs.items():
        error, tol, rounding, exact_error = model.check(fn, x, g_in, g_out)
        errors[name] = error
        dtype = tf.as_dtype(model.dtype).name
        held = error <= tol and exact_error <= tolerance(tf.float64) and rounding <= budget
        SYMMETRY_RECORDS.append(
            {
                "transform": name,
                "dtype": dtype,
                "error": error,
                "tolerance": tol,
                "rounding": rounding,
                "held": held,
            }
        )
        report[name] = (
            f"error {error:.3g} / tolerance {tol:.3g} (rounding {rounding:.3g}, float64 {exact_error:.3g})"
        )
        if exact_error > tolerance(tf.float64):
            raise AssertionError(f"the float64 twin is not {what} under {name}: {report[name]}")
        if rounding > budget:
            raise AssertionError(
                f"rounding error {rounding:.3g} against the float64 twin exceeds the {dtype} "
                f"budget {budget:.3g} under {name}: a low-precision bug, not rounding"
            )
        if error > tol:
            raise AssertionError(f"not {what} within the rounding bound under {name}: {report}")
    return errors


def assert_invariant(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transforms: Mapping[str, Transform],
    tol: float | None = None,
    model: ErrorModel | None = None,
) -> dict[str, float]:
    """Asserts ``f(g x) = f(x)`` for every ``g``; returns the error of each.

    The tolerance is ``tol``, or ``tolerance(x.dtype)``, or, with ``model``,
    derived from the rounding of ``fn`` against its float64 twin (``ErrorModel``).
    """
    if model is not None:
        pairs = {name: (g, _identity) for name, g in transforms.items()}
        return _check_with_model(fn, x, pairs, model, "invariant")
    tol = tolerance(x.dtype) if tol is None else tol
    errors = {name: invariance_error(fn, x, g) for name, g in transforms.items()}
    return _check(errors, lambda e: e <= tol, f"not invariant within {tol:g}")


def assert_not_invariant(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transforms: Mapping[str, Transform],
    min_error: float = 1e-3,
) -> dict[str, float]:
    """Asserts that each ``g`` changes ``f``'s output by more than ``min_error`` (a broken symmetry)."""
    errors = {name: invariance_error(fn, x, g) for name, g in transforms.items()}
    return _check(errors, lambda e: e > min_error, f"unexpectedly invariant (error <= {min_error:g})")


def assert_equivariant(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transforms: Mapping[str, Transform | tuple[Transform, Transform]],
    tol: float | None = None,
    model: ErrorModel | None = None,
) -> dict[str, float]:
    """Asserts ``f(g x) = g' f(x)``; a transform is ``g`` (then ``g' = g``) or a pair ``(g, g')``.

    The tolerance is chosen as in ``assert_invariant``.
    """
    pairs = {name: g if isinstance(g, tuple) else (g, g) for name, g in transforms.items()}
    if model is not None:
        return _check_with_model(fn, x, pairs, model, "equivariant")
    tol = tolerance(x.dtype) if tol is None else tol
    errors = {name: equivariance_error(fn, x, g_in, g_out) for name, (g_in, g_out) in pairs.items()}
    return _check(errors, lambda e: e <= tol, f"not equivariant within {tol:g}")


def assert_broken(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transforms: Mapping[str, Transform | tuple[Transform, Transform]],
    model: ErrorModel,
    invariance: bool = True,
) -> dict[str, float]:
    """Asserts that a deliberately broken symmetry is broken exactly, and stays broken in low precision.

    For every ``g``, the float64 twin's error exceeds ``broken_threshold(float64)``
    (the break is structural), and ``fn``'s error is at least half of the twin's
    (rounding has not washed it out). ``invariance=False`` checks
    ``f(g x) = g' f(x)`` as ``assert_equivariant`` does; returns ``fn``'s errors.
    """
    errors, failed = {}, {}
    for name, g in transforms.items():
        g_in, g_out = g if isinstance(g, tuple) else (g, _identity if invariance else g)
        error, tol, _, exact_error = model.check(fn, x, g_in, g_out)
        errors[name] = error
        if exact_error <= broken_threshold(tf.float64) or error < exact_error / 2:
            failed[name] = f"error {error:.3g}, float64 {exact_error:.3g}, rounding bound {tol:.3g}"
    if failed:
        raise AssertionError(f"symmetry not broken as promised: {failed}")
    return errors


def float64_twin(layer: Any, build: Callable[[Any], Any]) -> Any:
    """The same layer or model in float64 with the same weights: the reference of ``ErrorModel``.

    Rebuilt from ``get_config`` with ``dtype="float64"`` (under a float64
    global policy, so that sub-layers made without a dtype follow), built by
    ``build(twin)`` (a call on inputs), then given ``layer``'s weights.
    """
    # policy_scope restores an unset global policy as unset (floatx-following), not as "float32".
    from tf_keras.src.mixed_precision.policy import policy_scope

    with policy_scope("float64"):
        twin = type(layer).from_config({**layer.get_config(), "dtype": "float64"})
        build(twin)
    twin.set_weights(layer.get_weights())
    return twin
