"""Group actions on images and patch grids, and exact symmetry assertions.

Every promised symmetry in this package is checked with these helpers: a
function ``f`` is *invariant* under a transformation ``g`` when
``f(g x) = f(x)`` and *equivariant* when ``f(g x) = g' f(x)`` for the matching
action ``g'`` on the output (SiT paper, section 2).

The actions of the dihedral group D4 (90-degree rotations and the four
reflections) permute the pixels of a square grid exactly, so the checks can
be tight: errors are relative to the output's largest magnitude and must stay
under ``tolerance(dtype)``.

``f`` is evaluated once on the batch ``concat([x, g x])``: layers whose
training-mode randomness is shared by the whole batch (graph-symmetric
dropout drops shared *weights*) are then checked in training mode too.

Images and patch grids are ``(B, H, W, C)``; the spatial axes are 1 and 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
    """Relative error allowed for an exact symmetry computed in ``dtype``.

    float64 and float32: fixed bounds far above the measured rounding
    (~1e-15, ~1e-6). float16 and bfloat16, the compute dtypes of mixed
    precision, in unit roundoffs ``u``: a permutation of the input only
    reorders sums, but on a CPU float16 kernels round every partial sum, so
    an exact symmetry of a deep stack drifts by up to ~12 u (measured on the
    SiT family: 6e-3), while bfloat16 kernels accumulate in float32 (measured:
    0). float16: 20 u = 9.8e-3; bfloat16: 8 u = 3.1e-2.
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


def _check(errors: Mapping[str, float], passes: Callable[[float], bool], what: str) -> dict[str, float]:
    failed = {name: err for name, err in errors.items() if not passes(err)}
    if failed:
        raise AssertionError(f"{what}; relative errors: {failed} (all: {dict(errors)})")
    return dict(errors)


def assert_invariant(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transforms: Mapping[str, Transform],
    tol: float | None = None,
) -> dict[str, float]:
    """Asserts ``f(g x) = f(x)`` for every ``g``; returns the error of each."""
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
) -> dict[str, float]:
    """Asserts ``f(g x) = g' f(x)``; a transform is ``g`` (then ``g' = g``) or a pair ``(g, g')``."""
    tol = tolerance(x.dtype) if tol is None else tol
    errors = {}
    for name, g in transforms.items():
        g_in, g_out = g if isinstance(g, tuple) else (g, g)
        errors[name] = equivariance_error(fn, x, g_in, g_out)
    return _check(errors, lambda e: e <= tol, f"not equivariant within {tol:g}")
