"""Tests of ``sit_keras.groups``: the stabilisers of GSA-Nets' plane groups and their actions.

What this file proves:

- every named group satisfies the group axioms (closure, identity,
  inverses, associativity) with the expected order, and ``p4m`` / ``p8m``
  are not abelian while the rotation groups are;
- the 2x2 matrices are a homomorphism into O(2) (exactly integer for the
  grid-exact groups), so the action on relative positions is a group
  action, and the grid-exact groups permute window offsets exactly;
- on images and on signals over the group, ``L_g`` agrees with
  ``sit_keras.testing`` (``rot90``, ``flip_h``), is a homomorphism
  (``L_g L_k = L_gk``) and refuses what is not a grid symmetry;
- the relative group element of GE-ViT's encoding (eq. 24-25) is invariant
  under the group for every group, and that of GSA-Nets (GE-ViT eq. 21)
  only for the abelian ones;
- bilinear rotation is the exact permutation at multiples of 90 degrees.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from sit_keras import groups, testing
from sit_keras.groups import GROUP_NAMES, Z2, M, Rn, RnM, get_group

ORDERS = {"z2": 1, "p4": 4, "p8": 8, "p12": 12, "p16": 16, "mz2": 2, "p4m": 8, "p8m": 16}
GRID_EXACT = ("z2", "p4", "mz2", "p4m")


def _random(shape: tuple[int, ...], seed: int = 0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).normal(size=shape))


# -- the abstract groups ---------------------------------------------------------------
@pytest.mark.parametrize("name", GROUP_NAMES)
def test_group_axioms(name: str) -> None:
    group = get_group(name)
    n = group.order
    table = group.cayley
    assert n == ORDERS[name] and table.shape == (n, n) and len(group.elements) == n
    # Closure: every product is an element, and each row and column is a permutation.
    assert table.min() >= 0 and table.max() < n
    for row, column in zip(table, table.T, strict=True):
        assert sorted(row) == list(range(n)) and sorted(column) == list(range(n))
    # Identity.
    np.testing.assert_array_equal(table[group.identity], np.arange(n))
    np.testing.assert_array_equal(table[:, group.identity], np.arange(n))
    # Inverses on both sides.
    for g in range(n):
        assert table[g, group.inverse[g]] == group.identity == table[group.inverse[g], g]
    # Associativity for every triple.
    a, b, c = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(table[table[a, b], c], table[a, table[b, c]])


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_only_the_groups_with_mirrors_and_rotations_are_not_abelian(name: str) -> None:
    group = get_group(name)
    abelian = np.array_equal(group.cayley, group.cayley.T)
    assert abelian == (not (group.mirror and group.num_rotations > 2))
    for h, r in itertools.product(range(group.order), repeat=2):
        conjugated = group.conjugate(h, r)
        assert group.compose(h, conjugated) == group.compose(r, h)  # h (h^-1 r h) = r h


def test_classes_names_and_unknown_names() -> None:
    assert type(get_group("z2")) is Z2 and type(get_group("mz2")) is M
    assert type(get_group("p12")) is Rn and type(get_group("p8m")) is RnM
    assert [get_group(n).name for n in GROUP_NAMES] == list(GROUP_NAMES)
    assert get_group(RnM(4)) == get_group("p4m") and get_group("p4") != get_group("p4m")
    with pytest.raises(ValueError, match="Unknown group 'p5'. Expected one of: z2, p4, p8, p12, p16, mz2"):
        get_group("p5")
    with pytest.raises(ValueError, match="num_rotations must be positive"):
        Rn(0)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_grid_exactness(name: str) -> None:
    group = get_group(name)
    assert group.is_grid_exact == (name in GRID_EXACT)
    integral = np.array_equal(group.matrices, np.rint(group.matrices))
    assert integral == group.is_grid_exact


# -- the action on the plane -------------------------------------------------------------
@pytest.mark.parametrize("name", GROUP_NAMES)
def test_matrices_are_an_orthogonal_homomorphism(name: str) -> None:
    group = get_group(name)
    mats = group.matrices
    np.testing.assert_array_equal(mats[group.identity], np.eye(2))
    for g, k in itertools.product(range(group.order), repeat=2):
        product = mats[g] @ mats[k]
        if group.is_grid_exact:
            np.testing.assert_array_equal(product, mats[group.cayley[g, k]])
        else:
            np.testing.assert_allclose(product, mats[group.cayley[g, k]], atol=1e-14)
    for g, (a, b) in enumerate(group.elements):
        np.testing.assert_allclose(mats[g] @ mats[g].T, np.eye(2), atol=1e-14)
        assert round(np.linalg.det(mats[g])) == (-1) ** b
        assert group.rotation_angle(g) == pytest.approx(360.0 * a / group.num_rotations)


def test_generators_act_as_documented() -> None:
    p4m = get_group("p4m")
    r, m = p4m.element_index(1), p4m.element_index(0, mirrored=True)
    np.testing.assert_array_equal(p4m.act(r, [[2, 1]]), [[-1, 2]])  # (dr, dc) -> (-dc, dr)
    np.testing.assert_array_equal(p4m.act(m, [[2, 1]]), [[2, -1]])  # (dr, dc) -> (dr, -dc)
    assert p4m.compose(m, r) == p4m.compose(p4m.inverse[r], m)  # m r = r^-1 m
    np.testing.assert_allclose(get_group("p8").act(1, [[0.0, 1.0]]), [[-(0.5**0.5), 0.5**0.5]], atol=1e-15)
    with pytest.raises(ValueError, match="no mirror"):
        get_group("p4").element_index(0, mirrored=True)


@pytest.mark.parametrize("name", GRID_EXACT)
@pytest.mark.parametrize("size", [1, 3, 5])
def test_grid_exact_groups_permute_window_offsets(name: str, size: int) -> None:
    group = get_group(name)
    offsets = groups.window_offsets(size)
    for g in range(group.order):
        perm = group.offset_permutation(g, offsets)
        assert sorted(perm) == list(range(size * size))
        np.testing.assert_array_equal(offsets[perm], group.act(g, offsets))
        # The action composes: permuting by k then by g is permuting by g k.
        for k in range(group.order):
            gk = group.offset_permutation(group.compose(g, k), offsets)
            np.testing.assert_array_equal(perm[group.offset_permutation(k, offsets)], gk)


def test_offsets_and_windows_reject_what_is_not_a_grid_symmetry() -> None:
    with pytest.raises(ValueError, match="does not map the pixel grid to itself"):
        get_group("p8").offset_permutation(1, groups.window_offsets(3))
    with pytest.raises(ValueError, match="not closed under"):
        get_group("p4").offset_permutation(1, np.array([[0, 0], [0, 1]]))
    with pytest.raises(ValueError, match="positive odd integer"):
        groups.window_offsets(4)
    offsets = groups.all_offsets(2, 3)
    assert offsets.shape == (15, 2) and offsets.min(axis=0).tolist() == [-1, -2]


# -- the action on images and on signals over the group -----------------------------------
def test_image_action_matches_the_testing_transforms() -> None:
    x = _random((2, 5, 5, 3))
    p4m = get_group("p4m")
    for k in range(4):
        expected = testing.rot90(x, k)
        np.testing.assert_array_equal(groups.transform_image(x, p4m, p4m.element_index(k)), expected)
    mirror = p4m.element_index(0, mirrored=True)
    np.testing.assert_array_equal(groups.transform_image(x, p4m, mirror), testing.flip_h(x))
    # L_(r m) = L_r L_m.
    np.testing.assert_array_equal(
        groups.transform_image(x, p4m, p4m.element_index(1, mirrored=True)), testing.rot90(testing.flip_h(x))
    )


@pytest.mark.parametrize("name", GRID_EXACT)
@given(side=st.integers(min_value=1, max_value=6), seed=st.integers(min_value=0, max_value=100))
def test_image_and_group_signal_actions_are_homomorphisms(name: str, side: int, seed: int) -> None:
    group = get_group(name)
    image = _random((2, side, side, 2), seed)
    signal = _random((2, side, side, group.order, 3), seed + 1)
    for g, k in itertools.product(range(group.order), repeat=2):
        gk = group.compose(g, k)
        twice = groups.transform_image(groups.transform_image(image, group, k), group, g)
        np.testing.assert_array_equal(twice, groups.transform_image(image, group, gk))
        twice = groups.transform_group_signal(groups.transform_group_signal(signal, group, k), group, g)
        np.testing.assert_array_equal(twice, groups.transform_group_signal(signal, group, gk))


def test_group_signal_action_permutes_the_group_axis_by_the_regular_representation() -> None:
    p4 = get_group("p4")
    # A signal that is constant in space: only the group axis moves, cyclically.
    signal = tf.broadcast_to(tf.reshape(tf.range(4, dtype=tf.float64), [1, 1, 1, 4, 1]), [1, 3, 3, 4, 1])
    turned = groups.transform_group_signal(signal, p4, 1)
    np.testing.assert_array_equal(turned[0, 0, 0, :, 0], [3, 0, 1, 2])  # f(r^-1 h)
    actions = groups.group_actions("p4m", on="group")
    assert list(actions) == ["r0", "r1", "r2", "r3", "r0m", "r1m", "r2m", "r3m"]


def test_actions_reject_what_is_not_a_grid_symmetry() -> None:
    with pytest.raises(ValueError, match="does not map a 4x5 grid to itself"):
        groups.transform_image(_random((1, 4, 5, 1)), "p4", 1)
    # A mirror maps any rectangle to itself.
    np.testing.assert_array_equal(
        groups.transform_image(_random((1, 4, 5, 1)), "mz2", 1), testing.flip_h(_random((1, 4, 5, 1)))
    )
    with pytest.raises(ValueError, match="does not map a 5x5 grid to itself"):
        groups.transform_image(_random((1, 5, 5, 1)), "p8", 1)
    with pytest.raises(ValueError, match=r"expects \(B, H, W, 4, D\) for group 'p4'"):
        groups.transform_group_signal(_random((1, 3, 3, 8, 1)), "p4", 1)
    with pytest.raises(ValueError, match=r"expects images \(B, H, W, C\)"):
        groups.transform_image(_random((3, 3, 1)), "p4", 1)
    with pytest.raises(ValueError, match="on must be"):
        groups.group_actions("p4", on="pixels")


# -- the relative group element of the positional encoding ----------------------------------
@pytest.mark.parametrize("name", GROUP_NAMES)
def test_ge_vit_relative_element_is_invariant_for_every_group(name: str) -> None:
    group = get_group(name)
    index = groups.relative_group_indices(group, "ge_vit")
    # (h, h~, h^) -> (g h, g h~, g h^) leaves h^-1 (h~ h^^-1) h unchanged.
    for g in range(group.order):
        moved = group.cayley[g]
        np.testing.assert_array_equal(index[np.ix_(moved, moved, moved)], index)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_gsa_nets_relative_element_is_invariant_only_for_abelian_groups(name: str) -> None:
    group = get_group(name)
    index = groups.relative_group_indices(group, "gsa_nets")
    broken = [
        g
        for g in range(group.order)
        if not np.array_equal(index[np.ix_(group.cayley[g], group.cayley[g], group.cayley[g])], index)
    ]
    abelian = np.array_equal(group.cayley, group.cayley.T)
    assert (broken == []) == abelian
    if name == "p4m":
        # Exactly the elements outside the centre {e, r^2} break it.
        assert sorted(broken) == sorted(set(range(8)) - {0, 2})
    with pytest.raises(ValueError, match="positional_encoding must be"):
        groups.relative_group_indices(group, "rope")


# -- rotations off the grid ---------------------------------------------------------------------
def test_bilinear_rotation_is_exact_at_quarter_turns() -> None:
    x = _random((2, 6, 6, 3))
    for k in range(5):
        np.testing.assert_array_equal(groups.rotate_image(x, 90.0 * k), testing.rot90(x, k))
    np.testing.assert_array_equal(groups.rotate_image(x, -90.0), testing.rot90(x, 3))
    # Off the grid it interpolates: a disk-masked constant stays constant inside the smaller disk.
    ones = tf.ones((1, 9, 9, 1), tf.float64) * groups.disk_mask(9, 9)[None, :, :, None]
    turned = groups.rotate_image(ones, 30.0).numpy()[0, :, :, 0]
    inner = groups.disk_mask(5, 5)  # radius 2: every bilinear tap stays within the radius-4 disk
    np.testing.assert_allclose(turned[2:7, 2:7][inner > 0], 1.0, atol=1e-12)
    assert 0 < turned.sum() < 81


@pytest.mark.parametrize("name", sorted(groups.D4_ELEMENTS))
def test_the_named_square_symmetries_are_the_p4m_elements_they_name(name: str) -> None:
    # The one naming of D4 (groups.D4_ELEMENTS) agrees with the tensor actions of sit_keras.testing.
    a, b = groups.D4_ELEMENTS[name]
    x = _random((2, 4, 4, 3))
    expected = groups.transform_image(x, "p4m", get_group("p4m").element_index(a, bool(b)))
    np.testing.assert_array_equal(testing.DIHEDRAL[name](x).numpy(), expected.numpy())
    assert set(groups.ROTATION_NAMES) | set(groups.REFLECTION_NAMES) == set(groups.D4_ELEMENTS)
