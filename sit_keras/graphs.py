"""Shared-weight index construction for graph matrices (SiT paper, section 3).

A graph matrix ``G`` over the ``P = H * W`` vertices of a grid (pixels for
local GSA, patches for global GSA) holds one trainable weight per *class* of
directed edges ``i -> j``; an edge's class depends only on its offset
``(dy, dx) = pos(j) - pos(i)``, through a key that names the symmetry kept:

==============  ===================  ====================================  ===========
symmetry        key of (dy, dx)      symmetries of G (square grid)          paper
==============  ===================  ====================================  ===========
"rotation"      dy^2 + dx^2          all of D4: rotations and reflections   Fig. 2c
"chiral"        orbit of (dy, dx)    the rotations (C4), not reflections    (ours)
                under 90-deg turns
"flip_hv"       (|dy|, |dx|)         flips h and v, rotation by 180         Fig. 2b
"flip_h"        (dy, |dx|)           the left-right flip                    Fig. 2a
"translation"   (dy, dx)             translations (away from the border)   rel. bias
"permutation"   dy = dx = 0          every permutation: G = a I + b 1 1^T   PI attention
==============  ===================  ====================================  ===========

``"chiral"`` is the C4 analogue of ``"rotation"``: offsets a quarter turn
apart share a weight, mirror images (``(1, 2)`` and ``(2, 1)``) do not. It
differs from ``"rotation"`` only for offsets off the axes and diagonals, so a
kernel needs ``k >= 4`` (a grid ``max(H, W) >= 3``) to be chiral; the SiT
stem uses it to tell mirror images apart before any triangle sum
(``SiTEncoder(stem_symmetry="chiral")``).

A grid permutation ``g`` maps ``G`` to itself (``G[g i, g j] = G[i, j]``)
exactly when it keeps every key, which is the proof of Proposition 3.1 for
the graph matrices. For 1-D data (appendix A.1) the grid is ``(1, L)``:
``"shift"`` is ``"translation"`` and ``"shift_flip"`` is ``"flip_hv"``.

**Kernel form** (Listing 4, appendix F.5). Because a class depends only on
the offset, ``G @ x`` over the grid is a depth-wise convolution whose kernel
holds the weights at the offsets. ``kernel_indices(k, symmetry)`` gives the
class of each of the ``k x k`` offsets around the kernel centre; a kernel of
size ``2 * max(H, W) - 1`` reaches every vertex and equals the dense form, a
smaller one zeroes longer edges, and a kernel larger than an attention
window lets the graph reach past it ("extended local attention window").
``grid_indices`` derives the dense ``P x P`` indices *from* the kernel
classes, so the two forms share one weight vector and compute the same
function. Index ``num_classes`` (one past the last class) marks a zero entry.

**Triangles** (eq. 4, 7, 8, Fig. 2c). The paper omits ``rot_grid_to_idx``;
this is our construction. For a directed edge ``i -> j`` with offset
``e = (dy, dx) != 0`` let ``n = gcd(|dy|, |dx|)``. Standing at ``j`` and
facing along ``e``, turn right (clockwise as the image is displayed, rows
growing downwards) and walk to the nearest grid vertex in that direction:
``k = T(i, j) = j + (dx, -dy) / n``. The triangle ``(i, j, k)`` has a right
angle at ``j``, the angle ``atan(n)`` at ``k`` and ``atan(1 / n)`` at ``i``.
Eq. 8 then reads::

    G_rot[i, j] = Theta[angle at j] * S[i, j] + Theta[angle at k] * S[j, k]
                + Theta[angle at i] * S[k, i]

with ``Theta`` shared between equal angles (so ``n = 1`` uses the 45-degree
weight twice). A rotation of a square grid commutes with the right turn, so
``T(g i, g j) = g T(i, j)`` and ``G_rot`` keeps every rotation; a reflection
turns right into left (``T(f i, f j) = f T_left(i, j)``), so the sum reads a
different third vertex and the flip symmetry is broken, as the paper intends.
Two more classes complete the map: ``"self"`` for ``i = j`` (no triangle),
and ``"open"`` for an edge whose ``k`` falls outside the grid; its other two
terms are zero. Whether ``k`` is inside is itself rotation-invariant, so
neither class costs any symmetry.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

import numpy as np

SYMMETRIES: tuple[str, ...] = ("rotation", "chiral", "flip_hv", "flip_h", "translation", "permutation")
SEQUENCE_SYMMETRIES: dict[str, str] = {"shift": "translation", "shift_flip": "flip_hv"}
"""The 1-D symmetries of appendix A.1 and the grid symmetry each is on a ``(1, L)`` grid."""


def resolve_symmetry(symmetry: str) -> str:
    """Returns the grid symmetry for a 2-D or 1-D name; raises ``ValueError`` for others."""
    if symmetry in SYMMETRIES:
        return symmetry
    if symmetry in SEQUENCE_SYMMETRIES:
        return SEQUENCE_SYMMETRIES[symmetry]
    valid = ", ".join(repr(s) for s in (*SYMMETRIES, *SEQUENCE_SYMMETRIES))
    raise ValueError(f"Unknown graph symmetry {symmetry!r}. Expected one of: {valid}.")


def _offset_key(dy2: int, dx2: int, symmetry: str) -> Hashable:
    """The class key of an offset given in half-pixel units (``2 * dy``, ``2 * dx``)."""
    if symmetry == "rotation":
        return dy2 * dy2 + dx2 * dx2
    if symmetry == "chiral":
        # The smallest of the offset's four quarter turns (dy, dx) -> (dx, -dy).
        turns = [(dy2, dx2), (dx2, -dy2), (-dy2, -dx2), (-dx2, dy2)]
        return min(turns)
    if symmetry == "flip_hv":
        return (abs(dy2), abs(dx2))
    if symmetry == "flip_h":
        return (dy2, abs(dx2))
    if symmetry == "translation":
        return (dy2, dx2)
    return dy2 == 0 and dx2 == 0  # permutation: self-loops and all other edges


@functools.cache
def kernel_indices(kernel_size: int, symmetry: str) -> tuple[np.ndarray, int]:
    """Weight-class index of each offset of a ``k x k`` kernel (Listing 4).

    The offsets are measured from the kernel centre; for an even ``k`` the
    centre lies between pixels (used by the strided window-summary
    convolution of appendix F.5, whose kernel is a whole window).

    Args:
      kernel_size: ``k >= 1``.
      symmetry: a name from ``SYMMETRIES`` or ``SEQUENCE_SYMMETRIES``.

    Returns:
      ``(indices, num_classes)``: ``indices`` is a read-only ``(k, k)`` int32
      array with values in ``[0, num_classes)``; classes are numbered by
      their sorted keys, so the centre (for odd ``k``) is class 0 for
      ``"rotation"``, ``"flip_hv"`` and ``"permutation"``.
    """
    symmetry = resolve_symmetry(symmetry)
    if kernel_size < 1:
        raise ValueError(f"kernel_size must be a positive integer. Received: kernel_size={kernel_size}")
    doubled = 2 * np.arange(kernel_size) - (kernel_size - 1)
    keys = [[_offset_key(int(dy), int(dx), symmetry) for dx in doubled] for dy in doubled]
    # `not key` puts the permutation self-loop (True) first, like distance 0.
    order = sorted({key for row in keys for key in row}, key=lambda k: (not k) if isinstance(k, bool) else k)
    number = {key: n for n, key in enumerate(order)}
    indices = np.array([[number[key] for key in row] for row in keys], dtype=np.int32)
    indices.setflags(write=False)
    return indices, len(order)


def full_kernel_size(grid_shape: tuple[int, int]) -> int:
    """The smallest odd kernel that reaches every vertex of the grid from every other."""
    return 2 * max(grid_shape) - 1


def grid_indices(
    grid_shape: tuple[int, int], symmetry: str, kernel_size: int | None = None
) -> tuple[np.ndarray, int]:
    """Dense ``P x P`` graph-matrix indices over an ``H x W`` grid (Fig. 2, Listing 2).

    Entry ``[i, j]`` is the weight class of the edge from vertex ``i`` to
    vertex ``j`` (vertices numbered row-major), taken from
    ``kernel_indices(kernel_size, symmetry)`` at offset ``pos(j) - pos(i)``,
    or ``num_classes`` (a zero entry) where the offset lies outside the kernel.

    Args:
      grid_shape: ``(H, W)``.
      symmetry: a name from ``SYMMETRIES`` or ``SEQUENCE_SYMMETRIES``.
      kernel_size: odd reach of the graph; ``None`` for ``full_kernel_size``.

    Returns:
      ``(indices, num_classes)`` with ``indices`` a read-only ``(P, P)`` int32 array.
    """
    return _grid_indices(_check_grid(grid_shape), resolve_symmetry(symmetry), kernel_size)


@functools.cache
def _grid_indices(
    grid_shape: tuple[int, int], symmetry: str, kernel_size: int | None
) -> tuple[np.ndarray, int]:
    h, w = grid_shape
    full = full_kernel_size((h, w))
    kernel_size = full if kernel_size is None else int(kernel_size)
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer. Received: kernel_size={kernel_size}")
    if symmetry == "permutation" and kernel_size < full:
        raise ValueError(
            "The 'permutation' graph links every pair of vertices; it needs kernel_size=None or "
            f">= {full} for a {h}x{w} grid. Received: kernel_size={kernel_size}"
        )
    kernel, num_classes = kernel_indices(kernel_size, symmetry)
    radius = kernel_size // 2
    rows, cols = np.divmod(np.arange(h * w), w)
    dy = rows[None, :] - rows[:, None]
    dx = cols[None, :] - cols[:, None]
    inside = (np.abs(dy) <= radius) & (np.abs(dx) <= radius)
    indices = np.where(
        inside,
        kernel[np.clip(dy + radius, 0, kernel_size - 1), np.clip(dx + radius, 0, kernel_size - 1)],
        num_classes,
    ).astype(np.int32)
    indices.setflags(write=False)
    return indices, num_classes


def compact_classes(grid_index: np.ndarray, kernel_index: np.ndarray, num_classes: int):
    """Renumbers the classes that ``grid_index`` uses as ``0..m-1``; the others read zero.

    A full-reach kernel is square, so on a ``(1, L)`` sequence or a
    rectangular grid some of its classes link no pair of vertices. In the
    kernel form those entries only ever meet zero padding, so dropping them
    changes nothing and leaves no untrainable weights.

    Returns:
      ``(grid_index, kernel_index, m)`` with index ``m`` meaning zero.
    """
    used = np.unique(grid_index[grid_index < num_classes])
    new_number = np.full(num_classes + 1, len(used), dtype=np.int32)
    new_number[used] = np.arange(len(used), dtype=np.int32)
    return new_number[grid_index], new_number[kernel_index], len(used)


def sequence_indices(
    length: int, symmetry: str = "shift", kernel_size: int | None = None
) -> tuple[np.ndarray, int]:
    """Dense ``L x L`` indices for 1-D data (appendix A.1): ``"shift"`` or ``"shift_flip"``."""
    if symmetry not in SEQUENCE_SYMMETRIES:
        raise ValueError(f"1-D symmetry must be one of {sorted(SEQUENCE_SYMMETRIES)}. Received: {symmetry!r}")
    return grid_indices((1, int(length)), symmetry, kernel_size)


TRIANGLE_SELF = 0
"""Angle class of a self-loop ``i = j`` (no triangle)."""
TRIANGLE_OPEN = 1
"""Angle class of the first term of an edge whose third vertex is outside the grid."""
TRIANGLE_RIGHT = 2
"""Angle class of the right angle at ``j``."""


def triangle_indices(grid_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, int]:
    """The triangulation ``k = T(i, j)`` and angle classes of eq. 4 / eq. 8.

    Args:
      grid_shape: ``(H, W)``.

    Returns:
      ``(third, angles, num_classes)``:

      - ``third``: ``(P, P)`` int32, the vertex ``k`` of each edge's triangle,
        or ``P`` where there is none (self-loop, or ``k`` outside the grid).
      - ``angles``: ``(P, P, 3)`` int32, the weight class for the three terms
        of eq. 8 (angle at ``j``, at ``k``, at ``i``). Classes:
        ``TRIANGLE_SELF``, ``TRIANGLE_OPEN``, ``TRIANGLE_RIGHT``, then one per
        acute angle ``atan(n)`` / ``atan(1/n)``, ``n >= 1`` (45 degrees is
        shared). Missing terms point at the self class; their score is zero.
      - ``num_classes``: number of angle classes.

    The construction is described in the module docstring.
    """
    return _triangle_indices(_check_grid(grid_shape))


@functools.cache
def _triangle_indices(grid_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, int]:
    h, w = grid_shape
    p = h * w
    rows, cols = np.divmod(np.arange(p), w)
    dy = rows[None, :] - rows[:, None]
    dx = cols[None, :] - cols[:, None]
    n = np.gcd(np.abs(dy), np.abs(dx))
    is_edge = n > 0
    n_safe = np.where(is_edge, n, 1)
    # Right turn in (row, col) coordinates: (dy, dx) -> (dx, -dy).
    k_row = rows[None, :] + dx // n_safe
    k_col = cols[None, :] - dy // n_safe
    has_triangle = is_edge & (k_row >= 0) & (k_row < h) & (k_col >= 0) & (k_col < w)
    third = np.where(has_triangle, k_row * w + k_col, p).astype(np.int32)

    # Acute angles atan(m) and atan(1/m) by the fraction they stand for;
    # atan(1) = 45 degrees appears once.
    max_n = max(h, w)
    acute: dict[tuple[int, int], int] = {}
    for m in range(1, max_n):
        for fraction in ((m, 1), (1, m)):
            acute.setdefault(fraction, TRIANGLE_RIGHT + 1 + len(acute))

    def acute_class(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        out = np.full(num.shape, TRIANGLE_SELF, dtype=np.int32)
        for (a, b), c in acute.items():
            out[(num == a) & (den == b)] = c
        return out

    ones = np.ones_like(n)
    angles = np.stack(
        [
            np.where(has_triangle, TRIANGLE_RIGHT, np.where(is_edge, TRIANGLE_OPEN, TRIANGLE_SELF)),
            np.where(has_triangle, acute_class(n, ones), TRIANGLE_SELF),  # at k: tan = |ij| / |jk| = n
            np.where(has_triangle, acute_class(ones, n), TRIANGLE_SELF),  # at i: tan = 1 / n
        ],
        axis=-1,
    ).astype(np.int32)
    for array in (third, angles):
        array.setflags(write=False)
    return third, angles, TRIANGLE_RIGHT + 1 + len(acute)


def triangle_gather_indices(grid_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices into a ``(P * P + 1)`` score vector for the ``S[j, k]`` and ``S[k, i]`` terms.

    Index ``P * P`` stands for a zero score (an appended zero), used where
    the edge has no triangle.
    """
    third, _, _ = triangle_indices(grid_shape)
    p = third.shape[0]
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    missing = third == p
    jk = np.where(missing, p * p, j * p + np.minimum(third, p - 1))
    ki = np.where(missing, p * p, np.minimum(third, p - 1) * p + i)
    return jk.astype(np.int32), ki.astype(np.int32)


def window_indices(grid_shape: tuple[int, int], window: int, stride: int) -> np.ndarray:
    """Pixel indices of the attention windows of local GSA.

    Two layouts keep every symmetry of a square image:

    - ``stride == window``: windows tile the image (``H`` and ``W`` must be
      multiples of ``window``); a 90-degree rotation permutes the windows and
      rotates each one's content.
    - ``stride == 1`` with an odd ``window``: one window centred on every
      pixel, zero-padded at the border (appendix F.1, MiniGrid).

    Args:
      grid_shape: ``(H, W)`` of the pixel map.
      window: side of a square window.
      stride: ``window`` or ``1``.

    Returns:
      ``(n_h, n_w, window * window)`` int32 indices into the row-major pixels
      of the map, with ``H * W`` standing for a zero pixel (padding).
    """
    return _window_indices(_check_grid(grid_shape), int(window), int(stride))


@functools.cache
def _window_indices(grid_shape: tuple[int, int], window: int, stride: int) -> np.ndarray:
    h, w = grid_shape
    if window < 1:
        raise ValueError(f"window must be a positive integer. Received: window={window}")
    if stride == window:
        if h % window or w % window:
            raise ValueError(
                f"Windows of {window}x{window} pixels must tile the {h}x{w} map: its height and width "
                f"must be multiples of {window}."
            )
        tops = np.arange(0, h, window)
        lefts = np.arange(0, w, window)
        offsets = np.arange(window)
    elif stride == 1:
        if window % 2 == 0:
            raise ValueError(f"Sliding windows (stride 1) must have an odd size. Received: window={window}")
        tops, lefts = np.arange(h), np.arange(w)
        offsets = np.arange(window) - window // 2
    else:
        raise ValueError(f"stride must be 1 or equal to window={window}. Received: stride={stride}")
    r = tops[:, None, None, None] + offsets[None, None, :, None]
    c = lefts[None, :, None, None] + offsets[None, None, None, :]
    r, c = np.broadcast_arrays(r, c)
    inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
    flat = np.where(inside, r * w + c, h * w)
    out = flat.reshape(len(tops), len(lefts), window * window).astype(np.int32)
    out.setflags(write=False)
    return out


def grid_permutation(grid_shape: tuple[int, int], transform: str) -> np.ndarray:
    """The vertex permutation ``v -> g(v)`` of a D4 element on a row-major grid.

    ``transform`` is one of ``"rot90"``, ``"rot180"``, ``"rot270"`` (counter-
    clockwise as displayed), ``"flip_h"``, ``"flip_v"``, ``"transpose"``,
    ``"anti_transpose"``; rotations and diagonal reflections need a square
    grid. Consistent with ``sit_keras.testing``: transforming an image moves
    the pixel at vertex ``v`` to vertex ``g(v)``.
    """
    h, w = _check_grid(grid_shape)
    r, c = np.divmod(np.arange(h * w), w)
    moves = {
        "flip_h": (r, w - 1 - c),
        "flip_v": (h - 1 - r, c),
        "rot180": (h - 1 - r, w - 1 - c),
        "rot90": (w - 1 - c, r),
        "rot270": (c, h - 1 - r),
        "transpose": (c, r),
        "anti_transpose": (w - 1 - c, h - 1 - r),
    }
    if transform not in moves:
        raise ValueError(f"Unknown grid transform {transform!r}. Expected one of: {', '.join(moves)}.")
    if transform in ("rot90", "rot270", "transpose", "anti_transpose") and h != w:
        raise ValueError(f"{transform} maps only a square grid to itself. Received: grid_shape={(h, w)}")
    new_r, new_c = moves[transform]
    return (new_r * w + new_c).astype(np.int64)


def quarter_turn_orbits(grid_shape: tuple[int, int], token_index: np.ndarray, offset: int) -> np.ndarray:
    """The quarter turn's orbits of a square grid's tokens, where a token graph's classes keep the turn.

    ``token_index (T, T)``: the class of each token pair, the grid's vertices
    (row-major) from token ``offset`` on (a class token before them). Returns
    ``(O, 4)`` tokens, each row ``t, rho(t), rho^2(t), rho^3(t)`` for the
    quarter turn ``rho``, when every graph built from these classes is C4-invariant
    (``index[rho i, rho j] == index[i, j]``), the tokens it fixes (the class
    token, an odd grid's centre) left out; ``(0, 4)`` for a grid that is not
    square or classes that are not invariant. The native kernels mix such
    graphs in the quarter turn's Fourier basis (``native/rotation_spectra.h``).
    """
    h, w = _check_grid(grid_shape)
    none = np.zeros((0, 4), np.int64)
    token_index = np.asarray(token_index)
    if h != w or token_index.shape != (h * w + offset,) * 2:
        return none
    turn = np.arange(h * w + offset)
    turn[offset:] = offset + grid_permutation(grid_shape, "rot90")
    if not np.array_equal(token_index[np.ix_(turn, turn)], token_index):
        return none
    orbits, seen = [], np.zeros(len(turn), bool)
    for token in range(offset, len(turn)):
        if seen[token] or turn[token] == token:
            continue
        orbit = [token]
        while len(orbit) < 4:
            orbit.append(int(turn[orbit[-1]]))
        seen[orbit] = True
        orbits.append(orbit)
    return np.array(orbits, np.int64).reshape(-1, 4)


def _check_grid(grid_shape: tuple[int, int]) -> tuple[int, int]:
    try:
        h, w = (int(d) for d in grid_shape)
    except (TypeError, ValueError):
        raise ValueError(f"grid_shape must be (H, W). Received: grid_shape={grid_shape!r}") from None
    if h < 1 or w < 1:
        raise ValueError(
            f"grid_shape must be (H, W) with positive sizes. Received: grid_shape={grid_shape!r}"
        )
    return h, w
