"""Tests of ``sit_keras.graphs``: the shared-weight indices behind every graph matrix.

What this file proves, on exact integer index arrays (no floating point):

- ``grid_indices`` keeps exactly the grid symmetries that the module
  docstring's table promises for each symmetry name, and breaks at least one
  D4 element outside that set (hypothesis over square grids of side 2..6 and
  non-square grids);
- ``kernel_indices`` (the convolution form) has the same symmetries, the
  documented class counts, and agrees entry by entry with the dense form;
- the triangulation ``k = T(i, j)`` of eq. 4 / 8 has a right angle at ``j``,
  turns right, commutes with rotations and does *not* commute with
  reflections;
- ``window_indices`` tiles or centres windows as documented, and every
  invalid argument raises a ``ValueError`` that names the valid choices;
- ``grid_permutation`` moves vertices exactly like the image actions of
  ``sit_keras.testing`` (so the index tests and the layer tests speak about
  the same group elements);
- ``quarter_turn_orbits`` cuts the tokens of a square grid (after a class
  token or not) into the quarter turn's orbits, each in rotation order, and
  leaves out only the tokens it fixes, exactly when the classes keep the quarter
  turn; otherwise, and on a non-square grid, it gives none.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from sit_keras import graphs, testing

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

D4 = ("rot90", "rot180", "rot270", "flip_h", "flip_v", "transpose", "anti_transpose")
SQUARE_ONLY = ("rot90", "rot270", "transpose", "anti_transpose")
RECTANGLE = ("rot180", "flip_h", "flip_v")  # the D4 elements that map any H x W grid to itself

# The module docstring's table: the D4 elements each symmetry keeps on a square grid.
PROMISED: dict[str, frozenset[str]] = {
    "rotation": frozenset(D4),
    "chiral": frozenset({"rot90", "rot180", "rot270"}),
    "flip_hv": frozenset({"flip_h", "flip_v", "rot180"}),
    "flip_h": frozenset({"flip_h"}),
    "translation": frozenset(),
    "permutation": frozenset(D4),
}


def _promised(symmetry: str, kernel_size: int) -> frozenset[str]:
    """``PROMISED``, except that a chiral kernel below 4 x 4 has no mirror-image offsets: all of D4."""
    return frozenset(D4) if symmetry == "chiral" and kernel_size < 4 else PROMISED[symmetry]


sides = st.integers(min_value=2, max_value=6)
grids = st.tuples(st.integers(min_value=1, max_value=6), st.integers(min_value=1, max_value=6))
odd_kernels = st.integers(min_value=0, max_value=6).map(lambda r: 2 * r + 1)
kernels = st.integers(min_value=1, max_value=12)


def _keeps(indices: np.ndarray, g: np.ndarray) -> bool:
    """``G[g i, g j] == G[i, j]`` for every edge: the graph matrix is unchanged by ``g``."""
    return bool(np.array_equal(indices[np.ix_(g, g)], indices))


def _positions(grid_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    h, w = grid_shape
    return np.divmod(np.arange(h * w), w)


# -- the permutations themselves -----------------------------------------------
@pytest.mark.parametrize("name", D4)
def test_grid_permutation_moves_vertices_like_the_image_actions(name: str) -> None:
    # Transforming an image moves the pixel at vertex v to vertex g(v), i.e.
    # the transformed image at position p holds the old pixel argsort(g)[p].
    n = 5
    g = graphs.grid_permutation((n, n), name)
    assert sorted(g) == list(range(n * n))
    image = tf.reshape(tf.range(n * n, dtype=tf.float64), [1, n, n, 1])
    np.testing.assert_array_equal(
        testing.permute_grid(image, np.argsort(g)).numpy(), testing.DIHEDRAL[name](image).numpy()
    )


@pytest.mark.parametrize("name", RECTANGLE)
def test_grid_permutation_on_rectangles_matches_the_image_actions(name: str) -> None:
    h, w = 3, 5
    g = graphs.grid_permutation((h, w), name)
    image = tf.reshape(tf.range(h * w, dtype=tf.float64), [1, h, w, 1])
    np.testing.assert_array_equal(
        testing.permute_grid(image, np.argsort(g)).numpy(), testing.DIHEDRAL[name](image).numpy()
    )


@pytest.mark.parametrize("name", SQUARE_ONLY)
def test_grid_permutation_rejects_square_only_elements_on_rectangles(name: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{name} maps only a square grid to itself")):
        graphs.grid_permutation((3, 4), name)


def test_grid_permutation_rejects_unknown_transform() -> None:
    with pytest.raises(ValueError, match="Unknown grid transform 'shear'. Expected one of: flip_h, flip_v"):
        graphs.grid_permutation((3, 3), "shear")


# -- dense graph matrices: which symmetries each one keeps -------------------------
@pytest.mark.parametrize("symmetry", graphs.SYMMETRIES)
@given(n=sides)
def test_grid_indices_keep_exactly_the_promised_d4_elements(symmetry: str, n: int) -> None:
    indices, num_classes = graphs.grid_indices((n, n), symmetry)
    assert indices.shape == (n * n, n * n) and indices.dtype == np.int32
    assert 0 <= indices.min() and indices.max() < num_classes  # full kernel: no zero entries
    kept = {name for name in D4 if _keeps(indices, graphs.grid_permutation((n, n), name))}
    assert kept == _promised(symmetry, graphs.full_kernel_size((n, n)))


@given(n=sides)
def test_flip_hv_graph_breaks_quarter_turns_and_diagonal_flips(n: int) -> None:
    indices, _ = graphs.grid_indices((n, n), "flip_hv")
    for name in SQUARE_ONLY:
        assert not _keeps(indices, graphs.grid_permutation((n, n), name)), name


@given(n=sides)
def test_flip_h_graph_keeps_only_the_left_right_flip(n: int) -> None:
    indices, _ = graphs.grid_indices((n, n), "flip_h")
    assert _keeps(indices, graphs.grid_permutation((n, n), "flip_h"))
    for name in set(D4) - {"flip_h"}:
        assert not _keeps(indices, graphs.grid_permutation((n, n), name)), name


@given(grid=grids, data=st.data())
def test_permutation_graph_keeps_every_permutation(grid: tuple[int, int], data: st.DataObject) -> None:
    indices, num_classes = graphs.grid_indices(grid, "permutation")
    p = grid[0] * grid[1]
    assert num_classes == (2 if p > 1 else 1)
    np.testing.assert_array_equal(indices, np.where(np.eye(p, dtype=bool), 0, 1))  # G = a I + b 1 1^T
    g = np.array(data.draw(st.permutations(range(p))))
    assert _keeps(indices, g)


@given(grid=grids)
def test_translation_graph_is_unchanged_by_every_in_grid_shift(grid: tuple[int, int]) -> None:
    h, w = grid
    indices, num_classes = graphs.grid_indices(grid, "translation")
    # One class per offset of the full (square) kernel; the grid uses the (2H - 1) x (2W - 1) it reaches.
    assert num_classes == graphs.full_kernel_size(grid) ** 2
    assert len(np.unique(indices)) == (2 * h - 1) * (2 * w - 1)
    rows, cols = _positions(grid)
    for ty in range(-(h - 1), h):
        for tx in range(-(w - 1), w):
            # Vertices whose shifted position stays on the grid.
            ok = (rows + ty >= 0) & (rows + ty < h) & (cols + tx >= 0) & (cols + tx < w)
            src = np.flatnonzero(ok)
            dst = (rows[src] + ty) * w + (cols[src] + tx)
            np.testing.assert_array_equal(indices[np.ix_(dst, dst)], indices[np.ix_(src, src)])


@given(grid=grids)
def test_translation_graph_has_no_flip_symmetry(grid: tuple[int, int]) -> None:
    h, w = grid
    indices, _ = graphs.grid_indices(grid, "translation")
    for name, breaks in (("flip_h", w >= 2), ("flip_v", h >= 2), ("rot180", h * w >= 2)):
        assert _keeps(indices, graphs.grid_permutation(grid, name)) is not breaks, name


@pytest.mark.parametrize(
    "symmetry, kept",
    [
        ("rotation", {"flip_h", "flip_v", "rot180"}),
        ("flip_hv", {"flip_h", "flip_v", "rot180"}),
        ("flip_h", {"flip_h"}),
    ],
)
@given(h=st.integers(min_value=2, max_value=6), w=st.integers(min_value=2, max_value=6))
def test_flip_symmetries_hold_on_non_square_grids(symmetry: str, kept: set[str], h: int, w: int) -> None:
    indices, _ = graphs.grid_indices((h, w), symmetry)
    assert {name for name in RECTANGLE if _keeps(indices, graphs.grid_permutation((h, w), name))} == kept


# -- kernel form -------------------------------------------------------------------
KERNEL_SYMMETRIES = {
    # np operations on a (k, k) array, by the D4 element they stand for.
    "rot90": lambda a: np.rot90(a, 1),
    "rot180": lambda a: np.rot90(a, 2),
    "rot270": lambda a: np.rot90(a, 3),
    "flip_h": lambda a: np.flip(a, axis=1),
    "flip_v": lambda a: np.flip(a, axis=0),
    "transpose": lambda a: a.T,
    "anti_transpose": lambda a: np.rot90(a, 2).T,
}


@pytest.mark.parametrize("symmetry", graphs.SYMMETRIES)
@given(k=kernels)
def test_kernel_indices_keep_the_promised_d4_elements(symmetry: str, k: int) -> None:
    kernel, num_classes = graphs.kernel_indices(k, symmetry)
    assert kernel.shape == (k, k) and kernel.dtype == np.int32 and not kernel.flags.writeable
    assert sorted(np.unique(kernel)) == list(range(num_classes))  # every class is used
    kept = {name for name, op in KERNEL_SYMMETRIES.items() if np.array_equal(op(kernel), kernel)}
    assert kept >= _promised(symmetry, k)
    if k >= 3:  # a 2 x 2 kernel has too few offsets to tell flip_hv or permutation apart from D4
        assert kept == _promised(symmetry, k)


@pytest.mark.parametrize(
    "k, symmetry, num_classes",
    [
        (1, "rotation", 1),
        (2, "rotation", 1),  # four offsets (+-1/2, +-1/2), one distance
        (3, "rotation", 3),  # distances^2 0, 1, 2
        (4, "rotation", 3),  # half-pixel offsets: (2 dy)^2 + (2 dx)^2 in {2, 10, 18}
        (5, "rotation", 6),  # distances^2 0, 1, 2, 4, 5, 8
        (7, "rotation", 10),
        (11, "rotation", 20),  # 21 pairs 0 <= |dy| <= |dx| <= 5, but 0^2 + 5^2 = 3^2 + 4^2
        (3, "chiral", 3),  # as "rotation": no offset on a 3x3 kernel has a distinct mirror image
        (4, "chiral", 4),  # (1, 3) and (3, 1) in half pixels are mirror images, not quarter turns
        (5, "chiral", 7),  # "rotation"'s 6, with distance^2 5 split into (1, 2) and (2, 1)
        (3, "flip_hv", 4),
        (5, "flip_hv", 9),
        (3, "flip_h", 6),
        (5, "flip_h", 15),
        (3, "translation", 9),
        (4, "translation", 16),
        (3, "permutation", 2),
        (4, "permutation", 1),  # no centre pixel: every offset is an edge
    ],
)
def test_kernel_class_counts(k: int, symmetry: str, num_classes: int) -> None:
    assert graphs.kernel_indices(k, symmetry)[1] == num_classes


def test_rotation_kernel_classes_are_the_sorted_squared_distances() -> None:
    kernel, num_classes = graphs.kernel_indices(5, "rotation")
    dy, dx = np.meshgrid(np.arange(5) - 2, np.arange(5) - 2, indexing="ij")
    distance2 = dy**2 + dx**2
    assert num_classes == 6
    for c, d2 in enumerate([0, 1, 2, 4, 5, 8]):
        np.testing.assert_array_equal(kernel == c, distance2 == d2)


@pytest.mark.parametrize("symmetry", ["rotation", "flip_hv", "permutation"])
@given(k=odd_kernels)
def test_odd_kernel_centre_is_class_zero(symmetry: str, k: int) -> None:
    # (For "flip_h" the sorted keys (dy, |dx|) start at dy = -(k // 2), so its
    # centre is not class 0 although kernel_indices' docstring says so.)
    kernel, _ = graphs.kernel_indices(k, symmetry)
    assert kernel[k // 2, k // 2] == 0


@pytest.mark.parametrize("symmetry", graphs.SYMMETRIES)
@given(k=odd_kernels)
def test_odd_kernel_centre_is_a_class_of_its_own(symmetry: str, k: int) -> None:
    kernel, _ = graphs.kernel_indices(k, symmetry)
    centre = kernel[k // 2, k // 2]
    assert np.count_nonzero(kernel == centre) == 1  # self-loops share no weight with edges


@given(k=kernels)
def test_translation_kernel_has_one_class_per_offset_in_row_major_order(k: int) -> None:
    kernel, num_classes = graphs.kernel_indices(k, "translation")
    assert num_classes == k * k
    np.testing.assert_array_equal(kernel, np.arange(k * k).reshape(k, k))


@pytest.mark.parametrize("symmetry", graphs.SYMMETRIES)
@given(grid=grids, k=st.one_of(st.none(), odd_kernels))
def test_dense_indices_read_the_kernel_at_each_offset(
    symmetry: str, grid: tuple[int, int], k: int | None
) -> None:
    full = graphs.full_kernel_size(grid)
    if symmetry == "permutation" and k is not None and k < full:
        with pytest.raises(ValueError, match=f"needs kernel_size=None or >= {full}"):
            graphs.grid_indices(grid, symmetry, k)
        return
    indices, num_classes = graphs.grid_indices(grid, symmetry, k)
    k = full if k is None else k
    kernel, kernel_classes = graphs.kernel_indices(k, symmetry)
    assert num_classes == kernel_classes
    rows, cols = _positions(grid)
    r = k // 2
    for i in range(len(rows)):
        for j in range(len(rows)):
            dy, dx = rows[j] - rows[i], cols[j] - cols[i]
            inside = abs(dy) <= r and abs(dx) <= r
            assert indices[i, j] == (kernel[dy + r, dx + r] if inside else num_classes), (i, j)


def test_grid_indices_reject_even_or_non_positive_kernels() -> None:
    for k in (0, 2, 4):
        with pytest.raises(ValueError, match="kernel_size must be a positive odd integer"):
            graphs.grid_indices((3, 3), "rotation", k)
    with pytest.raises(ValueError, match="kernel_size must be a positive integer"):
        graphs.kernel_indices(0, "rotation")


@pytest.mark.parametrize("bad", [(3,), (3, 0), "ab", None])
def test_bad_grid_shape_raises(bad: object) -> None:
    with pytest.raises(ValueError, match=r"grid_shape must be \(H, W\)"):
        graphs.grid_indices(bad, "rotation")  # type: ignore[arg-type]


def test_unknown_symmetry_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="Unknown graph symmetry 'hexagonal'") as info:
        graphs.grid_indices((3, 3), "hexagonal")
    for name in (*graphs.SYMMETRIES, *graphs.SEQUENCE_SYMMETRIES):
        assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match="Unknown graph symmetry"):
        graphs.kernel_indices(3, "hexagonal")


# -- 1-D sequences (appendix A.1) ------------------------------------------------
@given(length=st.integers(min_value=1, max_value=10))
def test_shift_graph_is_toeplitz(length: int) -> None:
    indices, num_classes = graphs.sequence_indices(length, "shift")
    assert indices.shape == (length, length)
    # The classes come from the square (2L - 1) x (2L - 1) kernel of the (1, L)
    # grid, so num_classes also counts offsets a sequence never has.
    assert indices.max() < num_classes
    i, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    # One class per offset j - i, different offsets never share.
    for offset in range(-(length - 1), length):
        assert len(np.unique(indices[j - i == offset])) == 1
    assert len(np.unique(indices)) == 2 * length - 1
    if length >= 2:
        assert not np.array_equal(indices, indices.T)  # a shift graph tells left from right


@given(length=st.integers(min_value=1, max_value=10))
def test_shift_flip_graph_is_toeplitz_symmetric_and_reversal_invariant(length: int) -> None:
    indices, num_classes = graphs.sequence_indices(length, "shift_flip")
    shift, _ = graphs.sequence_indices(length, "shift")
    assert indices.max() < num_classes
    assert len(np.unique(indices)) == length  # one class per distance |j - i|
    # Toeplitz: it merges the shift graph's classes, never splits them.
    for c in np.unique(shift):
        assert len(np.unique(indices[shift == c])) == 1
    np.testing.assert_array_equal(indices, indices.T)
    np.testing.assert_array_equal(indices[::-1, ::-1], indices)


def test_sequence_indices_reject_2d_symmetries() -> None:
    with pytest.raises(ValueError, match=r"1-D symmetry must be one of \['shift', 'shift_flip'\]"):
        graphs.sequence_indices(5, "rotation")


def test_sequence_names_resolve_to_grid_symmetries() -> None:
    assert graphs.resolve_symmetry("shift") == "translation"
    assert graphs.resolve_symmetry("shift_flip") == "flip_hv"
    np.testing.assert_array_equal(
        graphs.sequence_indices(6, "shift_flip", 3)[0], graphs.grid_indices((1, 6), "flip_hv", 3)[0]
    )


# -- triangles (eq. 4, 7, 8) ---------------------------------------------------------
def _extended(g: np.ndarray) -> np.ndarray:
    """``g`` on vertices plus the marker ``P`` ("no third vertex"), which it keeps."""
    return np.append(g, len(g))


@given(grid=grids)
def test_triangles_have_a_right_angle_at_j_and_turn_right(grid: tuple[int, int]) -> None:
    h, w = grid
    p = h * w
    third, angles, num_classes = graphs.triangle_indices(grid)
    assert third.shape == (p, p) and angles.shape == (p, p, 3)
    assert 0 <= angles.min() and angles.max() < num_classes
    rows, cols = _positions(grid)
    for i in range(p):
        for j in range(p):
            e = np.array([rows[j] - rows[i], cols[j] - cols[i]])  # (row, col) offset i -> j
            if i == j:
                assert third[i, j] == p
                assert list(angles[i, j]) == [graphs.TRIANGLE_SELF] * 3
                continue
            n = np.gcd(abs(e[0]), abs(e[1]))
            # Expected third vertex: one primitive step to the right of e, from j.
            k_row, k_col = rows[j] + e[1] // n, cols[j] - e[0] // n
            if not (0 <= k_row < h and 0 <= k_col < w):
                assert third[i, j] == p
                assert list(angles[i, j]) == [
                    graphs.TRIANGLE_OPEN,
                    graphs.TRIANGLE_SELF,
                    graphs.TRIANGLE_SELF,
                ]
                continue
            k = third[i, j]
            assert k == k_row * w + k_col
            f = np.array([rows[k] - rows[j], cols[k] - cols[j]])  # j -> k
            assert np.dot(-e, f) == 0  # right angle at j: (i - j) . (k - j) = 0
            assert np.gcd(abs(f[0]), abs(f[1])) == 1  # the nearest vertex in that direction
            # Orientation: in (row, col) coordinates the cross product
            # e_row * f_col - e_col * f_row = -(dy^2 + dx^2) / n is negative,
            # which with rows growing downwards is a clockwise (right) turn as displayed.
            assert e[0] * f[1] - e[1] * f[0] == -(e @ e) // n < 0
            assert angles[i, j, 0] == graphs.TRIANGLE_RIGHT
            assert graphs.TRIANGLE_RIGHT < angles[i, j, 1] < num_classes
            assert graphs.TRIANGLE_RIGHT < angles[i, j, 2] < num_classes
            # The two acute angles are atan(n) and atan(1 / n): equal (45 degrees) only for n = 1.
            assert (angles[i, j, 1] == angles[i, j, 2]) == (n == 1)


def test_triangle_example_on_a_3x3_grid() -> None:
    # Edge (0, 0) -> (0, 1) points right; turning right means facing down: k = (1, 1).
    third, angles, _ = graphs.triangle_indices((3, 3))
    assert third[0, 1] == 4
    # Edge (0, 0) -> (1, 1): n = 1, right turn of (1, 1) is (1, -1): k = (2, 0).
    assert third[0, 4] == 6
    # Edge (0, 0) -> (0, 2): n = 2, the primitive step right is (1, 0): k = (1, 2).
    assert third[0, 2] == 5
    assert angles[0, 2, 1] != angles[0, 2, 2]
    # Edge (0, 1) -> (0, 0) points left; turning right means facing up: outside.
    assert third[1, 0] == 9 and angles[1, 0, 0] == graphs.TRIANGLE_OPEN


@given(n=sides)
def test_triangles_commute_with_rotations(n: int) -> None:
    third, angles, _ = graphs.triangle_indices((n, n))
    for name in ("rot90", "rot180", "rot270"):
        g = graphs.grid_permutation((n, n), name)
        np.testing.assert_array_equal(third[np.ix_(g, g)], _extended(g)[third], err_msg=name)
        np.testing.assert_array_equal(angles[np.ix_(g, g)], angles, err_msg=name)


@given(n=sides)
def test_triangles_do_not_commute_with_reflections(n: int) -> None:
    third, angles, _ = graphs.triangle_indices((n, n))
    for name in ("flip_h", "flip_v", "transpose", "anti_transpose"):
        g = graphs.grid_permutation((n, n), name)
        assert not np.array_equal(third[np.ix_(g, g)], _extended(g)[third]), name
        # A reflection turns right into left: an edge whose right triangle is
        # closed becomes one whose right triangle is open, so even the angle
        # classes (which eq. 8 multiplies with) are moved.
        assert not np.array_equal(angles[np.ix_(g, g)], angles), name


@given(h=st.integers(min_value=1, max_value=6), w=st.integers(min_value=1, max_value=6))
def test_triangles_commute_with_the_half_turn_of_a_rectangle(h: int, w: int) -> None:
    third, angles, _ = graphs.triangle_indices((h, w))
    g = graphs.grid_permutation((h, w), "rot180")
    np.testing.assert_array_equal(third[np.ix_(g, g)], _extended(g)[third])
    np.testing.assert_array_equal(angles[np.ix_(g, g)], angles)


@given(grid=grids)
def test_triangle_gather_indices_point_at_jk_and_ki(grid: tuple[int, int]) -> None:
    third, _, _ = graphs.triangle_indices(grid)
    jk, ki = graphs.triangle_gather_indices(grid)
    p = third.shape[0]
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    closed = third < p
    np.testing.assert_array_equal(jk[closed], (j * p + third)[closed])
    np.testing.assert_array_equal(ki[closed], (third * p + i)[closed])
    assert np.all(jk[~closed] == p * p) and np.all(ki[~closed] == p * p)


# -- attention windows -----------------------------------------------------------
@given(
    window=st.integers(min_value=1, max_value=4),
    n_h=st.integers(min_value=1, max_value=3),
    n_w=st.integers(min_value=1, max_value=3),
)
def test_tiling_windows_partition_the_pixels(window: int, n_h: int, n_w: int) -> None:
    h, w = n_h * window, n_w * window
    windows = graphs.window_indices((h, w), window, window)
    assert windows.shape == (n_h, n_w, window * window)
    np.testing.assert_array_equal(np.sort(windows.reshape(-1)), np.arange(h * w))  # each pixel once
    rows, cols = np.divmod(windows, w)
    for a in range(n_h):
        for b in range(n_w):
            assert np.all(rows[a, b] // window == a) and np.all(cols[a, b] // window == b)
            # Row-major inside the window, so the window's own grid is the layer's grid.
            np.testing.assert_array_equal(
                rows[a, b].reshape(window, window)[:, 0], a * window + np.arange(window)
            )


@given(grid=grids, radius=st.integers(min_value=0, max_value=3))
def test_sliding_windows_are_centred_and_zero_padded(grid: tuple[int, int], radius: int) -> None:
    h, w = grid
    window = 2 * radius + 1
    windows = graphs.window_indices(grid, window, 1)
    assert windows.shape == (h, w, window * window)
    centre = window * window // 2
    np.testing.assert_array_equal(windows[..., centre], np.arange(h * w).reshape(h, w))
    offsets = np.arange(window) - radius
    for r in range(h):
        for c in range(w):
            for n, (dy, dx) in enumerate((dy, dx) for dy in offsets for dx in offsets):
                inside = 0 <= r + dy < h and 0 <= c + dx < w
                assert windows[r, c, n] == ((r + dy) * w + c + dx if inside else h * w)


@pytest.mark.parametrize(
    "grid, window, stride, message",
    [
        (
            (6, 6),
            4,
            4,
            "Windows of 4x4 pixels must tile the 6x6 map: its height and width must be multiples of 4",
        ),
        ((8, 6), 4, 4, "must be multiples of 4"),
        ((8, 8), 4, 1, "Sliding windows (stride 1) must have an odd size. Received: window=4"),
        ((8, 8), 4, 2, "stride must be 1 or equal to window=4. Received: stride=2"),
        ((8, 8), 0, 0, "window must be a positive integer"),
    ],
)
def test_invalid_windows_raise(grid: tuple[int, int], window: int, stride: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        graphs.window_indices(grid, window, stride)


def test_index_arrays_are_read_only() -> None:
    arrays = [
        graphs.grid_indices((3, 3), "rotation")[0],
        graphs.kernel_indices(3, "rotation")[0],
        *graphs.triangle_indices((3, 3))[:2],
        graphs.window_indices((4, 4), 2, 2),
    ]
    for array in arrays:
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0


# -- the quarter turn's orbits (the native kernels' spectral mixing) -------------
@pytest.mark.parametrize("symmetry", graphs.SYMMETRIES)
@given(n=sides, offset=st.integers(min_value=0, max_value=1))
def test_quarter_turn_orbits_are_given_exactly_where_the_classes_keep_the_quarter_turn(
    symmetry: str, n: int, offset: int
) -> None:
    grid_index, _ = graphs.grid_indices((n, n), symmetry)
    index = np.zeros((n * n + offset,) * 2, np.int32)  # a class token's row and column: a class of their own
    index[offset:, offset:] = grid_index + 1
    orbits = graphs.quarter_turn_orbits((n, n), index, offset)
    assert orbits.ndim == 2 and orbits.shape[1] == 4
    if "rot90" not in _promised(symmetry, graphs.full_kernel_size((n, n))):
        assert orbits.shape == (0, 4)
        return
    turn = offset + graphs.grid_permutation((n, n), "rot90")
    for orbit in orbits:
        assert [turn[t - offset] for t in orbit] == [*orbit[1:], orbit[0]]  # rotation order, closing up
    fixed = sorted(set(range(n * n + offset)) - set(orbits.reshape(-1).tolist()))
    assert orbits.size == len(set(orbits.reshape(-1).tolist()))  # disjoint
    assert fixed == [
        *range(offset),
        *([offset + n * n // 2] if n % 2 else []),
    ]  # the class token, an odd centre


def test_quarter_turn_orbits_need_a_square_grid() -> None:
    grid_index, _ = graphs.grid_indices((3, 4), "permutation")
    assert graphs.quarter_turn_orbits((3, 4), grid_index, 0).shape == (0, 4)
