"""The plane groups of GSA-Nets: ``p = Z^2 x| H`` with a finite stabiliser ``H``.

GSA-Nets (Romero & Cordonnier, ICLR 2021, section 6, "Model designation")
names its models by the group they are equivariant to: translations only
(``z2``), rotations by ``360 / n`` degrees (``p4``, ``p8``, ``p12``,
``p16``), a mirror (``mz2``) and rotations with a mirror (``p4m``, ``p8m``).
Every one of them is the semi-direct product (GSA-Nets eq. 17) of the
translations with a finite group ``H`` of rotations ``r^a`` and at most one
mirror ``m``; this module holds ``H`` as an object: its elements, Cayley
table, inverses, conjugation, and its action on 2-D relative positions and on
signals.

Conventions (shared with ``sit_keras.testing``):

- positions are ``(row, col)`` offsets of the pixel grid (rows grow down);
- ``r`` turns the picture counter-clockwise by ``360 / n`` degrees: for
  ``n = 4`` it maps the offset ``(dr, dc)`` to ``(-dc, dr)``, and acting on an
  image it is ``sit_keras.testing.rot90``;
- ``m`` mirrors left and right, ``(dr, dc) -> (dr, -dc)``, i.e.
  ``sit_keras.testing.flip_h``;
- element ``r^a m^b`` has index ``a + n * b`` (rotations first), and
  ``(r^a1 m^b1) (r^a2 m^b2) = r^(a1 + (-1)^b1 a2) m^(b1 + b2)``.

The action of ``g`` on a function (an image, or a signal on the group) is the
left regular representation (GSA-Nets Def. C.4): ``(L_g f)(x) = f(g^-1 x)``
and, on signals over ``p``, ``(L_g f)(x, h) = f(g^-1 x, g^-1 h)``: the image
is transformed and the group axis permuted (cyclically for rotations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import tensorflow as tf

GROUP_NAMES: tuple[str, ...] = ("z2", "p4", "p8", "p12", "p16", "mz2", "p4m", "p8m")
"""The groups of GSA-Nets' experiments, by model name (GSA-Nets Table 2)."""

D4_ELEMENTS: dict[str, tuple[int, int]] = {
    "rot90": (1, 0),
    "rot180": (2, 0),
    "rot270": (3, 0),
    "flip_h": (0, 1),
    "flip_v": (2, 1),
    "transpose": (1, 1),
    "anti_transpose": (3, 1),
}
"""The seven non-trivial symmetries of the square by name, as ``r^a m^b`` of ``p4m`` (``(a, b)``).

The one naming of the square's group elements: ``sit_keras.testing`` acts
with them on tensors, ``sit_keras.symmetry`` declares which of them each layer
keeps, and the environments' observation transforms take the same names. With
``r`` the counter-clockwise quarter turn and ``m`` the left-right mirror,
``r m`` is the reflection in the main diagonal and ``r^2 m`` the top-bottom
mirror (``tests/test_groups.py`` checks each against ``transform_image``).
"""

ROTATION_NAMES: tuple[str, ...] = ("rot90", "rot180", "rot270")
"""The non-trivial elements of C4 (SiT paper: the rotations its encoders are invariant to)."""

REFLECTION_NAMES: tuple[str, ...] = ("flip_h", "flip_v", "transpose", "anti_transpose")
"""The four reflections of D4 (what the SiT's triangle sums break, eq. 4)."""


class Group:
    """A finite stabiliser ``H = {r^a m^b}`` of a plane group ``Z^2 x| H``.

    Args:
      num_rotations: ``n``, the number of rotations (by ``360 / n`` degrees).
      mirror: whether ``H`` contains the left-right mirror ``m``.
      name: the model name (``"p4m"``, ...).

    Attributes:
      order: ``|H|``.
      elements: ``(a, b)`` for each ``r^a m^b``, in index order.
      cayley: ``(|H|, |H|)`` ints, ``cayley[i, j]`` is the index of ``h_i h_j``.
      inverse: ``(|H|,)`` ints, the index of ``h_i^-1``.
      matrices: ``(|H|, 2, 2)`` float64 matrices acting on ``(row, col)``
        offsets; exact small integers for the grid-exact groups.
    """

    identity: int = 0

    def __init__(self, num_rotations: int, mirror: bool, name: str):
        if int(num_rotations) < 1:
            raise ValueError(f"num_rotations must be positive. Received: num_rotations={num_rotations}")
        self.num_rotations = int(num_rotations)
        self.mirror = bool(mirror)
        self.name = name
        n = self.num_rotations
        self.elements: tuple[tuple[int, int], ...] = tuple(
            (a, b) for b in range(1 + int(self.mirror)) for a in range(n)
        )
        self.order = len(self.elements)
        self.cayley = np.array(
            [[self._index(self._compose(g1, g2)) for g2 in self.elements] for g1 in self.elements],
            dtype=np.int64,
        )
        self.inverse = np.array(
            [int(np.flatnonzero(row == self.identity)[0]) for row in self.cayley], dtype=np.int64
        )
        self.matrices = np.stack([self._matrix(a, b) for a, b in self.elements])

    # -- the abstract group --------------------------------------------------------
    def _compose(self, g1: tuple[int, int], g2: tuple[int, int]) -> tuple[int, int]:
        (a1, b1), (a2, b2) = g1, g2
        # m r^a = r^-a m: the mirror reverses the sense of rotation.
        return ((a1 + (-1) ** b1 * a2) % self.num_rotations, (b1 + b2) % 2)

    def _index(self, element: tuple[int, int]) -> int:
        a, b = element
        return a + self.num_rotations * b

    def compose(self, i: int, j: int) -> int:
        """Index of ``h_i h_j``."""
        return int(self.cayley[i, j])

    def conjugate(self, h: int, r: int) -> int:
        """Index of ``h^-1 r h``: how ``h`` acts on a *relative* group element."""
        return int(self.cayley[self.cayley[self.inverse[h], r], h])

    def rotation_angle(self, element: int) -> float:
        """The rotation part of ``h``, in degrees."""
        return 360.0 * self.elements[element][0] / self.num_rotations

    def element_index(self, rotation_steps: int, mirrored: bool = False) -> int:
        """Index of ``r^rotation_steps m^mirrored``."""
        if mirrored and not self.mirror:
            raise ValueError(f"Group {self.name!r} has no mirror.")
        return self._index((rotation_steps % self.num_rotations, int(mirrored)))

    # -- the action on the plane -----------------------------------------------------
    def _matrix(self, a: int, b: int) -> np.ndarray:
        quarter, rest = divmod(4 * a, self.num_rotations)
        if rest == 0:
            # Multiples of 90 degrees are exact: no cos(pi / 2) = 6e-17.
            cos, sin = [(1, 0), (0, 1), (-1, 0), (0, -1)][quarter % 4]
        else:
            angle = 2.0 * math.pi * a / self.num_rotations
            cos, sin = math.cos(angle), math.sin(angle)
        rotation = np.array([[cos, -sin], [sin, cos]], dtype=np.float64)
        mirror = np.diag([1.0, -1.0]) if b else np.eye(2)
        return rotation @ mirror

    @property
    def is_grid_exact(self) -> bool:
        """Whether every element maps the pixel grid to itself (rotations by multiples of 90 degrees)."""
        return 4 % self.num_rotations == 0

    def act(self, element: int, positions: np.ndarray) -> np.ndarray:
        """``h`` applied to ``(..., 2)`` ``(row, col)`` positions, as floats."""
        return np.asarray(positions, dtype=np.float64) @ self.matrices[element].T

    def offset_permutation(self, element: int, offsets: np.ndarray) -> np.ndarray:
        """The permutation of integer offsets ``(K, 2)`` by ``h``: ``offsets[perm[k]] = h offsets[k]``."""
        if not self.is_grid_exact:
            raise ValueError(f"Group {self.name!r} does not map the pixel grid to itself.")
        offsets = np.asarray(offsets, dtype=np.int64)
        moved = np.rint(self.act(element, offsets)).astype(np.int64)
        lookup = {tuple(o): k for k, o in enumerate(offsets.tolist())}
        try:
            return np.array([lookup[tuple(o)] for o in moved.tolist()], dtype=np.int64)
        except KeyError as missing:
            raise ValueError(
                f"The offsets are not closed under {self.name!r}: {missing} is missing."
            ) from None

    def regular_permutation(self, element: int) -> np.ndarray:
        """``perm`` with ``(L_g f)(h) = f(g^-1 h) = f[perm[h]]`` on the group axis."""
        return self.cayley[self.inverse[element]].copy()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, order={self.order})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and (self.num_rotations, self.mirror) == (
            other.num_rotations,
            other.mirror,
        )

    def __hash__(self) -> int:
        return hash((self.num_rotations, self.mirror))


class Z2(Group):
    """Translations only: the trivial stabiliser ``H = {e}`` (``z2``)."""

    def __init__(self):
        super().__init__(1, False, "z2")


class Rn(Group):
    """Rotations by multiples of ``360 / n`` degrees, ``H = C_n`` (``p4``, ``p8``, ...)."""

    def __init__(self, n: int):
        super().__init__(n, False, f"p{int(n)}")


class M(Group):
    """The left-right mirror, ``H = {e, m}`` (``mz2``)."""

    def __init__(self):
        super().__init__(1, True, "mz2")


class RnM(Group):
    """Rotations by ``360 / n`` degrees and mirrors, ``H = D_n`` (``p4m``, ``p8m``)."""

    def __init__(self, n: int):
        super().__init__(n, True, f"p{int(n)}m")


_FACTORIES: dict[str, Callable[[], Group]] = {
    "z2": Z2,
    "p4": lambda: Rn(4),
    "p8": lambda: Rn(8),
    "p12": lambda: Rn(12),
    "p16": lambda: Rn(16),
    "mz2": M,
    "p4m": lambda: RnM(4),
    "p8m": lambda: RnM(8),
}


def get_group(name: str | Group) -> Group:
    """The group of a GSA-Nets model name (``GROUP_NAMES``); a ``Group`` passes through."""
    if isinstance(name, Group):
        return name
    if name not in _FACTORIES:
        raise ValueError(f"Unknown group {name!r}. Expected one of: {', '.join(GROUP_NAMES)}.")
    return _FACTORIES[name]()


# -- actions on tensors -------------------------------------------------------------
def _centred_grid(height: int, width: int) -> np.ndarray:
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows - (height - 1) / 2, cols - (width - 1) / 2], axis=-1)  # (H, W, 2)


def grid_permutation(group: Group, element: int, height: int, width: int) -> np.ndarray:
    """``perm`` over the ``H * W`` pixels with ``(L_g x)[p] = x[perm[p]]``, i.e. ``x(g^-1 p)``.

    The group acts about the centre of the image. Raises ``ValueError`` when
    ``g`` does not map this grid to itself (a quarter turn of a non-square
    image, or a group finer than 90 degrees).
    """
    source = group.act(group.inverse[element], _centred_grid(height, width))
    source += [(height - 1) / 2, (width - 1) / 2]
    rounded = np.rint(source)
    inside = (rounded[..., 0] >= 0) & (rounded[..., 0] < height) & (rounded[..., 1] >= 0)
    inside &= rounded[..., 1] < width
    if not group.is_grid_exact or np.max(np.abs(source - rounded)) > 1e-9 or not inside.all():
        raise ValueError(
            f"Element {group.elements[element]} of {group.name!r} does not map a {height}x{width} grid "
            "to itself."
        )
    rounded = rounded.astype(np.int64)
    return (rounded[..., 0] * width + rounded[..., 1]).reshape(-1)


def _permute_pixels(x: tf.Tensor, permutation: np.ndarray) -> tf.Tensor:
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.concat([shape[:1], [-1], shape[3:]], axis=0))
    return tf.reshape(tf.gather(flat, permutation, axis=1), shape)


def transform_image(x: tf.Tensor, group: Group | str, element: int) -> tf.Tensor:
    """``L_g`` on images ``(B, H, W, C)``: ``(L_g x)(p) = x(g^-1 p)``."""
    group = get_group(group)
    x = tf.convert_to_tensor(x)
    if x.shape.rank != 4:
        raise ValueError(f"transform_image expects images (B, H, W, C). Received: shape={x.shape}")
    return _permute_pixels(x, grid_permutation(group, element, int(x.shape[1]), int(x.shape[2])))


def transform_group_signal(x: tf.Tensor, group: Group | str, element: int) -> tf.Tensor:
    """``L_g`` on signals over the group ``(B, H, W, |H|, D)``: ``f(g^-1 p, g^-1 h)``.

    The regular representation: the image is transformed and the group axis
    permuted by ``h -> g^-1 h`` (a cyclic shift for rotations).
    """
    group = get_group(group)
    x = tf.convert_to_tensor(x)
    if x.shape.rank != 5 or x.shape[3] != group.order:
        raise ValueError(
            f"transform_group_signal expects (B, H, W, {group.order}, D) for group {group.name!r}. "
            f"Received: shape={x.shape}"
        )
    spatial = _permute_pixels(x, grid_permutation(group, element, int(x.shape[1]), int(x.shape[2])))
    return tf.gather(spatial, group.regular_permutation(element), axis=3)


def group_actions(group: Group | str, on: str = "image") -> dict[str, Callable[[tf.Tensor], tf.Tensor]]:
    """``{name: L_g}`` for every element of a grid-exact group, for ``sit_keras.testing`` checks.

    Args:
      group: the group.
      on: ``"image"`` for ``(B, H, W, C)`` or ``"group"`` for ``(B, H, W, |H|, D)``.
    """
    group = get_group(group)
    if on not in ("image", "group"):
        raise ValueError(f"on must be 'image' or 'group'. Received: on={on!r}")
    transform = transform_image if on == "image" else transform_group_signal
    actions = {}
    for index, (a, b) in enumerate(group.elements):
        name = f"r{a}" + ("m" if b else "")
        actions[name] = lambda x, index=index: transform(x, group, index)
    return actions


# -- rotations off the grid: bilinear resampling ---------------------------------------
def disk_mask(height: int, width: int) -> np.ndarray:
    """``(H, W)`` 0/1 mask of the centred disk of diameter ``min(H, W)``: what every rotation keeps inside."""
    radius = (min(height, width) - 1) / 2
    return (np.sum(_centred_grid(height, width) ** 2, axis=-1) <= radius**2 + 1e-9).astype(np.float64)


def _bilinear_taps(height: int, width: int, angle: float) -> tuple[np.ndarray, np.ndarray]:
    """Source pixels ``(H * W, 4)`` and weights of a counter-clockwise rotation by ``angle`` degrees."""
    theta = math.radians(angle)
    cos, sin = math.cos(theta), math.sin(theta)
    inverse = np.array([[cos, sin], [-sin, cos]])  # rotation by -angle
    source = _centred_grid(height, width).reshape(-1, 2) @ inverse.T + [(height - 1) / 2, (width - 1) / 2]
    # Snap what is an integer up to rounding, so that quarter turns are exact permutations.
    snapped = np.rint(source)
    source = np.where(np.abs(source - snapped) < 1e-9, snapped, source)
    base = np.floor(source)
    frac = source - base
    indices, weights = [], []
    for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
        row, col = base[:, 0] + dr, base[:, 1] + dc
        weight = (frac[:, 0] if dr else 1 - frac[:, 0]) * (frac[:, 1] if dc else 1 - frac[:, 1])
        inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
        indices.append(np.where(inside, row * width + col, 0).astype(np.int64))
        weights.append(np.where(inside, weight, 0.0))
    return np.stack(indices, axis=-1), np.stack(weights, axis=-1)


def rotate_image(x: tf.Tensor, angle: float) -> tf.Tensor:
    """Turns ``(B, H, W, ...)`` counter-clockwise by ``angle`` degrees (bilinear, zeros outside).

    For multiples of 90 degrees on a square grid this is the exact permutation
    ``sit_keras.testing.rot90``.
    """
    x = tf.convert_to_tensor(x)
    height, width = int(x.shape[1]), int(x.shape[2])
    indices, weights = _bilinear_taps(height, width, angle)
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.concat([shape[:1], [height * width], [-1]], axis=0))  # (B, P, F)
    taps = tf.gather(flat, indices, axis=1)  # (B, P, 4, F)
    rotated = tf.einsum("bptf,pt->bpf", taps, tf.constant(weights, dtype=x.dtype))
    return tf.reshape(rotated, shape)


def rotation_equivariance_error(
    model_or_layer: Callable[[tf.Tensor], tf.Tensor],
    images: tf.Tensor,
    angles: Iterable[float],
    group: Group | str | None = None,
) -> dict[float, float]:
    """How far ``f`` is from commuting with rotations that need not map the grid to itself.

    Each image is first masked to its centred disk (so that no content leaves
    the frame), then turned by each angle with bilinear resampling. For an
    invariant output ``(B, D)`` the error is ``max |f(R x) - f(x)| / max |f(x)|``;
    for a signal on the group ``(B, H, W, |H|, D)`` the output of ``x`` is
    turned the same way (masked to the disk too) and its group axis shifted by
    ``angle / (360 / n)`` steps, which must be an integer.

    Args:
      model_or_layer: maps ``(B, H, W, C)`` images to ``(B, D)`` or ``(B, H, W, |H|, D)``.
      images: ``(B, H, W, C)`` float images.
      angles: counter-clockwise angles in degrees.
      group: the group of a group-signal output; defaults to ``model_or_layer.group``.

    Returns:
      ``{angle: relative error}``.
    """
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"images must be (B, H, W, C). Received: shape={images.shape}")
    height, width = int(images.shape[1]), int(images.shape[2])
    mask = tf.constant(disk_mask(height, width)[None, :, :, None], dtype=images.dtype)
    masked = images * mask
    reference = model_or_layer(masked)
    errors = {}
    for angle in angles:
        output = model_or_layer(rotate_image(masked, angle))
        expected = reference
        if reference.shape.rank == 5:
            expected = _rotate_group_signal(reference, group or getattr(model_or_layer, "group", None), angle)
            disk = tf.constant(disk_mask(height, width)[None, :, :, None, None], dtype=output.dtype)
            output, expected = output * disk, expected * disk
        elif reference.shape.rank != 2:
            raise ValueError(f"Expected a (B, D) or (B, H, W, |H|, D) output. Received: {reference.shape}")
        scale = max(float(tf.reduce_max(tf.abs(reference))), 1e-30)
        errors[float(angle)] = float(tf.reduce_max(tf.abs(output - expected))) / scale
    return errors


def _rotate_group_signal(signal: tf.Tensor, group: Group | str | None, angle: float) -> tf.Tensor:
    if group is None:
        raise ValueError("A (B, H, W, |H|, D) output needs the group: pass group=... .")
    group = get_group(group)
    steps = angle * group.num_rotations / 360.0
    if abs(steps - round(steps)) > 1e-9:
        raise ValueError(f"{angle} degrees is not a rotation of {group.name!r}.")
    element = group.element_index(int(round(steps)))
    rotated = rotate_image(signal, angle)
    return tf.gather(rotated, group.regular_permutation(element), axis=3)


def relative_group_indices(group: Group, positional_encoding: str) -> np.ndarray:
    """``(|H|, |H|, |H|)`` ints: the group argument of ``L_h[rho]`` for output, query and key element.

    Indexed by output ``h``, query ``h~`` and key ``h^``:

    - ``"ge_vit"`` (GE-ViT eq. 24-25): ``h^-1 (h~ h^^-1) h``;
    - ``"gsa_nets"`` (GSA-Nets' encoding, GE-ViT eq. 21): ``h^-1 (h~^-1 h^) h``.

    ``h`` acts on the relative element by conjugation, which is what the left
    regular action of ``h`` on both points induces on ``h~ h^^-1``
    (``(h^-1 h~)(h^-1 h^)^-1``): the ``"ge_vit"`` index is then invariant
    under ``(h, h~, h^) -> (g h, g h~, g h^)`` for every group. The
    ``"gsa_nets"`` index is invariant only when ``H`` is abelian (``z2``,
    ``p4``, ``mz2``, ...), not for ``p4m``: the error GE-ViT corrects.
    """
    n = group.order
    out = np.empty((n, n, n), dtype=np.int64)
    for h in range(n):
        for query in range(n):
            for key in range(n):
                if positional_encoding == "ge_vit":
                    relative = group.compose(query, int(group.inverse[key]))
                elif positional_encoding == "gsa_nets":
                    relative = group.compose(int(group.inverse[query]), key)
                else:
                    raise ValueError(
                        "positional_encoding must be 'ge_vit' or 'gsa_nets'. "
                        f"Received: positional_encoding={positional_encoding!r}"
                    )
                out[h, query, key] = group.conjugate(h, relative)
    return out


def window_offsets(size: int) -> np.ndarray:
    """``(size^2, 2)`` integer ``(row, col)`` offsets of a centred ``size x size`` window, row-major."""
    if size < 1 or size % 2 == 0:
        raise ValueError(f"The window size must be a positive odd integer. Received: {size}")
    radius = size // 2
    steps = np.arange(-radius, radius + 1)
    rows, cols = np.meshgrid(steps, steps, indexing="ij")
    return np.stack([rows.reshape(-1), cols.reshape(-1)], axis=-1)


def all_offsets(height: int, width: int) -> np.ndarray:
    """``((2H - 1) (2W - 1), 2)`` integer offsets between any two pixels of an ``H x W`` grid, row-major."""
    rows, cols = np.meshgrid(np.arange(1 - height, height), np.arange(1 - width, width), indexing="ij")
    return np.stack([rows.reshape(-1), cols.reshape(-1)], axis=-1)
