"""Tests of the GSA layers: exact symmetries, serialisation, XLA, gradients and errors.

What this file proves:

- ``GraphSymmetricAttention`` is equivariant on its grid tokens (and leaves
  its class token invariant) under exactly the grid permutations its graphs
  keep (Proposition 3.1): all of D4 for ``"rotation"`` without triangles,
  only rotations with one or two triangle sums (eq. 4 / 8; reflections are
  checked to *break* it by a clear margin), the documented subgroups for
  ``"flip_hv"`` / ``"flip_h"``, any permutation for ``"permutation"``, and
  the reversal of a sequence for ``"shift_flip"`` -- for every option
  (``score_graph``, ``score_mixing``, ``antisymmetric``, ``graph_qkv``, no
  class token);
- its dense and convolution forms compute the same function with the same
  weights (Listing 4);
- graph-symmetric dropout is random but keeps the symmetry;
- ``GraphConv2D``, ``LocalGSA`` and ``GlobalGSA`` are equivariant (and the
  global class token invariant) under the D4 elements they promise;
- every layer survives a config round trip and Keras (de)serialisation,
  compiles with XLA, passes gradients to its weights, and rejects bad
  shapes and options with a ``ValueError`` that says what was expected.

Every symmetry check runs in float64 with random inputs and *perturbed*
weights (the near-identity initialisation would hide broken symmetries),
in training mode with graph-symmetric dropout active and in inference mode.
"""

from __future__ import annotations

import doctest
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sit_keras import graphs, testing
from sit_keras.layers import (
    GlobalGSA,
    GraphConv2D,
    GraphSymmetricAttention,
    GraphSymmetricAttentionBlock,
    LocalGSA,
    NearIdentity,
    RotationPooledConv2D,
)
from sit_keras.layers import graph_symmetric_attention as gsa_module
from sit_keras.layers.feature_standardization import FeatureStandardization
from sit_keras.layers.rotation_pooled_conv import quarter_turns

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
BROKEN = 1e-4  # smallest relative error of a broken symmetry: 10^6 times TOL
DROPOUT = 0.2
MODES = pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])

D4 = tuple(testing.DIHEDRAL)
ROTATIONS = tuple(testing.ROTATIONS)
REFLECTIONS = tuple(testing.REFLECTIONS)


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


# -- helpers -----------------------------------------------------------------------
def _token_action(g: np.ndarray, class_token: bool = True) -> testing.Transform:
    """The action of a grid permutation ``g`` on ``(B, T, D)`` tokens.

    The token at vertex ``v`` moves to ``g(v)``: ``new[:, c + g[v]] = old[:, c + v]``
    with ``c = 1`` for a class token, which stays in place.
    """
    order = np.argsort(g)
    if class_token:
        order = np.concatenate([[0], 1 + order])
    return lambda t: tf.gather(t, order, axis=1)


def _token_actions(grid: tuple[int, int], names: tuple[str, ...], class_token: bool = True):
    return {name: _token_action(graphs.grid_permutation(grid, name), class_token) for name in names}


def _images(names: tuple[str, ...]) -> dict[str, testing.Transform]:
    return {name: testing.DIHEDRAL[name] for name in names}


def _assert_not_equivariant(fn, x, transforms, min_error: float = BROKEN) -> dict[str, float]:
    """Each ``g`` breaks ``f(g x) = g f(x)`` by more than ``min_error``."""
    errors = {name: testing.equivariance_error(fn, x, g) for name, g in transforms.items()}
    broken = {name: e for name, e in errors.items() if e > min_error}
    assert broken == errors, f"unexpectedly equivariant (error <= {min_error:g}): {errors}"
    return errors


def _gsa(grid=(4, 4), dim: int = 8, **options: Any) -> GraphSymmetricAttention:
    options = {"num_heads": 2, "graph_dropout": DROPOUT, "seed": 0, "dtype": DTYPE, **options}
    layer = GraphSymmetricAttention(grid, **options)
    layer.build((None, layer.num_tokens, dim))
    testing.perturb_weights(layer)
    return layer


def _tokens(layer: GraphSymmetricAttention, batch: int = 2, dim: int = 8, seed: int = 1) -> tf.Tensor:
    return testing.random_normal((batch, layer.num_tokens, dim), seed)


# -- GraphSymmetricAttention: which grid permutations it respects ------------------
# The D4 elements each graph symmetry keeps on a square grid (sit_keras.graphs' table).
GRAPH_KEEPS = {"rotation": set(D4), "flip_hv": {"flip_h", "flip_v", "rot180"}, "flip_h": {"flip_h"}}

SYMMETRY_CASES = [
    # symmetry, triangles, D4 elements kept, D4 elements that must break it
    ("rotation", 0, D4, ()),
    ("rotation", 1, ROTATIONS, REFLECTIONS),
    ("rotation", 2, ROTATIONS, REFLECTIONS),
    ("flip_hv", 0, ("flip_h", "flip_v", "rot180"), ("rot90", "rot270", "transpose", "anti_transpose")),
    ("flip_h", 0, ("flip_h",), ("flip_v", "rot90", "rot180", "transpose")),
    # Triangles keep only rotations, the flip_hv graphs only the half turn of them.
    ("flip_hv", 1, ("rot180",), ("flip_h", "flip_v", "rot90", "transpose")),
]


@MODES
@pytest.mark.parametrize(
    "symmetry, triangles, kept, broken", SYMMETRY_CASES, ids=[f"{c[0]}-tri{c[1]}" for c in SYMMETRY_CASES]
)
def test_gsa_is_equivariant_exactly_under_the_grid_symmetries_it_keeps(
    symmetry: str, triangles: int, kept: tuple[str, ...], broken: tuple[str, ...], training: bool
) -> None:
    layer = _gsa(symmetry=symmetry, triangles=triangles)
    x = _tokens(layer)

    def f(z):
        return layer(z, training=training)

    def token(z):
        return layer(z, training=training)[:, 0]

    testing.assert_equivariant(f, x, _token_actions((4, 4), kept))
    if broken:
        _assert_not_equivariant(f, x, _token_actions((4, 4), broken))
    # The class token's row of the scores skips the triangle sums (Listing 3),
    # so after ONE layer it has exactly the symmetry of the graphs; the
    # triangles reach it from the second layer on (see the GlobalGSA test).
    graph_kept = tuple(name for name in D4 if name in GRAPH_KEEPS[symmetry])
    testing.assert_invariant(token, x, _token_actions((4, 4), graph_kept))
    graph_broken = tuple(name for name in broken if name not in GRAPH_KEEPS[symmetry])
    if graph_broken:
        testing.assert_not_invariant(token, x, _token_actions((4, 4), graph_broken), min_error=BROKEN)


OPTIONS = {
    "score_graph": {"score_graph": True},
    "score_mixing_tanh": {"score_mixing": True, "score_activation": "tanh"},
    "antisymmetric": {"antisymmetric": True},
    "graph_qkv_none": {"graph_qkv": ""},
    "graph_qkv_v": {"graph_qkv": "v"},
    "graph_qkv_qkv": {"graph_qkv": "qkv"},
    "not_symmetrized": {"symmetrize": False},
    "no_class_token": {"class_token": False},
    "conv_kernel_3": {"graph_kernel_size": 3, "graph_form": "conv"},
    "dense_kernel_5": {"graph_kernel_size": 5, "graph_form": "dense"},
    "everything": {
        "score_graph": True,
        "score_mixing": True,
        "score_activation": "tanh",
        "antisymmetric": True,
        "graph_qkv": "qk",
    },
}


@MODES
@pytest.mark.parametrize("triangles", [0, 1, 2])
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_gsa_options_keep_rotations_and_triangles_break_reflections(
    options: dict[str, Any], triangles: int, training: bool
) -> None:
    layer = _gsa(triangles=triangles, **options)
    x = _tokens(layer)
    class_token = layer.class_token

    def f(z):
        return layer(z, training=training)

    kept = D4 if triangles == 0 else ROTATIONS
    testing.assert_equivariant(f, x, _token_actions((4, 4), kept, class_token))
    if triangles:
        _assert_not_equivariant(f, x, _token_actions((4, 4), REFLECTIONS, class_token))


@MODES
def test_gsa_with_permutation_graphs_is_equivariant_under_any_permutation(training: bool) -> None:
    layer = _gsa(symmetry="permutation", score_graph=True, score_mixing=True)
    x = _tokens(layer)
    rng = np.random.default_rng(3)
    actions = {f"random_{n}": _token_action(rng.permutation(16)) for n in range(3)}
    testing.assert_equivariant(lambda z: layer(z, training=training), x, actions)


@MODES
@pytest.mark.parametrize("class_token", [True, False])
def test_gsa_on_sequences_shift_flip_is_reversal_equivariant_and_shift_is_not(
    class_token: bool, training: bool
) -> None:
    # A (1, L) grid: appendix A.1. No exact shift symmetry exists (the border
    # has fewer neighbours), but "shift_flip" keeps the reversal v -> L - 1 - v.
    length = 6
    reverse = {"reverse": _token_action(np.arange(length)[::-1], class_token)}
    flip = _gsa(length, symmetry="shift_flip", class_token=class_token)
    assert flip.grid_shape == (1, length)
    x = _tokens(flip)
    testing.assert_equivariant(lambda z: flip(z, training=training), x, reverse)
    shift = _gsa(length, symmetry="shift", class_token=class_token)
    _assert_not_equivariant(lambda z: shift(z, training=training), x, reverse)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(min_value=1, max_value=3), n=st.integers(min_value=2, max_value=4))
def test_gsa_rotation_equivariance_for_any_batch_and_grid_size(batch: int, n: int) -> None:
    layer = _gsa((n, n), triangles=1, score_mixing=True)
    x = _tokens(layer, batch=batch, seed=batch + 10 * n)
    assert layer(x).shape == (batch, n * n + 1, 8)
    for training in (True, False):
        testing.assert_equivariant(
            lambda z, training=training: layer(z, training=training), x, _token_actions((n, n), ROTATIONS)
        )


@MODES
@pytest.mark.parametrize("triangles, mlp_dim", [(0, 0), (1, 16), (2, 0)])
def test_gsa_block_keeps_the_symmetry_of_its_attention(triangles: int, mlp_dim: int, training: bool) -> None:
    block = GraphSymmetricAttentionBlock(
        grid_shape=(3, 3),
        num_heads=2,
        triangles=triangles,
        mlp_dim=mlp_dim,
        graph_dropout=DROPOUT,
        dtype=DTYPE,
    )
    block.build((None, 10, 8))
    testing.perturb_weights(block)
    x = testing.random_normal((2, 10, 8))

    def f(z):
        return block(z, training=training)

    testing.assert_equivariant(f, x, _token_actions((3, 3), D4 if triangles == 0 else ROTATIONS))
    if triangles:
        _assert_not_equivariant(f, x, _token_actions((3, 3), REFLECTIONS))


# -- dense and convolution forms ------------------------------------------------------
@pytest.mark.parametrize("kernel_size", [3, 5, 7, 9, 11])
@pytest.mark.parametrize("symmetry", ["rotation", "flip_h", "translation"])
def test_dense_and_conv_graph_forms_compute_the_same_function(kernel_size: int, symmetry: str) -> None:
    dense = _gsa(
        (5, 5),
        symmetry=symmetry,
        graph_kernel_size=kernel_size,
        graph_form="dense",
        triangles=1,
        score_graph=True,
    )
    conv = GraphSymmetricAttention.from_config({**dense.get_config(), "graph_form": "conv"})
    conv.build((None, 26, 8))
    conv.set_weights(dense.get_weights())
    x = testing.random_normal((3, 26, 8))
    np.testing.assert_allclose(conv(x).numpy(), dense(x).numpy(), rtol=1e-12, atol=1e-12)


# -- graph-symmetric dropout -----------------------------------------------------------
def test_graph_symmetric_dropout_is_random_but_keeps_the_symmetry() -> None:
    layer = _gsa(triangles=1, score_graph=True, score_mixing=True, graph_dropout=0.5)
    x = _tokens(layer)
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert np.max(np.abs(first - second)) > 1e-3 * np.max(np.abs(first))  # the masks differ per call
    for _ in range(3):  # each call draws new masks; each masked graph keeps the rotations
        testing.assert_equivariant(lambda z: layer(z, training=True), x, _token_actions((4, 4), ROTATIONS))
    np.testing.assert_array_equal(layer(x, training=False).numpy(), layer(x, training=False).numpy())
    np.testing.assert_array_equal(layer(x).numpy(), layer(x, training=False).numpy())


# -- GraphConv2D -------------------------------------------------------------------
def _graph_conv(kernel_size: int, channels: int = 3, **options: Any) -> GraphConv2D:
    layer = GraphConv2D(kernel_size, dtype=DTYPE, seed=0, **options)
    layer.build((None, None, None, channels))
    testing.perturb_weights(layer)
    return layer


@pytest.mark.parametrize("depth_multiplier", [1, 2])
@pytest.mark.parametrize("kernel_size", [3, 5])
@pytest.mark.parametrize("side", [6, 7])
def test_rotation_graph_conv_is_d4_equivariant(side: int, kernel_size: int, depth_multiplier: int) -> None:
    layer = _graph_conv(kernel_size, depth_multiplier=depth_multiplier)
    x = testing.random_normal((2, side, side, 3))
    assert layer(x).shape == (2, side, side, 3 * depth_multiplier)
    testing.assert_equivariant(layer, x, testing.DIHEDRAL)


@given(
    channels=st.integers(1, 5),
    depth_multiplier=st.integers(1, 4),
    side=st.integers(5, 9),
    strides=st.sampled_from([1, 2]),
    padding=st.sampled_from(["same", "valid"]),
)
@settings(max_examples=12, deadline=None)
def test_the_dense_form_is_the_depthwise_convolution(
    channels: int, depth_multiplier: int, side: int, strides: int, padding: str
) -> None:
    """A depth multiplier on an image's few channels: ``call`` convolves with the block-diagonal kernel."""
    layer = _graph_conv(5, channels, symmetry="chiral", depth_multiplier=depth_multiplier, strides=strides,
                        padding=padding)  # fmt: skip
    assert layer.uses_dense_form == (depth_multiplier > 1 and channels <= 4)
    x = testing.random_normal((3, side, side, channels))
    stride = [1, strides, strides, 1]
    depthwise = tf.nn.depthwise_conv2d(x, layer.kernel(), stride, padding.upper()) + layer.bias
    np.testing.assert_allclose(layer(x).numpy(), depthwise.numpy(), rtol=0, atol=1e-12)
    dense = layer.dense_kernel().numpy()  # zero outside the channel's own block
    for c in range(channels):
        block = slice(c * depth_multiplier, (c + 1) * depth_multiplier)
        np.testing.assert_array_equal(dense[:, :, c, block], layer.kernel().numpy()[:, :, c, :])
        assert not np.delete(dense[:, :, c, :], np.r_[block], axis=-1).any()


def test_rotation_graph_conv_kernel_is_d4_invariant() -> None:
    kernel = _graph_conv(5).kernel().numpy()  # (k, k, C, m)
    for op in (lambda a: np.rot90(a, axes=(0, 1)), lambda a: np.flip(a, 0), lambda a: np.swapaxes(a, 0, 1)):
        np.testing.assert_array_equal(op(kernel), kernel)


# -- RotationPooledConv2D ----------------------------------------------------------
def test_quarter_turns_are_numpy_rot90_of_the_kernel() -> None:
    kernel = testing.random_normal((5, 5, 2, 3))
    turns = quarter_turns(kernel).numpy()
    for r in range(4):
        expected = np.rot90(kernel.numpy(), r, axes=(0, 1))
        np.testing.assert_array_equal(turns[..., 3 * r : 3 * (r + 1)], expected)


@given(side=st.integers(3, 9), kernel_size=st.sampled_from([3, 5]), filters=st.integers(1, 4))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_rotation_pooled_conv_rotates_with_the_input_and_breaks_every_flip(
    side: int, kernel_size: int, filters: int
) -> None:
    layer = RotationPooledConv2D(filters, kernel_size, seed=side, dtype=DTYPE)
    x = testing.random_normal((2, side, side, 3), seed=side)
    assert layer(x).shape == (2, side, side, filters)
    testing.assert_equivariant(layer, x, _images(("rot90", "rot180", "rot270")))
    _assert_not_equivariant(layer, x, _images(("flip_h", "flip_v", "transpose", "anti_transpose")))


def test_rotation_pooled_conv_with_valid_padding_is_the_same_conv_on_padded_maps() -> None:
    same = RotationPooledConv2D(4, 5, seed=1, dtype=DTYPE)
    valid = RotationPooledConv2D(4, 5, seed=1, padding="valid", dtype=DTYPE)
    x = testing.random_normal((2, 7, 7, 3), seed=2)
    padded = tf.pad(x, [[0, 0], [2, 2], [2, 2], [0, 0]])
    expected = same(x)
    valid(padded)
    valid.set_weights(same.get_weights())
    np.testing.assert_array_equal(valid(padded), expected)
    testing.assert_equivariant(valid, padded, _images(("rot90", "rot180", "rot270")))
    _assert_not_equivariant(valid, padded, _images(("flip_h", "flip_v", "transpose", "anti_transpose")))
    assert RotationPooledConv2D.from_config(valid.get_config()).padding == "valid"


def test_flip_h_graph_conv_is_flip_h_equivariant_only() -> None:
    layer = _graph_conv(3, symmetry="flip_h")
    x = testing.random_normal((2, 6, 6, 3))
    testing.assert_equivariant(layer, x, _images(("flip_h",)))
    _assert_not_equivariant(layer, x, _images(("rot90", "flip_v", "transpose")))


def test_flip_hv_graph_conv_keeps_flips_and_half_turn() -> None:
    layer = _graph_conv(5, symmetry="flip_hv")
    x = testing.random_normal((2, 6, 6, 3))
    testing.assert_equivariant(layer, x, _images(("flip_h", "flip_v", "rot180")))
    _assert_not_equivariant(layer, x, _images(("rot90", "transpose")))


@pytest.mark.parametrize("kernel_size, side", [(2, 6), (4, 8), (3, 9)])
def test_window_summary_graph_conv_is_d4_equivariant_when_windows_tile(kernel_size: int, side: int) -> None:
    # Appendix F.5: kernel = stride = window, "valid" padding; the windows tile the map.
    layer = _graph_conv(kernel_size, strides=kernel_size, padding="valid")
    x = testing.random_normal((2, side, side, 3))
    assert layer(x).shape == (2, side // kernel_size, side // kernel_size, 3)
    testing.assert_equivariant(layer, x, testing.DIHEDRAL)


def test_window_summary_graph_conv_is_not_rotation_equivariant_when_windows_do_not_tile() -> None:
    # 9 = 2 * 4 + 1: the valid convolution drops the last row and column, so a
    # rotation moves a dropped border into the windows. Tiling is necessary.
    layer = _graph_conv(4, strides=4, padding="valid")
    _assert_not_equivariant(layer, testing.random_normal((2, 9, 9, 3)), _images(("rot90",)))


# -- LocalGSA and GlobalGSA -------------------------------------------------------------
LOCAL_CASES = {
    # name: (map side, LocalGSA arguments)
    "tiling": (8, {"window": 4}),
    "tiling_extended_graph": (8, {"window": 4, "graph_kernel_size": 7}),
    "tiling_with_options": (8, {"window": 4, "score_mixing": True, "antisymmetric": True, "mlp_dim": 8}),
    "sliding": (5, {"window": 3, "stride": 1}),
    "sliding_extended_graph": (5, {"window": 3, "stride": 1, "graph_kernel_size": 5}),
}


@MODES
@pytest.mark.parametrize("triangles", [0, 1])
@pytest.mark.parametrize("case", LOCAL_CASES.values(), ids=LOCAL_CASES.keys())
def test_local_gsa_output_map_is_equivariant(
    case: tuple[int, dict[str, Any]], triangles: int, training: bool
) -> None:
    side, options = case
    layer = LocalGSA(
        dim=8,
        num_heads=2,
        num_layers=2,
        triangles=triangles,
        graph_dropout=DROPOUT,
        seed=0,
        dtype=DTYPE,
        **options,
    )
    layer.build((None, side, side, 3))
    testing.perturb_weights(layer)
    x = testing.random_normal((2, side, side, 3))
    stride = options.get("stride", options["window"])
    assert layer(x).shape == (2, side // stride, side // stride, 8)

    def f(z):
        return layer(z, training=training)

    testing.assert_equivariant(f, x, testing.DIHEDRAL if triangles == 0 else testing.ROTATIONS)
    if triangles:
        _assert_not_equivariant(f, x, testing.REFLECTIONS)


def test_global_gsa_without_patches_is_a_one_output_keras_layer() -> None:
    """``output_patches=False`` gives the token alone: Keras' layer harness and a functional model take it."""
    from tf_keras.src.testing_infra import test_utils

    kwargs = {"grid_shape": (2, 2), "num_heads": 2, "num_layers": 2, "output_patches": False}
    test_utils.layer_test(GlobalGSA, kwargs=kwargs, input_shape=(3, 2, 2, 8), expected_output_shape=(None, 8))
    inputs = tf.keras.Input((2, 2, 8))
    model = tf.keras.Model(inputs, GlobalGSA(**kwargs)(inputs))
    assert model(tf.zeros((3, 2, 2, 8))).shape == (3, 8)


@MODES
@pytest.mark.parametrize("triangles", [0, 1, 2])
def test_global_gsa_token_is_invariant_and_patches_are_equivariant(triangles: int, training: bool) -> None:
    layer = GlobalGSA(
        (3, 3), num_heads=2, num_layers=2, triangles=triangles, graph_dropout=DROPOUT, seed=0, dtype=DTYPE
    )
    layer.build((None, 3, 3, 8))
    testing.perturb_weights(layer)
    x = testing.random_normal((2, 3, 3, 8))

    def token(z):
        return layer(z, training=training)[0]

    def patches(z):
        return layer(z, training=training)[1]

    kept = testing.DIHEDRAL if triangles == 0 else testing.ROTATIONS
    testing.assert_invariant(token, x, kept)
    testing.assert_equivariant(patches, x, kept)
    if triangles:
        testing.assert_not_invariant(token, x, testing.REFLECTIONS, min_error=BROKEN)
        _assert_not_equivariant(patches, x, testing.REFLECTIONS)


# -- every layer: serialisation, XLA, gradients ---------------------------------------------
LAYERS: dict[str, tuple[Callable[[], tf_keras.layers.Layer], tuple[int, ...]]] = {
    "gsa": (
        lambda: GraphSymmetricAttention(
            (3, 3),
            num_heads=2,
            triangles=2,
            score_graph=True,
            score_mixing=True,
            score_activation="tanh",
            antisymmetric=True,
            graph_dropout=DROPOUT,
            seed=0,
            dtype=DTYPE,
        ),
        (2, 10, 8),
    ),
    "gsa_conv_no_class_token": (
        lambda: GraphSymmetricAttention(
            (3, 3),
            num_heads=2,
            graph_kernel_size=3,
            graph_form="conv",
            class_token=False,
            graph_qkv="v",
            dtype=DTYPE,
        ),
        (2, 9, 8),
    ),
    "gsa_sequence": (
        lambda: GraphSymmetricAttention(
            5, num_heads=2, symmetry="shift_flip", graph_dropout=DROPOUT, dtype=DTYPE
        ),
        (2, 6, 8),
    ),
    "gsa_block": (
        lambda: GraphSymmetricAttentionBlock(
            grid_shape=(3, 3), num_heads=2, triangles=1, mlp_dim=16, graph_dropout=DROPOUT, dtype=DTYPE
        ),
        (2, 10, 8),
    ),
    "graph_conv": (lambda: GraphConv2D(3, depth_multiplier=2, seed=1, dtype=DTYPE), (2, 6, 6, 3)),
    "graph_conv_window": (
        lambda: GraphConv2D(2, symmetry="flip_h", strides=2, padding="valid", dtype=DTYPE),
        (2, 6, 6, 3),
    ),
    "local_gsa": (
        lambda: LocalGSA(
            window=2,
            dim=8,
            num_heads=2,
            num_layers=2,
            triangles=1,
            graph_kernel_size=5,
            graph_dropout=DROPOUT,
            dtype=DTYPE,
        ),
        (2, 4, 4, 3),
    ),
    "local_gsa_tiling": (
        lambda: LocalGSA(
            window=2, dim=8, num_heads=2, num_layers=1, triangles=2, graph_dropout=DROPOUT, dtype=DTYPE
        ),
        (2, 4, 4, 3),
    ),
    "local_gsa_sliding": (
        lambda: LocalGSA(
            window=3, stride=1, dim=8, num_heads=2, num_layers=2, graph_dropout=DROPOUT, dtype=DTYPE
        ),
        (2, 4, 4, 3),
    ),
    "global_gsa": (
        lambda: GlobalGSA(
            (2, 2),
            num_heads=2,
            num_layers=2,
            triangles=1,
            score_graph=True,
            graph_dropout=DROPOUT,
            dtype=DTYPE,
        ),
        (2, 2, 2, 8),
    ),
}
LAYER_NAMES = tuple(LAYERS)


def _built(name: str) -> tuple[tf_keras.layers.Layer, tf.Tensor]:
    factory, shape = LAYERS[name]
    layer = factory()
    x = testing.random_normal(shape, seed=5)
    layer(x)
    testing.perturb_weights(layer)
    return layer, x


def _flat(outputs: Any) -> np.ndarray:
    """One array of every output (``GlobalGSA`` returns a token and patches)."""
    return np.concatenate([np.reshape(o.numpy(), (o.shape[0], -1)) for o in tf.nest.flatten(outputs)], axis=1)


def _dead_by_design(layer: tf_keras.layers.Layer) -> set[int]:
    """Weights that cannot reach a class-token-only output, by the construction of Listing 3.

    In ``LocalGSA`` only the window class tokens move on, so the last block
    has no triangle sums or score graph ``G`` (they leave the token's row
    alone). With ``score_mixing`` its score bias ``G_b`` is still built but
    reaches the token's row only through its zero-padded token column.
    """
    if not isinstance(layer, LocalGSA):
        return set()
    tables = ("score_bias",)
    return {id(v) for v in layer.blocks[-1].trainable_weights if any(t in v.name for t in tables)}


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_config_round_trip_gives_the_same_layer(name: str) -> None:
    layer, x = _built(name)
    config = layer.get_config()
    clone = testing.config_round_trip(layer)  # asserts plain JSON types
    clone(x)
    assert clone.get_config() == config
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(_flat(clone(x, training=False)), _flat(layer(x, training=False)))
    assert {w.dtype for w in clone.weights} == {tf.float64}


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_keras_serialisation_finds_the_registered_class(name: str) -> None:
    layer, x = _built(name)
    serialised = tf_keras.layers.serialize(layer)
    assert serialised["registered_name"] == f"sit_keras>{type(layer).__name__}"
    restored = tf_keras.layers.deserialize(json.loads(json.dumps(serialised)))
    assert type(restored) is type(layer)
    restored(x)
    restored.set_weights(layer.get_weights())
    np.testing.assert_array_equal(_flat(restored(x)), _flat(layer(x)))


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_xla_forward_matches_eager(name: str) -> None:
    layer, x = _built(name)
    if isinstance(layer, GraphConv2D):
        forward = tf.function(lambda z: layer(z), jit_compile=True)
        train = forward
    else:
        forward = tf.function(lambda z: layer(z, training=False), jit_compile=True)
        train = tf.function(lambda z: layer(z, training=True), jit_compile=True)
    np.testing.assert_allclose(_flat(forward(x)), _flat(layer(x, training=False)), rtol=1e-10, atol=1e-10)
    assert np.all(np.isfinite(_flat(train(x))))  # graph-symmetric dropout compiles too


def test_xla_training_mode_keeps_the_symmetry() -> None:
    # Dropout masks drawn inside an XLA cluster are still shared by the batch.
    layer = _gsa(triangles=1, score_mixing=True)
    x = _tokens(layer)
    train = tf.function(lambda z: layer(z, training=True), jit_compile=True)
    testing.assert_equivariant(train, x, _token_actions((4, 4), ROTATIONS))


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_gradients_reach_every_weight(name: str) -> None:
    layer, x = _built(name)
    with tf.GradientTape() as tape:
        outputs = tf.nest.flatten(layer(x, training=True))
        # Random output weights, so that no gradient cancels by symmetry.
        loss = sum(
            tf.reduce_sum(o * testing.random_normal(o.shape, seed=7 + n)) for n, o in enumerate(outputs)
        )
    gradients = tape.gradient(loss, layer.trainable_variables)
    assert len(gradients) == len(layer.trainable_variables) > 0
    dead = _dead_by_design(layer)
    for n, (variable, gradient) in enumerate(zip(layer.trainable_variables, gradients, strict=True)):
        if id(variable) in dead:
            continue
        assert gradient is not None, f"no gradient for #{n} {variable.name}"
        assert np.any(tf.convert_to_tensor(gradient).numpy() != 0), f"zero gradient for #{n} {variable.name}"


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_gradients_match_finite_differences(name: str) -> None:
    # The layers differentiate their constant index tables by hand (custom
    # gradients of gathers); check every weight's and the input's gradient
    # against central differences along a random direction, in float64.
    layer, x = _built(name)
    variables = layer.trainable_variables
    rng = np.random.default_rng(11)
    projections = [
        testing.random_normal(o.shape, seed=20 + n) for n, o in enumerate(tf.nest.flatten(layer(x)))
    ]

    def loss(inputs: tf.Tensor) -> tf.Tensor:
        outputs = tf.nest.flatten(layer(inputs, training=False))
        return sum(tf.reduce_sum(o * r) for o, r in zip(outputs, projections, strict=True))

    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(x)
    *gradients, input_gradient = tape.gradient(value, [*variables, x])
    eps = 1e-6
    for variable, gradient in zip(variables, gradients, strict=True):
        direction = rng.normal(size=variable.shape)
        original = variable.numpy()
        variable.assign(original + eps * direction)
        up = loss(x).numpy()
        variable.assign(original - eps * direction)
        down = loss(x).numpy()
        variable.assign(original)
        numeric = (up - down) / (2 * eps)
        analytic = np.sum(tf.convert_to_tensor(gradient).numpy() * direction)
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-6), variable.name
    direction = testing.random_normal(x.shape, seed=12)
    numeric = (loss(x + eps * direction) - loss(x - eps * direction)).numpy() / (2 * eps)
    assert np.sum(input_gradient.numpy() * direction.numpy()) == pytest.approx(numeric, rel=1e-5, abs=1e-6)


def test_float64_block_mlp_computes_in_float64() -> None:
    block = GraphSymmetricAttentionBlock(grid_shape=(3, 3), num_heads=2, mlp_dim=16, dtype=DTYPE)
    block.build((None, 10, 8))
    testing.perturb_weights(block)
    assert all(layer.compute_dtype == DTYPE for layer in block.mlp_layers)
    x = testing.random_normal((2, 10, 8))
    norm, hidden, out = block.mlp_layers
    np.testing.assert_array_equal(block.feed_forward(x).numpy(), (x + out(hidden(norm(x)))).numpy())


# -- bad shapes ---------------------------------------------------------------------
BAD_SHAPES = [
    # layer, input shape, message
    (
        lambda: GraphSymmetricAttention((3, 3), num_heads=2),
        (2, 9, 8),
        "expects (B, 10, D) tokens: 3x3 grid tokens + 1 class token. Received: shape=(2, 9, 8)",
    ),
    (
        lambda: GraphSymmetricAttention((3, 3), num_heads=2, class_token=False),
        (2, 10, 8),
        "expects (B, 9, D) tokens: 3x3 grid tokens. Received",
    ),
    (
        lambda: GraphSymmetricAttention(5, num_heads=2, symmetry="shift"),
        (2, 5, 8),
        "expects (B, 6, D) tokens: 1x5",
    ),
    (
        lambda: GraphSymmetricAttention((3, 3), num_heads=2),
        (2, 10, 5),
        "The feature size D must be a multiple of num_heads. Received: D=5, num_heads=2",
    ),
    (
        lambda: GraphSymmetricAttention((3, 3), num_heads=2),
        (10, 8),
        "expects tokens (B, T, D). Received: shape=(10, 8)",
    ),
    (
        lambda: GraphSymmetricAttentionBlock(grid_shape=(3, 3), num_heads=2),
        (2, 9, 8),
        "gsa expects (B, 10, D) tokens",
    ),
    (lambda: GraphConv2D(3), (2, 6, 6), "GraphConv2D expects maps (B, H, W, C). Received: shape=(2, 6, 6)"),
    (lambda: LocalGSA(window=2, dim=8, num_heads=2), (2, 4, 4), "LocalGSA expects pixel maps (B, H, W, C)"),
    (
        lambda: LocalGSA(window=4, dim=8, num_heads=2),
        (2, 6, 6, 3),
        "its height and width must be multiples of 4",
    ),
    (lambda: LocalGSA(window=2, dim=6, num_heads=4), (2, 4, 4, 3), "D must be a multiple of num_heads"),
    (
        lambda: GlobalGSA((2, 2), num_heads=2),
        (2, 3, 3, 8),
        "GlobalGSA expects patches (B, 2, 2, D). Received: shape=(2, 3, 3, 8)",
    ),
    (lambda: GlobalGSA((2, 2), num_heads=2), (2, 4, 8), "GlobalGSA expects patches (B, 2, 2, D)"),
]


@pytest.mark.parametrize("factory, shape, message", BAD_SHAPES)
def test_bad_input_shapes_name_the_expected_shape(factory, shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        factory()(tf.zeros(shape))


def test_built_gsa_rejects_a_wrong_token_count_at_call_time() -> None:
    layer = _gsa((3, 3))
    with pytest.raises(ValueError, match=re.escape("expects (B, 10, 8) tokens")):
        layer(testing.random_normal((2, 9, 8)))


# -- invalid options --------------------------------------------------------------
INVALID_OPTIONS = [
    (lambda: GraphSymmetricAttention((3, 3), 2, symmetry="hexagonal"), "Unknown graph symmetry 'hexagonal'"),
    (lambda: GraphSymmetricAttention((3, 3), 2, graph_qkv="qq"), "graph_qkv must use each of 'q', 'k', 'v'"),
    (lambda: GraphSymmetricAttention((3, 3), 2, graph_qkv="x"), "graph_qkv must use each of 'q', 'k', 'v'"),
    (
        lambda: GraphSymmetricAttention((3, 3), 2, triangles=3),
        "triangles must be 0, 1 or 2. Received: triangles=3",
    ),
    (
        lambda: GraphSymmetricAttention((3, 3), 2, graph_form="x"),
        "graph_form must be one of ('auto', 'dense', 'conv')",
    ),
    (lambda: GraphSymmetricAttention((3, 3), 2, graph_dropout=1.0), "graph_dropout must be in [0, 1)"),
    (lambda: GraphSymmetricAttention((3, 3), 2, graph_dropout=-0.1), "graph_dropout must be in [0, 1)"),
    (lambda: GraphSymmetricAttention((3, 3), 0), "num_heads must be positive"),
    (
        lambda: GraphSymmetricAttention((3, 3), 2, graph_kernel_size=4),
        "kernel_size must be a positive odd integer",
    ),
    (lambda: GraphSymmetricAttention((3, 0), 2), "grid_shape must be (H, W) with positive sizes"),
    (
        lambda: GraphSymmetricAttention((3, 3), 2, symmetry="permutation", graph_kernel_size=3),
        "The 'permutation' graph links every pair of vertices; it needs kernel_size=None or >= 5",
    ),
    (
        lambda: GraphSymmetricAttention((3, 3), 2, score_activation="nope"),
        "Unknown activation function 'nope'",
    ),
    (
        lambda: GraphSymmetricAttentionBlock(grid_shape=(3, 3), num_heads=2, triangles=3),
        "triangles must be 0, 1 or 2",
    ),
    (lambda: GraphConv2D(4), "A 'same' graph convolution needs an odd kernel_size. Received: 4"),
    (lambda: GraphConv2D(3, padding="causal"), "padding must be 'same' or 'valid'"),
    (lambda: GraphConv2D(3, symmetry="hexagonal"), "Unknown graph symmetry"),
    (lambda: GraphConv2D(0, padding="valid"), "kernel_size must be a positive integer"),
    (lambda: RotationPooledConv2D(4, 4), "kernel_size must be a positive odd integer"),
    (lambda: RotationPooledConv2D(0, 3), "filters must be a positive integer. Received: filters=0"),
    (
        lambda: RotationPooledConv2D(2, 3, padding="full"),
        "padding must be 'same' or 'valid'. Received: padding='full'",
    ),
    (lambda: LocalGSA(window=4, num_layers=0), "LocalGSA needs num_layers >= 1"),
    (lambda: LocalGSA(window=4, graph_kernel_size=4), "kernel_size must be a positive odd integer"),
    (lambda: LocalGSA(window=4, graph_dropout=1.0), "graph_dropout must be in [0, 1)"),
    (lambda: GlobalGSA((2, 2), num_layers=0), "GlobalGSA needs num_layers >= 1"),
    (lambda: GlobalGSA((2, 2), symmetry="hexagonal"), "Unknown graph symmetry"),
]


@pytest.mark.parametrize("factory, message", INVALID_OPTIONS)
def test_invalid_options_raise(factory, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        factory()


@pytest.mark.parametrize(
    "window, stride, message",
    [
        (4, 2, "stride must be 1 or equal to window=4. Received: stride=2"),
        (4, 1, "Sliding windows (stride 1) must have an odd size. Received: window=4"),
    ],
)
def test_invalid_local_windows_raise_at_build(window: int, stride: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        LocalGSA(window=window, stride=stride, dim=8, num_heads=2)(tf.zeros((1, 8, 8, 3)))


# -- NearIdentity and docstrings ---------------------------------------------------
def test_near_identity_is_base_plus_seeded_noise_and_round_trips() -> None:
    exact = NearIdentity([1], 1.0, stddev=0.0)((3, 2), dtype=DTYPE)
    np.testing.assert_array_equal(exact.numpy(), [[0, 0], [1, 1], [0, 0]])
    init = NearIdentity([0, 2], 0.5, stddev=0.1, seed=4)
    clone = NearIdentity.from_config(json.loads(json.dumps(init.get_config())))
    assert clone.get_config() == init.get_config()
    values = init((3, 64), dtype=DTYPE).numpy()
    np.testing.assert_array_equal(clone((3, 64), dtype=DTYPE).numpy(), values)
    noise = values - np.array([[0.5], [0.0], [0.5]])
    assert abs(noise.mean()) < 0.05 and 0.07 < noise.std() < 0.13 and values.dtype == np.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(gsa_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_feature_standardization_keeps_bias_corrected_running_statistics() -> None:
    layer = FeatureStandardization(momentum=0.9, dtype="float64")
    rng = np.random.default_rng(0)
    first, second = (tf.constant(rng.normal(size=(16, 3)) * 2.0 + 1.0) for _ in range(2))
    np.testing.assert_array_equal(layer(first).numpy(), first.numpy())  # identity before training
    layer(first, training=True)
    layer(second, training=True)
    # Adam-style correction: weights 0.1 * 0.9 and 0.1 over 1 - 0.9^2 = 0.19.
    means = [first.numpy().mean(0), second.numpy().mean(0)]
    squares = [(first.numpy() ** 2).mean(0), (second.numpy() ** 2).mean(0)]
    mean = (0.09 * means[0] + 0.1 * means[1]) / 0.19
    variance = (0.09 * squares[0] + 0.1 * squares[1]) / 0.19 - mean**2
    expected = (second.numpy() - mean) / np.sqrt(variance + layer.epsilon)
    np.testing.assert_allclose(layer(second).numpy(), expected, rtol=1e-12)
    restored = FeatureStandardization.from_config(layer.get_config())
    assert (restored.momentum, restored.epsilon) == (0.9, layer.epsilon)
    for bad, message in (({"momentum": 1.0}, "momentum must be in"), ({"epsilon": 0.0}, "epsilon must be")):
        with pytest.raises(ValueError, match=message):
            FeatureStandardization(**bad)
