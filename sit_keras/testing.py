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

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras import groups

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


_D4_ACTIONS: dict[str, Transform] = {
    "rot90": lambda x: rot90(x, 1),
    "rot180": lambda x: rot90(x, 2),
    "rot270": lambda x: rot90(x, 3),
    "flip_h": flip_h,
    "flip_v": flip_v,
    "transpose": transpose,
    "anti_transpose": anti_transpose,
}

ROTATIONS: dict[str, Transform] = {name: _D4_ACTIONS[name] for name in groups.ROTATION_NAMES}
"""The non-trivial elements of the rotation group C4 (named in ``sit_keras.groups.D4_ELEMENTS``)."""

REFLECTIONS: dict[str, Transform] = {name: _D4_ACTIONS[name] for name in groups.REFLECTION_NAMES}
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


def relative_error(a: tf.Tensor, b: tf.Tensor) -> float:
    """``max |a - b| / max(|a|, |b|)``: the error measure of every check here."""
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
    return relative_error(transformed, original)


def equivariance_error(
    fn: Callable[[tf.Tensor], tf.Tensor],
    x: tf.Tensor,
    transform: Transform,
    output_transform: Transform | None = None,
) -> float:
    """``max |f(g x) - g' f(x)| / max |f(x)|``; ``g'`` defaults to ``g``."""
    original, transformed = _paired_outputs(fn, x, transform)
    return relative_error(transformed, (output_transform or transform)(original))


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


# -- the layer contract: weights, inputs, round trips and the declared group actions ----------------
def perturb_weights(layer: Any, stddev: float = 0.3, seed: int = 0, trainable_only: bool = False) -> None:
    """Adds ``N(0, stddev^2)`` noise to every weight of a built layer or model, in place.

    Zero biases and near-identity graph initialisations are symmetric by
    themselves; after the noise, a symmetry that holds is a property of the
    architecture. ``trainable_only`` leaves the non-trainable weights alone.
    """
    variables = layer.trainable_weights if trainable_only else layer.weights
    if not variables:
        raise ValueError(f"{layer.name} has no weights: build it first.")
    rng = np.random.default_rng(seed)
    for variable in variables:
        noise = rng.normal(0.0, stddev, size=variable.shape).astype(variable.dtype.as_numpy_dtype)
        variable.assign(variable + noise)


def random_normal(shape: tuple[int, ...], seed: int = 1, dtype: tf.DType | str = "float64") -> tf.Tensor:
    """A fixed ``N(0, 1)`` tensor of ``shape`` (numpy's generator, so it does not depend on TF's seed)."""
    return tf.constant(np.random.default_rng(seed).normal(size=shape), dtype=dtype)


def config_round_trip(layer: Any) -> Any:
    """``type(layer).from_config(get_config())`` through JSON, after asserting that the config is plain data.

    Plain data means JSON types only (lists, not tuples), so that a config
    written to a file comes back equal.
    """
    config = layer.get_config()
    restored = json.loads(json.dumps(config))
    if restored != config:
        raise AssertionError(f"{type(layer).__name__}.get_config() is not plain JSON data: {config}")
    return type(layer).from_config(restored)


def serialization_round_trip(layer: Any) -> Any:
    """Through JSON and ``tf_keras.saving.serialize_keras_object`` / ``deserialize_keras_object``."""
    serialized = json.loads(json.dumps(tf_keras.saving.serialize_keras_object(layer)))
    return tf_keras.saving.deserialize_keras_object(serialized)


def _permutation(n: int) -> np.ndarray:
    """A fixed permutation of ``n`` items that moves some (the reversal if the draw moves none)."""
    permutation = np.random.default_rng(0).permutation(n)
    return permutation[::-1].copy() if (permutation == np.arange(n)).all() else permutation


def _permute_axis_1(x: tf.Tensor) -> tf.Tensor:
    return tf.gather(x, _permutation(int(x.shape[1])), axis=1)


def _grid_token_action(element: str, grid_shape: tuple[int, int], class_token: bool) -> Transform:
    """A D4 element on ``(B, [1 +] H * W, D)`` tokens: the grid is permuted, the class token stays."""
    h, w = grid_shape

    def act(tokens: tf.Tensor) -> tf.Tensor:
        head, grid = (tokens[:, :1], tokens[:, 1:]) if class_token else (tokens[:, :0], tokens)
        moved = _D4_ACTIONS[element](tf.reshape(grid, [-1, h, w, int(grid.shape[-1])]))
        return tf.concat([head, tf.reshape(moved, tf.shape(grid))], axis=1)

    return act


def _plane_group_action(group: groups.Group, element: str) -> Transform:
    """``L_g`` of ``sit_keras.groups`` on images ``(B, H, W, C)`` or signals ``(B, H, W, |H|, D)``."""
    index = [f"r{a}" + ("m" if b else "") for a, b in group.elements].index(element)

    def act(x: tf.Tensor) -> tf.Tensor:
        if x.shape.rank == 4:
            return groups.transform_image(x, group, index)
        return groups.transform_group_signal(x, group, index)

    return act


def _offset_actions(group: groups.Group, element: str) -> tuple[Transform, Transform]:
    """``g`` on ``(B, K, 2)`` offsets, and its regular action on the ``(B, |H|, ...)`` group axis."""
    index = [f"r{a}" + ("m" if b else "") for a, b in group.elements].index(element)
    matrix = group.matrices[index]

    def on_offsets(offsets: tf.Tensor) -> tf.Tensor:
        return tf.einsum("bkj,ij->bki", offsets, tf.constant(matrix, offsets.dtype))

    def on_output(y: tf.Tensor) -> tf.Tensor:
        return tf.gather(y, group.regular_permutation(index), axis=1)

    return on_offsets, on_output


def declared_actions(
    symmetry: Any,
    elements: tuple[str, ...],
    grid_shape: tuple[int, int] | None = None,
    class_token: bool = True,
) -> dict[str, tuple[Transform, Transform]]:
    """``{element: (g on the input, g on an equivariant output)}`` for a ``sit_keras.symmetry.Symmetry``.

    The actions follow ``symmetry.acts_on`` (``sit_keras.symmetry.ACTIONS``):
    D4 elements on images and feature maps, or on grid tokens (``grid_shape``,
    ``class_token``); ``L_g`` of the plane group on images and group signals;
    ``g`` on offsets with the regular action on the group axis; a fixed
    permutation of axis 1 for sensors and patches (their state moves with them).
    """
    actions = {}
    for element in elements:
        if symmetry.acts_on == "image":
            actions[element] = (_D4_ACTIONS[element], _D4_ACTIONS[element])
        elif symmetry.acts_on == "grid_tokens":
            act = _grid_token_action(element, grid_shape, class_token)
            actions[element] = (act, act)
        elif symmetry.acts_on == "group_signal":
            act = _plane_group_action(groups.get_group(symmetry.group), element)
            actions[element] = (act, act)
        elif symmetry.acts_on == "offsets":
            actions[element] = _offset_actions(groups.get_group(symmetry.group), element)
        elif symmetry.acts_on in ("sensors", "patches"):
            actions[element] = (_permute_axis_1, _permute_axis_1)
        else:
            raise ValueError(f"No group acts on {symmetry.acts_on!r} inputs.")
    return actions


def declared_symmetry_errors(
    fn: Callable[[tf.Tensor], Mapping[str, tf.Tensor]],
    x: tf.Tensor,
    symmetry: Any,
    elements: tuple[str, ...],
    grid_shape: tuple[int, int] | None = None,
    class_token: bool = True,
) -> dict[str, dict[str, float]]:
    """``{element: {part: relative error}}`` of the declared action on each part of ``symmetry.parts``.

    ``fn`` maps a batch to its outputs by part name (``"output"`` for a single
    output); it is evaluated once on ``concat([x, g x])``. An invariant part
    is compared with itself, an equivariant one with the element's action on
    the output (``declared_actions``).
    """
    actions = declared_actions(symmetry, elements, grid_shape, class_token)
    kinds = dict(symmetry.parts)
    batch = int(x.shape[0])
    errors = {}
    for element, (g_in, g_out) in actions.items():
        both = fn(tf.concat([x, g_in(x)], axis=0))
        if not set(kinds) <= set(both):
            raise AssertionError(f"declared parts {sorted(kinds)}, but the outputs are {sorted(both)}")
        errors[element] = {}
        for part, kind in kinds.items():
            original, moved = both[part][:batch], both[part][batch:]
            errors[element][part] = relative_error(
                moved, original if kind == "invariant" else g_out(original)
            )
    return errors


def assert_declared_symmetry(
    fn: Callable[[tf.Tensor], Mapping[str, tf.Tensor]],
    x: tf.Tensor,
    symmetry: Any,
    grid_shape: tuple[int, int] | None = None,
    class_token: bool = True,
) -> dict[str, dict[str, float]]:
    """Asserts a ``sit_keras.symmetry.Symmetry``: its elements hold and its broken elements break it.

    Every part holds under every element within ``tolerance(x.dtype)``; under
    each element of ``symmetry.broken`` some part errs by more than
    ``broken_threshold(x.dtype)`` (the break is exact in the architecture, so
    perturbed weights and random inputs show it). Returns the errors of the
    kept elements.
    """
    if not symmetry.elements:
        raise AssertionError(f"{symmetry.summary!r} covers no element: nothing to check")
    held = declared_symmetry_errors(fn, x, symmetry, symmetry.elements, grid_shape, class_token)
    failed = {e: p for e, p in held.items() if max(p.values()) > tolerance(x.dtype)}
    if failed:
        raise AssertionError(f"declared {symmetry.summary!r}, but the errors are {failed}")
    if symmetry.broken:
        broken = declared_symmetry_errors(fn, x, symmetry, symmetry.broken, grid_shape, class_token)
        kept = {e: p for e, p in broken.items() if max(p.values()) <= broken_threshold(x.dtype)}
        if kept:
            raise AssertionError(f"{symmetry.broken} must change the output, but the errors are {kept}")
    return held
