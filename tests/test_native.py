"""The native kernels (``sit_keras.native``): where they run, what they compute, what they refuse.

What this file proves (their exactness inside layers and encoders, against the
reference path in float64, is in ``tests/test_fast_paths.py``):

- the ops equal a float64 NumPy evaluation of their formula, for window counts
  that are not multiples of the lane width and one or two score maps; the window
  op given a kernel projects its inputs itself as the projection would, values
  and gradients, and given a skip connection adds it to its first windows;
- the standardising op equals the blocks' LayerNorm (without its affine part)
  followed by the lane layout, values and gradient;
- the triangle sums' map written term by term (for grids whose matrix would not
  pay) adds up to its matrix, and a map's transposed lists are its transpose;
- a GSA layer on the Procgen SiT's 8x8 global grid and its class token (too many
  token pairs for lane-wide graph gradients) equals the reference through the
  ops, values and every gradient, in float64;
- a train step of a SiT traces the native ops, and so does a forward pass traced
  inside ``forward_passes`` (the trainers' drivers trace their policies there),
  while a forward pass traced elsewhere (serving signatures and exports) and a
  step traced inside ``builtin_only`` use builtin ops only, and an XLA-compiled
  train step only the ops with an XLA kernel (``tests/test_native_xla.py``); so
  does every step where the library is missing, and the step's values are the same;
- a SiT whose local windows go through the ops keeps its rotations and breaks
  its flips, and a SieT whose 8x8 global grid goes through them too keeps its
  declared symmetry (float64, perturbed weights);
- graphs invariant under the quarter turn, given its orbits, are mixed in
  their Fourier basis: the same values and gradients as dense mixing to
  1e-12 in float64 (and not the same bits: the other path ran); a graph that
  is not invariant, or too few windows, is mixed densely, bit for bit;
- given ``orbit_gradients`` (a SiT's layers give it with the orbits), the
  graphs' gradient of a window of up to 1024 token pairs is the dense one
  averaged over the quarter turn's orbits of token pairs, to 1e-12 in float64,
  and every other gradient the same bits;
- the gradients are deterministic (fixed order of the per-thread sums);
- malformed inputs, orbits included, raise ``InvalidArgumentError`` instead of crashing;
- a library built for another host or TensorFlow is refused with a reason.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given, settings
from hypothesis import strategies as st
from invariant_graphs import invariant_graphs
from traced_ops import op_types

from sit_keras import native, testing
from sit_keras.agents.training import collection, evaluation
from sit_keras.encoder_check import make_train_step
from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention
from sit_keras.layers.normalization import standardize
from sit_keras.layers.triangle_sums import TriangleSums, theta_table
from sit_keras.models import build_encoder
from sit_keras.native import ScoreMapPattern, build

NATIVE_OPS = {
    "SitWindowAttention",
    "SitClassTokenAttention",
    "SitStandardizedLanes",
    "SitDepthwiseConv",
    "SitChannelsFirstProjection",
    "SitMaxPool",
}

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)


def _ops():
    return native.library()


def _mixed(qkv: np.ndarray, bias: np.ndarray, graphs: np.ndarray, heads: int) -> np.ndarray:
    """``(3 D, B, T)`` projections plus bias, mixed by ``graphs[f, t, j]``: ``(3, H, d, B, T)``."""
    mixed = np.einsum("fbt,ftj->fbj", qkv + bias[:, None, None], graphs)
    return mixed.reshape(3, heads, -1, *qkv.shape[1:])


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _blocked(qkv: np.ndarray) -> tf.Tensor:
    return native.lane_blocks(tf.constant(qkv))


# Head sizes of 17 take the ops' token transposes through one whole tile of LANES x LANES and a remainder.
head_dims = st.sampled_from([2, 4, 17])
shapes = st.tuples(st.integers(1, 40), st.sampled_from([1, 2]), head_dims, st.integers(1, 2))


@settings(deadline=None, max_examples=12)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_the_window_op_is_its_formula(shape: tuple[int, int, int, int], seed: int) -> None:
    windows, heads, head_dim, maps = shape
    rng = np.random.default_rng(seed)
    sums = TriangleSums((2, 2), class_token=True)  # T = 5 tokens, 25 pairs
    pattern = sums.pattern(1, True)
    t, dim = sums.num_tokens, heads * head_dim
    qkv, bias = rng.normal(size=(3 * dim, windows, t)), rng.normal(size=3 * dim)
    graphs = rng.normal(size=(3 * dim, t, t))
    values = pattern.values_of(tf.constant(rng.normal(size=(maps, heads, t * t, t * t))))  # (M, H, T^2, K)
    blocked, bias_t, graphs_t = _blocked(qkv), tf.constant(bias), tf.constant(graphs)
    out = native.window_attention(blocked, bias_t, graphs_t, values, pattern, heads)[:windows]
    dense = np.zeros((maps, heads, t * t, t * t))  # the map the op applies (padding adds zeros)
    rows = np.broadcast_to(np.arange(t * t)[:, None], pattern.indices.shape)
    for m in range(maps):
        for h in range(heads):
            np.add.at(dense[m, h], (rows, pattern.indices), values.numpy()[m, h])
    q, k, v = _mixed(qkv, bias, graphs, heads)
    scores = np.einsum("hdbi,hdbj->hbij", q, k).reshape(heads, windows, t * t)
    attention = sum(
        _softmax(np.einsum("hpc,hbc->hbp", dense[m], scores).reshape(heads, windows, t, t))
        for m in range(maps)
    )
    expected = np.einsum("hbij,hdbj->bihd", attention, v).reshape(windows, t, dim)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=8)
@given(windows=st.integers(1, 40), rows=st.integers(1, 7), maps=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_the_window_op_projects_its_inputs_as_the_projection_would(
    windows: int, rows: int, maps: int, seed: int
) -> None:
    """With a kernel (R, 3 D) the op forms q, k, v from R input channels itself: the same values and
    gradients as the op on the projections kernel^T x (the chain rule for x and the kernel)."""
    rng = np.random.default_rng(seed)
    heads, head_dim = 2, 2
    pattern = TriangleSums((2, 2), class_token=True).pattern(1, True)
    t, channels = 5, 3 * heads * head_dim
    x, kernel = (
        tf.constant(rng.normal(size=(rows, windows, t))),
        tf.constant(rng.normal(size=(rows, channels))),
    )
    bias, graphs = tf.constant(rng.normal(size=channels)), tf.constant(rng.normal(size=(channels, t, t)))
    values = pattern.values_of(tf.constant(rng.normal(size=(maps, heads, t * t, t * t))))
    upstream = tf.constant(rng.normal(size=(windows, t, heads * head_dim)))
    results = []
    for projected in (True, False):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias, graphs, values])
            if projected:
                out = native.window_attention(
                    native.lane_blocks(x), bias, graphs, values, pattern, heads, kernel
                )
            else:
                qkv = tf.einsum("rc,rbt->cbt", kernel, x)
                out = native.window_attention(native.lane_blocks(qkv), bias, graphs, values, pattern, heads)
            loss = tf.reduce_sum(out[:windows] * upstream)
        results.append([out[:windows], *tape.gradient(loss, [x, kernel, bias, graphs, values])])
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-11, atol=1e-11)


@settings(deadline=None, max_examples=10)
@given(windows=st.integers(1, 40), skipped=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_the_window_op_adds_a_skip_connection_to_its_first_windows(
    windows: int, skipped: float, seed: int
) -> None:
    """Given skip (W, T, D), W <= B, the op's output is its output without it plus skip on the first W
    windows, the same bits (one addition either way), and skip's gradient is the output's there."""
    rng = np.random.default_rng(seed)
    pattern = TriangleSums((2, 2), class_token=True).pattern(1, True)
    heads, head_dim, t = 2, 3, 5
    channels, dim = 3 * heads * head_dim, heads * head_dim
    inputs = [
        native.lane_blocks(tf.constant(rng.normal(size=(channels, windows, t)))),
        tf.constant(rng.normal(size=channels)),
        tf.constant(rng.normal(size=(channels, t, t))),
        pattern.values_of(tf.constant(rng.normal(size=(1, heads, t * t, t * t)))),
    ]
    skip = tf.constant(rng.normal(size=(round(skipped * windows), t, dim)))
    upstream = tf.constant(rng.normal(size=(inputs[0].shape[1] * native.LANES, t, dim)))
    with tf.GradientTape() as tape:
        tape.watch(skip)
        added = native.window_attention(*inputs, pattern, heads, skip=skip)
        loss = tf.reduce_sum(added * upstream)
    without = native.window_attention(*inputs, pattern, heads)
    padding = [[0, without.shape[0] - skip.shape[0]], [0, 0], [0, 0]]
    np.testing.assert_array_equal(added.numpy(), (without + tf.pad(skip, padding)).numpy())
    np.testing.assert_array_equal(tape.gradient(loss, skip).numpy(), upstream.numpy()[: skip.shape[0]])


@settings(deadline=None, max_examples=12)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_the_class_token_op_is_its_formula(shape: tuple[int, int, int, int], seed: int) -> None:
    windows, heads, head_dim, maps = shape
    rng = np.random.default_rng(seed)
    t, dim = 10, heads * head_dim
    qkv, bias = rng.normal(size=(3 * dim, windows, t)), rng.normal(size=3 * dim)
    graphs = rng.normal(size=(3 * dim, t, t))
    coefficients = rng.normal(size=(maps, 2))
    blocked, bias_t, graphs_t = _blocked(qkv), tf.constant(bias), tf.constant(graphs)
    out = native.class_token_attention(blocked, bias_t, graphs_t, tf.constant(coefficients), heads)[:windows]
    q, k, v = _mixed(qkv, bias, graphs, heads)
    row = np.einsum("hdb,hdbj->hbj", q[..., 0], k)  # q_0 . k_j
    column = np.einsum("hdbj,hdb->hbj", q, k[..., 0])  # q_j . k_0
    attention = sum(_softmax(c_row * row + c_column * column) for c_row, c_column in coefficients)
    expected = np.einsum("hbj,hdbj->bhd", attention, v).reshape(windows, 1, dim)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=6)
@given(windows=st.integers(1, 40), head_dim=head_dims, seed=st.integers(0, 2**16))
def test_in_float32_the_ops_give_their_float64_values_and_gradients(
    windows: int, head_dim: int, seed: int
) -> None:
    """float32 tokens go through the tile transposes in registers (``kernels.h``, Transpose), float64 ones
    through memory: the window, class-token and standardising ops agree in value and gradient to float32's
    precision, for window counts that are not multiples of the lanes and head sizes past a whole tile."""
    rng = np.random.default_rng(seed)
    sums = TriangleSums((2, 2), class_token=True)  # T = 5 tokens
    pattern, heads = sums.pattern(1, True), 2
    t, dim = sums.num_tokens, heads * head_dim
    inputs = {
        "qkv": rng.normal(size=(3 * dim, windows, t)),
        "bias": rng.normal(size=3 * dim),
        "graphs": rng.normal(size=(3 * dim, t, t)) / t,
        "tokens": rng.normal(size=(windows, t, dim)),
    }
    values = rng.normal(size=(1, heads, t * t, t * t))
    coefficients = rng.normal(size=(1, 2))
    upstream = rng.normal(size=(windows, t, dim))

    def run(dtype: tf.DType) -> list[np.ndarray]:
        x = {name: tf.constant(value, dtype) for name, value in inputs.items()}
        with tf.GradientTape() as tape:
            tape.watch(list(x.values()))
            blocked = native.lane_blocks(x["qkv"])
            map_values = pattern.values_of(tf.constant(values, dtype))
            out = native.window_attention(blocked, x["bias"], x["graphs"], map_values, pattern, heads)
            out = out[:windows]
            token = native.class_token_attention(
                blocked, x["bias"], x["graphs"], tf.constant(coefficients, dtype), heads
            )[:windows]
            lanes, _ = native.standardized_lane_blocks(x["tokens"], 1e-6, 0)
            loss = (
                tf.reduce_sum(out * tf.constant(upstream, dtype))
                + tf.reduce_sum(token * tf.constant(upstream[:, :1], dtype))
                + tf.reduce_sum(tf.square(lanes))
            )
        return [t.numpy() for t in (out, token, lanes, *tape.gradient(loss, list(x.values())))]

    for single, double in zip(run(tf.float32), run(tf.float64), strict=True):
        scale = max(1.0, float(np.abs(double).max()))
        np.testing.assert_allclose(single, double, rtol=0, atol=2e-4 * scale)


@pytest.mark.parametrize("tokens", [10, 37], ids=["lane_wide", "row_wise"])  # 100 and 1369 token pairs
def test_in_float32_the_window_ops_gradient_sums_give_float64s(tokens: int) -> None:
    """The gradient op sums its lane-wide accumulators of the map's values, the graphs and the bias over the
    lanes kLanes entries at a time, transposed in registers (``LaneSumsInHalves``) in float32, one by one in
    float64: those gradients agree to float32's precision, for graphs summed lane-wide and row by row, with
    a head's entries not a multiple of the lanes."""
    rng = np.random.default_rng(tokens)
    heads, head_dim, windows, terms = 2, 3, 21, 5
    indices = rng.integers(0, tokens * tokens, size=(tokens * tokens, terms))
    pattern = ScoreMapPattern(indices, np.ones((tokens * tokens, terms), np.float32))
    inputs = [
        rng.normal(size=(3 * heads * head_dim, windows, tokens)),  # qkv
        rng.normal(size=3 * heads * head_dim),  # bias
        rng.normal(size=(3 * heads * head_dim, tokens, tokens)) / tokens,  # graphs
        rng.normal(size=(1, heads, tokens * tokens, terms)) / terms,  # the map's values
    ]
    upstream = rng.normal(size=(windows, tokens, heads * head_dim))

    def gradients(dtype: tf.DType) -> list[np.ndarray]:
        qkv, bias, graphs, values = (tf.constant(x, dtype) for x in inputs)
        with tf.GradientTape() as tape:
            tape.watch([bias, graphs, values])
            out = native.window_attention(native.lane_blocks(qkv), bias, graphs, values, pattern, heads)
            loss = tf.reduce_sum(out[:windows] * tf.constant(upstream, dtype))
        return [g.numpy() for g in tape.gradient(loss, [bias, graphs, values])]

    for single, double in zip(gradients(tf.float32), gradients(tf.float64), strict=True):
        assert np.abs(double).max() > 0
        np.testing.assert_allclose(single, double, rtol=0, atol=2e-4 * max(1.0, float(np.abs(double).max())))


def _dense(pattern: ScoreMapPattern, values: np.ndarray) -> np.ndarray:
    """The ``(..., P, P)`` matrices whose rows ``values (..., P, K)`` weight at ``pattern.indices``."""
    dense = np.zeros((*values.shape[:-2], pattern.size, pattern.size))
    rows = np.broadcast_to(np.arange(pattern.size)[:, None], pattern.indices.shape)
    for at in np.ndindex(values.shape[:-2]):
        np.add.at(dense[at], (rows, pattern.indices), values[at])
    return dense


@settings(deadline=None, max_examples=10)
@given(
    grid=st.tuples(st.integers(2, 4), st.integers(2, 4)),
    class_token=st.booleans(),
    tables=st.integers(1, 2),
    sign=st.sampled_from([1.0, 0.0, -1.0]),
    seed=st.integers(0, 2**16),
)
def test_the_maps_terms_add_up_to_its_matrix(
    grid: tuple[int, int], class_token: bool, tables: int, sign: float, seed: int
) -> None:
    sums = TriangleSums(grid, class_token=class_token)
    rng = np.random.default_rng(seed)
    weights = [theta_table(tf.constant(rng.normal(size=(sums.num_angle_classes, 2)))) for _ in range(tables)]
    symmetrised = sign != 0.0 or bool(seed % 2)  # sign 0 on a symmetrised pattern: zero weights
    pattern = sums.terms_pattern(tables, symmetrised)
    values = sums.terms_values(weights, sign, 0.3, symmetrised).numpy()  # (H, P, K)
    assert (
        values.shape
        == (2, pattern.size, pattern.terms)
        == (2, sums.num_tokens**2, (1 + symmetrised) * 3**tables)
    )
    np.testing.assert_allclose(_dense(pattern, values), sums.matrix(weights, sign, 0.3).numpy(), atol=1e-13)


@settings(deadline=None, max_examples=10)
@given(
    grid=st.tuples(st.integers(2, 5), st.integers(2, 5)),
    class_token=st.booleans(),
    tables=st.integers(1, 3),
    symmetrised=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_matrix_pattern_is_the_boolean_product_of_the_sums(
    grid: tuple[int, int], class_token: bool, tables: int, symmetrised: bool, seed: int
) -> None:
    """``pattern``: where ``L_n ... L_1 (I + P)`` reads, the boolean product of each sum's reads (formed
    here as the dense product of 0 / 1 matrices), and every entry the matrix holds with positive weights."""
    sums = TriangleSums(grid, class_token=class_token)
    n = sums.num_tokens**2
    rows = np.repeat(np.arange(n), 3)
    reach = np.eye(n)  # float64: its counts of paths stay exact
    for i in range(tables):
        step = np.zeros((n, n))
        step[rows, sums.sources.reshape(-1)] = 1
        if i == 0 and symmetrised:
            step[rows, sums.transpose[sums.sources.reshape(-1)]] = 1
        reach = step @ reach
    pattern = sums.pattern(tables, symmetrised)
    assert pattern.terms == (reach > 0).sum(axis=1).max()
    np.testing.assert_array_equal(_dense(pattern, pattern.mask) > 0, reach > 0)
    rng = np.random.default_rng(seed)
    weights = [
        theta_table(tf.constant(rng.uniform(0.5, 1.5, size=(sums.num_angle_classes, 2))))
        for _ in range(tables)
    ]
    matrix = sums.matrix(weights, float(symmetrised), 1.0).numpy()  # (H, T^2, T^2)
    assert not np.any(matrix[:, reach == 0])


@settings(deadline=None, max_examples=10)
@given(size=st.integers(1, 30), terms=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_a_maps_transposed_lists_are_its_transpose(size: int, terms: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, size, size=(size, terms))  # columns may repeat in a row
    mask = (rng.uniform(size=(size, terms)) < 0.8).astype(np.float32)
    pattern = ScoreMapPattern(indices, mask)
    values = rng.normal(size=(size, terms)) * mask
    flat = np.append(values.reshape(-1), 0.0)  # padding reads the zero after the values
    transposed = _dense(ScoreMapPattern(pattern.transposed_indices), flat[pattern.transposed_values])
    np.testing.assert_allclose(transposed, _dense(pattern, values).T, atol=1e-14)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize(
    "options",
    [{"triangles": 1}, {"triangles": 1, "score_graph": True, "antisymmetric": True}],
    ids=["sit", "graph"],
)
@pytest.mark.parametrize(("grid", "dim"), [(8, 8), (7, 12)], ids=["8x8", "7x7"])
def test_a_global_grid_through_the_ops_equals_the_reference(
    options: dict, training: bool, grid: int, dim: int
) -> None:
    """The Procgen SiT's 8x8 global grid and its class token: 4225 token pairs, so the ops sum the graphs'
    gradients row by row instead of lane by lane, take the T x T products in register tiles, and the map
    is built term by term (its pairs form). A 7x7 grid with 6 features a head leaves partial tiles of
    rows (50 tokens) and of features."""
    kwargs = {
        "num_heads": 2,
        "graph_dropout": 0.1,
        "seed": 0,
        "dtype": "float64",
        "class_token": True,
        **options,
    }
    tokens = grid * grid + 1
    layers = [
        GraphSymmetricAttention((grid, grid), implementation=i, **kwargs) for i in ("reference", "fast")
    ]
    for layer in layers:
        layer.build((None, tokens, dim))
    testing.perturb_weights(layers[0], 0.3)
    layers[1].set_weights(layers[0].get_weights())
    x = tf.constant(np.random.default_rng(1).normal(size=(19, tokens, dim)))  # two lane blocks, one padded
    results = []
    for layer in layers:
        with tf.GradientTape() as tape:
            tape.watch(x)
            assert layer.native_applies(x.dtype, token_only=False) == (layer is layers[1])
            tf.random.set_seed(7)  # the same dropout masks, drawn in the same order
            out = layer(x, training=training)
            loss = tf.reduce_sum(out * np.random.default_rng(3).normal(size=out.shape))
        results.append([out, *tape.gradient(loss, [x, *layer.trainable_variables])])
    tf.random.set_seed(None)
    assert len(layers[0].trainable_variables) >= 4  # the projection, G_q k v and the triangle weights
    for a, b in zip(*results, strict=True):
        a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
        assert np.linalg.norm(a - b) <= 1e-12 * np.linalg.norm(a) != 0


@settings(deadline=None, max_examples=10)
@given(
    windows=st.integers(1, 40),
    tokens=st.integers(1, 6),
    channels=st.integers(1, 40),  # past LANES: whole tiles of the transposes and a remainder
    skip_fraction=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_the_standardized_lanes_op_is_the_layer_norm_in_lane_blocks(
    windows: int, tokens: int, channels: int, skip_fraction: float, seed: int
) -> None:
    """The block's LayerNorm without gamma and beta (normalization.standardize) in the ops' layout, values and
    gradient, float64, for window counts that are not multiples of the lanes (the padded windows are zero);
    with the first K tokens for a skip connection, whose gradient the op adds to its own."""
    rng = np.random.default_rng(seed)
    skip_tokens = round(skip_fraction * tokens)
    x = tf.constant(rng.normal(size=(windows, tokens, channels)) * 3.0 + 1.0)
    upstream = tf.constant(rng.normal(size=(channels, -(-windows // native.LANES), tokens, native.LANES)))
    skip_upstream = tf.constant(rng.normal(size=(windows, skip_tokens, channels)))
    results = []
    for fused in (True, False):
        with tf.GradientTape() as tape:
            tape.watch(x)
            if fused:
                y, skip = native.standardized_lane_blocks(x, 1e-6, skip_tokens)
            else:
                y, skip = native.lane_blocks_of_tokens(standardize(x, 1e-6)), x[:, :skip_tokens]
            loss = tf.reduce_sum(y * upstream) + tf.reduce_sum(skip * skip_upstream)
        results.append([y, skip, tape.gradient(loss, x)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_the_standardized_lanes_op_refuses_malformed_inputs() -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match="expects tokens"):
        _ops().sit_standardized_lanes(tf.zeros((4, 64)), tf.constant(1e-6))
    with pytest.raises(tf.errors.InvalidArgumentError, match="expects dy"):
        _ops().sit_standardized_lanes_grad(
            tf.zeros((64, 1, 17, native.LANES // 2)),  # half the lanes
            tf.zeros((4, 17, 64)),
            tf.constant(1e-6),
            tf.zeros((4, 1, 64)),
        )
    lanes = tf.zeros((64, 1, 17, native.LANES))
    for skip_dy in (tf.zeros((4, 18, 64)), tf.zeros((4, 1, 63)), tf.zeros((3, 1, 64)), tf.zeros((4, 64))):
        with pytest.raises(tf.errors.InvalidArgumentError, match="expects skip_dy"):
            _ops().sit_standardized_lanes_grad(lanes, tf.zeros((4, 17, 64)), tf.constant(1e-6), skip_dy)
    with pytest.raises(ValueError, match="skip_tokens must lie in"):
        native.standardized_lane_blocks(tf.zeros((4, 17, 64)), 1e-6, 18)


def test_the_docs_sizes_of_the_map_and_the_scale_rounding() -> None:
    """docs/speed.md: a 4x4 window's map reads at most 6 of its 289 scores a row; float32 rounds 1/sqrt(8)
    by 1.7e-8 relative (what the float64 layers lost before their scale was built with tf.constant)."""
    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "speed.md").read_text().split())
    pattern = TriangleSums((4, 4), class_token=True).pattern(1, True)
    assert pattern.size == 289 and pattern.terms == 6
    assert f"at most {pattern.terms} non-zero entries a row instead of all {pattern.size}" in page
    scale = 1.0 / math.sqrt(8)  # a Python float, as the layers compute it
    error = f"{abs(float(np.float32(scale)) - scale) / scale:.1e}".replace("e-08", "e-8")
    assert f"that is {error} relative" in page
    assert float(tf.constant(scale, tf.float64)) == scale != float(tf.cast(scale, tf.float64))


@pytest.fixture(scope="module")
def sit() -> tf.keras.Model:
    return build_encoder("sit", (16, 16, 3))


def test_a_train_step_runs_the_native_ops_and_a_forward_pass_does_not(sit) -> None:
    images = tf.zeros((3, 16, 16, 3), tf.uint8)
    assert NATIVE_OPS <= op_types(make_train_step(sit, jit_compile=False), images)
    forward = tf.function(lambda x: sit(x, training=False))
    assert not NATIVE_OPS & op_types(forward, images)
    # Under XLA, those with an XLA kernel where the XLA library loads (tests/test_native_xla.py).
    in_xla = native.XLA_OPS if native.xla_load_problem() is None else set()
    assert NATIVE_OPS & op_types(make_train_step(sit, jit_compile=True), images) == NATIVE_OPS & in_xla
    with native.builtin_only():
        assert not NATIVE_OPS & op_types(make_train_step(sit, jit_compile=False), images)


def _attention_nodes(function: tf.types.experimental.GenericFunction, *args) -> list[Any]:
    """The node of every attention op a function traces (its gradients' included)."""
    graph = function.get_concrete_function(*args).graph
    nodes = [op.node_def for op in graph.get_operations()]
    nodes += [node for f in graph.as_graph_def().library.function for node in f.node_def]
    return [n for n in nodes if n.op.startswith(("SitWindow", "SitClassToken"))]


def _attention_orbits(function: tf.types.experimental.GenericFunction, *args) -> list[list[int]]:
    """The ``orbits`` attribute of every attention op a function traces (its gradients' included)."""
    return [list(n.attr["orbits"].list.i) for n in _attention_nodes(function, *args)]


def test_a_sits_windows_give_the_ops_the_quarter_turns_orbits_except_under_dense_mixing(sit) -> None:
    """The 16x16 SiT's 4 x 4 windows and its 2 x 2 global grid, each with a class token: the quarter
    turn's orbits of every other token, for each of its four ops and their gradients; none inside
    ``dense_mixing()``. Its graph classes keep the turn, so the gradient ops average the graphs' gradient
    over the turn's orbits of pairs (``orbit_gradients``)."""
    images = tf.zeros((3, 16, 16, 3), tf.uint8)
    step = make_train_step(sit, jit_compile=False)
    orbits = _attention_orbits(step, images)
    tokens = sorted(tuple(sorted(o)) for o in orbits)
    assert tokens == [tuple(range(1, 5))] * 4 + [tuple(range(1, 17))] * 4
    gradients = [n for n in _attention_nodes(step, images) if n.op.endswith("Grad")]
    assert len(gradients) == 4 and all(n.attr["orbit_gradients"].b for n in gradients)
    with native.dense_mixing():
        assert _attention_orbits(make_train_step(sit, jit_compile=False), images) == [[]] * 8


def test_a_forward_pass_traced_for_a_driver_runs_the_native_ops(sit) -> None:
    images = tf.zeros((3, 16, 16, 3), tf.uint8)
    with native.forward_passes():
        assert NATIVE_OPS & op_types(tf.function(lambda x: sit(x, training=False)), images)
    assert not native.usable(tf.float32)  # outside it again


@pytest.fixture
def fixed_seed() -> Iterator[None]:
    """The same initial weights whatever ran before in this worker; the next test does not inherit it."""
    tf_keras.utils.set_random_seed(0)
    yield
    tf.random.set_seed(None)


@pytest.mark.parametrize("images", [2, 64], ids=["dense_mixing", "quarter_turn_orbits"])
def test_a_sit_on_the_native_ops_keeps_rotations_and_breaks_flips(fixed_seed: None, images: int) -> None:
    """The SiT's promise (rotation invariance; the triangle sums break the flips), on perturbed weights in
    float64, with every local window through the native ops: 8 windows a batch (their graphs mixed
    densely), or 256, 16 lane blocks (mixed in the quarter turn's orbits)."""
    encoder = build_encoder("sit", (16, 16, 3), dtype="float64")
    x = tf.constant(np.random.default_rng(3).uniform(size=(images, 16, 16, 3)))
    encoder(x)
    # Noise of 0.3, not 0.1: with 0.1 the flips moved some initialisations' output by only 1e-3.
    testing.perturb_weights(encoder, 0.3)
    with native.forward_passes():
        forward = tf.function(lambda z: encoder(z, training=False))
        assert NATIVE_OPS <= op_types(forward, x)
        testing.assert_invariant(forward, x, testing.ROTATIONS, tol=1e-10)
        testing.assert_not_invariant(forward, x, testing.REFLECTIONS)


def test_a_siet_whose_global_grid_runs_the_native_ops_keeps_its_declared_symmetry(fixed_seed: None) -> None:
    """The SieT at 64x64: its 8x8 global grid (4225 token pairs) goes through the window op too; the class
    token stays invariant and the patch grid turns with the input, flips change the output (float64,
    perturbed weights)."""
    encoder = build_encoder("siet", (64, 64, 3), dtype="float64")
    x = tf.constant(np.random.default_rng(3).uniform(size=(2, 64, 64, 3)))
    encoder(x)
    testing.perturb_weights(encoder, 0.3)
    global_block = encoder.global_gsa.blocks[0].attention
    assert global_block.num_tokens**2 == native.MAX_TOKEN_PAIRS
    with native.forward_passes():
        forward = tf.function(lambda z: encoder(z, training=False))
        assert NATIVE_OPS <= op_types(forward, x)
        assert global_block.native_applies(tf.float64, token_only=False)
        testing.assert_declared_symmetry(
            lambda z: {"output": forward(z), **encoder.symmetry_parts(z)}, x, encoder.declared_symmetry
        )


def test_the_trainers_driver_runs_its_policy_inside_forward_passes(monkeypatch) -> None:
    seen = []

    def run(self, time_step, policy_state):
        seen.append(native.usable(tf.float32))
        return time_step, policy_state

    monkeypatch.setattr(collection.FixedLengthDriver, "_run", run)
    driver = object.__new__(collection.FixedLengthDriver)  # only run() is called
    assert collection.FixedLengthDriver.run(driver, "time step", ()) == ("time step", ())
    assert seen == [True]


def test_the_trainers_evaluations_run_their_policy_inside_forward_passes(monkeypatch) -> None:
    seen = []

    def run_episodes(policy, env, num_episodes):
        seen.append((policy, env, num_episodes, native.usable(tf.float32)))
        return []

    monkeypatch.setattr(evaluation.evaluate, "run_episodes", run_episodes)
    evaluator = object.__new__(evaluation.Evaluator)  # only _episodes() is called, its environments made
    evaluator._settings, evaluator._env = types.SimpleNamespace(num_eval_episodes=3), "environments"
    assert evaluator._episodes("policy") == []
    assert seen == [("policy", "environments", 3, True)]
    assert not native.usable(tf.float32)  # outside it again


def test_without_the_library_a_train_step_keeps_builtin_ops_and_its_values(sit, monkeypatch) -> None:
    images = tf.constant(np.random.default_rng(0).integers(0, 256, size=(3, 16, 16, 3)), tf.uint8)

    def gradients() -> list[np.ndarray]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(sit(images, training=False)))
        return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, sit.trainable_variables)]

    with_library = gradients()
    monkeypatch.setattr(native, "_loaded", {"ops": None, "problem": "not built"})
    assert not native.usable(tf.float32)
    assert not NATIVE_OPS & op_types(make_train_step(sit, jit_compile=False), images)
    for a, b in zip(with_library, gradients(), strict=True):  # float32: agree to 1e-4 in norm
        assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(a)


def _loss_gradients(encoder: tf.keras.Model, images: tf.Tensor) -> list[np.ndarray]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.cast(encoder(images, training=False), tf.float32)))
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, encoder.trainable_variables)]


@pytest.mark.parametrize("variant", ["sit", "siet"])
def test_under_mixed_bfloat16_the_ops_run_in_float32_as_accurately_as_the_builtin_ops(variant: str) -> None:
    """bfloat16 tensors pass through the ops in float32 (native.op_dtype): the train step runs them, and its
    gradients lie as close to the float32 model's as the builtin bfloat16 path's do (same weights)."""
    images = tf.constant(np.random.default_rng(0).integers(0, 256, size=(3, 16, 16, 3)), tf.uint8)
    tf_keras.utils.set_random_seed(0)
    exact = build_encoder(variant, (16, 16, 3), seed=0)
    exact(images)
    testing.perturb_weights(exact, 0.1)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        low = build_encoder(variant, (16, 16, 3), seed=0)
        low(images)
    finally:
        tf_keras.mixed_precision.set_global_policy(None)
    low.set_weights(exact.get_weights())
    assert native.op_dtype(tf.bfloat16) == tf.float32
    # The projections keep TensorFlow's matmul, which computes in bfloat16 (tests/test_native_projection.py).
    in_float32 = NATIVE_OPS - {"SitChannelsFirstProjection"}
    types = op_types(make_train_step(low, jit_compile=False), images)
    assert in_float32 <= types and "SitChannelsFirstProjection" not in types
    reference = _loss_gradients(exact, images)
    with native.builtin_only():
        builtin = _loss_gradients(low, images)

    def error(gradients: list[np.ndarray]) -> float:
        pairs = zip(reference, gradients, strict=True)
        return max(np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in pairs)

    through_ops = error(_loss_gradients(low, images))
    assert through_ops <= 1.25 * error(builtin) and through_ops < 0.1


def _through_op(
    op: str,
    x: list[tf.Tensor],
    orbits: np.ndarray | None,
    upstream: np.ndarray,
    orbit_gradients: bool = False,
    jit_compile: bool | None = None,
) -> list[np.ndarray]:
    """``op`` ("window" or "class_token") on ``x = [qkv, bias, graphs, values]``: its output and gradients,
    eagerly or (``jit_compile`` True / False) in a ``tf.function``."""
    side = math.isqrt(x[0].shape[2] - 1)
    pattern = TriangleSums((side, side), class_token=True).pattern(1, True)
    options = {"orbits": orbits, "orbit_gradients": orbit_gradients}

    def run(*x: tf.Tensor) -> list[tf.Tensor]:
        inputs = list(x) if op == "window" else list(x[:3])
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            if op == "window":
                out = native.window_attention(*x, pattern, 2, **options)
            else:
                coefficients = tf.constant([[0.3, -0.2]], tf.float64)
                out = native.class_token_attention(*x[:3], coefficients, 2, **options)
            loss = tf.reduce_sum(out * upstream[: out.shape[0], : out.shape[1]])
        return [out, *tape.gradient(loss, inputs)]

    if jit_compile is not None:
        run = tf.function(run, jit_compile=jit_compile)
    return [t.numpy() for t in run(*x)]


def _assert_close(dense: list[np.ndarray], spectral: list[np.ndarray]) -> None:
    for a, b in zip(dense, spectral, strict=True):
        assert np.linalg.norm(a - b) <= 1e-12 * np.linalg.norm(a) != 0


def _invariant_case(side: int, windows: int) -> tuple[list[tf.Tensor], np.ndarray, np.ndarray]:
    """``[qkv, bias, graphs, values]`` of 2 heads of 3 features on ``windows`` windows of a ``side x side``
    grid and its class token, the graphs invariant under the quarter turn (float64); its orbits and an
    upstream gradient for the window op's output."""
    rng = np.random.default_rng(side * 1000 + windows)
    heads, head_dim, t = 2, 3, side * side + 1
    channels = 3 * heads * head_dim
    graph_values, orbits = invariant_graphs(rng, channels, side)
    pattern = TriangleSums((side, side), class_token=True).pattern(1, True)
    x = [
        _blocked(rng.normal(size=(channels, windows, t))),
        tf.constant(rng.normal(size=channels)),
        tf.constant(graph_values),
        pattern.values_of(tf.constant(rng.normal(size=(1, heads, t * t, t * t)))),
    ]
    return x, orbits, rng.normal(size=(x[0].shape[1] * native.LANES, t, heads * head_dim))


@settings(deadline=None, max_examples=6)
@given(side=st.integers(2, 4), windows=st.integers(256, 290), op=st.sampled_from(["window", "class_token"]))
def test_graphs_invariant_under_the_quarter_turn_are_mixed_in_its_orbits(
    side: int, windows: int, op: str
) -> None:
    """With 12 lane blocks of windows or more, the ops mix each invariant graph in the quarter turn's
    Fourier basis: dense mixing's values and gradients, summed in another order (so not the same bits).
    A graph changed in one entry is no longer invariant and is mixed densely (spectral mixing would be
    far off); with 11 lane blocks every graph is mixed densely, bit for bit."""
    x, orbits, upstream = _invariant_case(side, windows)
    dense, spectral = _through_op(op, x, None, upstream), _through_op(op, x, orbits, upstream)
    _assert_close(dense, spectral)
    assert not all(np.array_equal(a, b) for a, b in zip(dense, spectral, strict=True))
    broken = x[2].numpy().copy()
    broken[broken.shape[0] // 2, 1, 2] += 0.5
    x_broken = [x[0], x[1], tf.constant(broken), x[3]]
    _assert_close(_through_op(op, x_broken, None, upstream), _through_op(op, x_broken, orbits, upstream))
    few = [x[0][:, :11], *x[1:]]
    for a, b in zip(
        _through_op(op, few, None, upstream), _through_op(op, few, orbits, upstream), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def _pair_orbit_means(graphs: np.ndarray, orbits: np.ndarray) -> np.ndarray:
    """``graphs (C, T, T)`` averaged over the quarter turn's orbits of token pairs."""
    turn = np.arange(graphs.shape[1])
    for orbit in orbits:
        turn[orbit] = np.roll(orbit, -1)
    total, turned = graphs.copy(), graphs
    for _ in range(3):
        turned = turned[:, turn][:, :, turn]
        total = total + turned
    return total / 4


@settings(deadline=None, max_examples=8)
@given(
    side=st.sampled_from([2, 3, 4, 6]),
    windows=st.sampled_from([40, 256]),
    op=st.sampled_from(["window", "class_token"]),
    jit_compile=st.booleans(),
)
def test_given_orbit_gradients_the_ops_average_the_graphs_gradient_over_the_turns_orbits_of_pairs(
    side: int, windows: int, op: str, jit_compile: bool
) -> None:
    """With ``orbit_gradients``, windows of up to 1024 token pairs get the graphs' gradient as the dense
    one's mean over each orbit of token pairs (so every class of pairs that the turn keeps gets the same
    gradient), to 1e-12 in float64, formed in the turn's Fourier basis (side 3: two fixed tokens); a
    larger grid (side 6) keeps the dense gradient, bit for bit. Every other output and gradient is the same
    bits. 5 lane blocks mix the graphs densely, 32 in their spectra; in a graph and under XLA alike."""
    if jit_compile and native.xla_load_problem() is not None:
        jit_compile = False
    x, orbits, upstream = _invariant_case(side, windows)
    dense = _through_op(op, x, orbits, upstream, jit_compile=jit_compile)
    averaged = _through_op(op, x, orbits, upstream, orbit_gradients=True, jit_compile=jit_compile)
    graphs_at = 3  # out, dqkv, dbias, dgraphs[, dvalues]
    for i, (a, b) in enumerate(zip(dense, averaged, strict=True)):
        if i != graphs_at:
            np.testing.assert_array_equal(a, b)
    if (side * side + 1) ** 2 > 1024:
        np.testing.assert_array_equal(dense[graphs_at], averaged[graphs_at])
        return
    expected = _pair_orbit_means(dense[graphs_at], orbits)
    error = np.linalg.norm(averaged[graphs_at] - expected)
    assert error <= 1e-12 * np.linalg.norm(expected) != 0
    # The dense gradient was not already its own mean.
    assert np.linalg.norm(dense[graphs_at] - expected) > 1e-3 * np.linalg.norm(expected)


@pytest.mark.parametrize(
    "orbits, message",
    [
        ([1, 2, 3], "whole orbits"),
        ([1, 2, 3, 3], "distinct tokens"),
        ([1, 2, 3, 10], "distinct tokens below 10"),
    ],
    ids=["partial", "repeated", "outside"],
)
def test_the_ops_refuse_orbits_that_do_not_fit_the_tokens(orbits: list[int], message: str) -> None:
    qkv, bias, graphs_ = tf.zeros((24, 1, 10, native.LANES)), tf.zeros(24), tf.zeros((24, 10, 10))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _ops().sit_class_token_attention(qkv, bias, graphs_, tf.ones((1, 2)), num_heads=2, orbits=orbits)


@pytest.mark.parametrize("tokens", [10, 40], ids=["lane_wide", "row_wise"])  # 100 and 1600 token pairs
def test_the_gradients_are_the_same_on_every_run(tokens: int) -> None:
    rng = np.random.default_rng(1)
    qkv = _blocked(rng.normal(size=(24, 100, tokens)).astype(np.float32))
    bias, graphs = (
        tf.constant(rng.normal(size=24), tf.float32),
        tf.constant(rng.normal(size=(24, tokens, tokens)), tf.float32),
    )
    dout = tf.constant(rng.normal(size=(-(-100 // native.LANES) * native.LANES, 1, 8)), tf.float32)
    coefficients = tf.constant([[0.5, 0.5]], tf.float32)
    runs = [
        _ops().sit_class_token_attention_grad(dout, qkv, bias, graphs, coefficients, num_heads=2)
        for _ in range(3)
    ]
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
    "qkv_shape, graphs_shape, message",
    [
        ((24, 7, 10), (24, 10, 10), "expects qkv"),  # not in lane blocks
        ((24, 7, 10, native.LANES // 2), (24, 10, 10), "expects qkv"),  # half the lanes
        ((25, 7, 10, native.LANES), (25, 10, 10), "expects qkv"),  # 25 channels: not 3 H d
        ((24, 7, 10, native.LANES), (24, 9, 9), "expects graphs"),
    ],
)
def test_the_ops_refuse_malformed_inputs(qkv_shape: tuple, graphs_shape: tuple, message: str) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _ops().sit_class_token_attention(
            tf.zeros(qkv_shape), tf.zeros(qkv_shape[:1]), tf.zeros(graphs_shape), tf.ones((1, 2)), num_heads=2
        )


@pytest.mark.parametrize(
    "inputs_shape, kernel_shape",
    [
        ((6, 1, 10, native.LANES), (5, 24)),
        ((6, 1, 10, native.LANES), (6, 25)),
        ((24, 1, 10, native.LANES), (0, 12)),
    ],
    ids=["rows_differ", "not_3_h_d", "channels_differ"],
)
def test_the_window_op_refuses_a_kernel_that_does_not_fit(inputs_shape: tuple, kernel_shape: tuple) -> None:
    pattern = TriangleSums((3, 3), class_token=True).pattern(1, True)  # T = 10
    with pytest.raises(tf.errors.InvalidArgumentError, match="and kernel"):
        _ops().sit_window_attention(
            tf.zeros(inputs_shape),
            tf.zeros(kernel_shape),
            tf.zeros(24),
            tf.zeros((24, 10, 10)),
            tf.zeros((1, 2, 100, pattern.terms)),
            pattern.indices,
            tf.zeros((0, 10, 8)),
            num_heads=2,
        )


def test_the_window_op_refuses_indices_outside_the_scores() -> None:
    indices = np.zeros((100, 2), np.int32)
    indices[3, 1] = 100  # one past the T^2 = 100 pairs
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        qkv, bias, graphs = tf.zeros((24, 1, 10, native.LANES)), tf.zeros(24), tf.zeros((24, 10, 10))
        kernel = tf.zeros((0, 24))
        values, skip = tf.zeros((1, 2, 100, 2)), tf.zeros((0, 10, 8))
        _ops().sit_window_attention(qkv, kernel, bias, graphs, values, indices, skip, num_heads=2)


@pytest.mark.parametrize(
    "skip_shape",
    [(native.LANES + 1, 10, 8), (3, 9, 8), (3, 10, 9), (3, 80)],
    ids=["windows", "T", "D", "rank"],
)
def test_the_window_op_refuses_a_skip_that_does_not_fit(skip_shape: tuple) -> None:
    pattern = TriangleSums((3, 3), class_token=True).pattern(1, True)  # T = 10; D = 8 for 24 = 3 D channels
    qkv, bias, graphs = tf.zeros((24, 1, 10, native.LANES)), tf.zeros(24), tf.zeros((24, 10, 10))
    values = tf.zeros((1, 2, 100, pattern.terms))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"expects skip \(W <= {native.LANES}, 10, 8\)"):
        _ops().sit_window_attention(
            qkv, tf.zeros((0, 24)), bias, graphs, values, pattern.indices, tf.zeros(skip_shape), num_heads=2
        )


def test_a_library_built_for_another_host_is_refused_with_the_reason(tmp_path, monkeypatch) -> None:
    host_file = tmp_path / "host.json"
    host_file.write_text(json.dumps({**build.host(), "cpu_flags": ["sse2"]}))
    monkeypatch.setattr(build, "HOST_FILE", host_file)
    monkeypatch.setattr(native, "_loaded", {})
    with pytest.warns(UserWarning, match="built for another CPU or TensorFlow"):
        assert native.library() is None
    assert "python -m sit_keras.native.build" in native.load_problem()
    assert build.main(["--check"]) == 1
