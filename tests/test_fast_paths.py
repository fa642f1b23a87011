"""The fast GSA paths compute exactly the reference function, values and gradients.

What this file proves:

- ``GraphSymmetricAttention(implementation="fast")`` equals the reference
  (the equations written literally) for every option, with both forms of
  the triangle sums (``"matrix"``, ``"pairs"``), with and without a class
  token, in training mode with graph-symmetric dropout and in inference
  mode: outputs and the gradients of the input and of every weight agree to
  1e-12 relative in float64;
- the same holds for whole encoders (sit, sit_star, set, siet, sit_dihedral,
  the MiniGrid preset, a single local block), whose fast path also folds
  the LayerNorm into the projection and starts the first local block from
  the pixels: to 1e-11 relative in float64 and 1e-4 in float32;
- a single local block, which computes only its class token's row, composes
  that row's scores from the pixels, the projection, ``G_q``, ``G_k`` and the
  constant class token, and equals the reference for every score option;
- both implementations have the same variables under the same names, so a
  checkpoint of one restores into the other;
- the ``pairs`` form (used by ``auto`` for large grids, e.g. the Procgen
  global grid) keeps the rotations and breaks the flips like the others,
  and compiles with XLA;
- the LayerNorm standardisation with its hand-written gradient equals
  Keras' LayerNorm without affine part;
- the channels-first projection, whose kernel gradient is formed as
  ``(dy x^T)^T`` (fast on CPU), is ``tf.matmul(W, x, transpose_a=True)``
  with its gradients for any shape, and compiles with XLA.

The comparisons of layers and encoders take their gradients under a tape, where
the fast path runs the native kernels (``sit_keras.native``, built by ``make
install``); each runs again with TensorFlow's builtin ops only
(``native.builtin_only``), so both forms of the fast path are held to the reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given
from hypothesis import strategies as st
from traced_ops import op_types

from sit_keras import graphs, native, testing
from sit_keras.layers import GraphSymmetricAttention, LocalGSA
from sit_keras.layers.channels_first import project_channels_first
from sit_keras.layers.normalization import standardize
from sit_keras.layers.triangle_sums import MAX_MATRIX_SCORES
from sit_keras.layers.xla_context import in_compiled_function
from sit_keras.models import build_encoder
from sit_keras.native import cpu

DROPOUT = 0.2
# Whole encoders stack six layers and sum their input and stem gradients over
# every pixel, in another order than the reference: float64 rounding reaches
# ~2e-12 there on most weight draws and 2.2e-11 on one (the 14x14 MiniGrid SiT,
# whose 196-token sums cancel), so encoders are held to the project's float64
# tolerance, 1e-10; single layers to 1e-12.
ENCODER_RTOL = {"float64": 1e-10, "float32": 1e-4}
MODES = pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
FORMS = pytest.mark.parametrize("triangle_form", ["matrix", "pairs", "gather"])


@pytest.fixture(autouse=True)
def _forget_the_global_seed() -> Iterator[None]:
    """These tests set TensorFlow's global seed: the next test in the worker must not inherit it
    (tf.data warns, and the warning is an error, when a function may reuse an outer seed)."""
    yield
    tf.random.set_seed(None)


@pytest.fixture(params=["native", "builtin"])
def kernels(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs with the native kernels, which must be usable here, then with builtin ops only."""
    if request.param == "builtin":
        with native.builtin_only():
            yield request.param
        return
    if native.load_problem() == cpu.NO_VECTOR_UNITS:
        pytest.skip(cpu.NO_VECTOR_UNITS)  # the layers keep their builtin ops by design there
    assert native.available(), f"the native kernels are not usable: {native.load_problem()}"
    yield request.param


def _values_and_gradients(layer, x: tf.Tensor, training: bool) -> list[np.ndarray]:
    """The outputs, then the gradients of a random projection of them for the input and every weight.

    The global seed is reset before the call, so that graph-symmetric
    dropout draws the same masks in both implementations (they draw them in
    the same order).
    """
    with tf.GradientTape() as tape:
        tape.watch(x)
        tf.random.set_seed(7)
        outputs = tf.nest.flatten(layer(x, training=training))
        projections = [
            tf.constant(np.random.default_rng(3 + n).normal(size=o.shape), o.dtype)
            for n, o in enumerate(outputs)
        ]
        loss = sum(tf.reduce_sum(o * p) for o, p in zip(outputs, projections, strict=True))
    gradients = tape.gradient(loss, [x, *layer.trainable_variables])
    return [o.numpy() for o in outputs] + [tf.convert_to_tensor(g).numpy() for g in gradients]


def _assert_same(reference: list[np.ndarray], fast: list[np.ndarray], rtol: float) -> None:
    """Each pair of arrays agrees to ``rtol`` in norm: ``|a - b| <= rtol |a|``."""
    assert len(reference) == len(fast)
    for n, (a, b) in enumerate(zip(reference, fast, strict=True)):
        scale = np.linalg.norm(a)
        assert scale > 0, f"array #{n} is zero: the comparison would prove nothing"
        error = np.linalg.norm(a - b) / scale
        assert error <= rtol, f"array #{n} of shape {a.shape} differs by {error:.2e} relative"


# -- the attention layer -----------------------------------------------------------
GSA_CASES = {
    "sit": {"triangles": 1},
    "sit_star": {"triangles": 2},
    "score_graph": {"triangles": 1, "score_graph": True},
    "mixing_antisymmetric": {
        "triangles": 1,
        "score_mixing": True,
        "antisymmetric": True,
        "score_graph": True,
    },
    "unsymmetrised": {"triangles": 2, "symmetrize": False},
    "no_triangles": {"triangles": 0, "antisymmetric": True},
    "no_triangles_unsymmetrised": {"triangles": 0, "symmetrize": False},
    "conv_graphs": {"triangles": 1, "graph_kernel_size": 3, "graph_form": "conv"},
    "query_key_norm": {"triangles": 1, "query_key_norm": True},
}


def _gsa_pair(
    grid: tuple[int, int], triangle_form: str, dim: int = 8, dtype: str = "float64", **options: Any
) -> tuple[GraphSymmetricAttention, GraphSymmetricAttention]:
    options = {"num_heads": 2, "graph_dropout": DROPOUT, "seed": 0, "dtype": dtype, **options}
    reference = GraphSymmetricAttention(grid, implementation="reference", **options)
    fast = GraphSymmetricAttention(grid, implementation="fast", triangle_form=triangle_form, **options)
    for layer in (reference, fast):
        layer.build((None, layer.num_tokens, dim))
    testing.perturb_weights(reference, 0.3)
    fast.set_weights(reference.get_weights())
    return reference, fast


@MODES
@FORMS
@pytest.mark.parametrize("class_token", [True, False], ids=["class_token", "grid_only"])
@pytest.mark.parametrize("case", list(GSA_CASES))
def test_fast_gsa_equals_the_reference(
    case: str, class_token: bool, triangle_form: str, training: bool, kernels: str
) -> None:
    reference, fast = _gsa_pair((4, 4), triangle_form, class_token=class_token, **GSA_CASES[case])
    x = tf.constant(np.random.default_rng(1).normal(size=(3, reference.num_tokens, 8)))
    _assert_same(
        _values_and_gradients(reference, x, training), _values_and_gradients(fast, x, training), 1e-12
    )


@FORMS
@pytest.mark.parametrize("case", ["sit", "sit_star", "unsymmetrised", "score_graph"])
def test_every_weight_gets_a_dense_gradient(case: str, triangle_form: str, kernels: str) -> None:
    # A sparse (IndexedSlices) gradient of the eq. 8 angle tables would reach Adam as thousands of
    # rows of a table of a few, which it deduplicates with a sort (slow under XLA).
    # Without graph dropout: its mask would make the tables' gradient dense whatever the gather.
    reference, fast = _gsa_pair((4, 4), triangle_form, graph_dropout=0.0, **GSA_CASES[case])
    x = tf.constant(np.random.default_rng(2).normal(size=(2, reference.num_tokens, 8)))
    for layer in (reference, fast):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x, training=True) ** 2)
        for variable, gradient in zip(
            layer.trainable_variables, tape.gradient(loss, layer.trainable_variables), strict=True
        ):
            assert isinstance(gradient, tf.Tensor), f"{variable.name}: {type(gradient).__name__}"


@given(
    batch=st.integers(1, 5),
    height=st.integers(2, 5),
    width=st.integers(2, 5),
    triangles=st.sampled_from([1, 2]),
    triangle_form=st.sampled_from(["matrix", "pairs", "gather"]),
    builtin=st.booleans(),
)
def test_fast_gsa_equals_the_reference_for_any_batch_and_grid(
    batch: int, height: int, width: int, triangles: int, triangle_form: str, builtin: bool
) -> None:
    reference, fast = _gsa_pair((height, width), triangle_form, triangles=triangles, score_graph=True)
    x = tf.constant(np.random.default_rng(batch).normal(size=(batch, reference.num_tokens, 8)))
    expected = _values_and_gradients(reference, x, True)
    with native.builtin_only() if builtin else contextlib.nullcontext():
        _assert_same(expected, _values_and_gradients(fast, x, True), 1e-12)


def test_auto_uses_the_matrix_for_windows_and_for_large_grids_pairs_or_under_xla_gathers() -> None:
    small, _ = _gsa_pair((4, 4), "auto", triangles=1)  # T^2 = 289
    large, _ = _gsa_pair((8, 8), "auto", triangles=1)  # T^2 = 4225
    assert small.num_tokens**2 <= MAX_MATRIX_SCORES < large.num_tokens**2
    for compiled in (False, True):
        assert small._triangle_sums.resolve_form("auto", compiled) == "matrix"
        assert small._triangle_sums.resolve_form("pairs", compiled) == "pairs"
    assert large._triangle_sums.resolve_form("auto", compiled=False) == "pairs"
    assert large._triangle_sums.resolve_form("auto", compiled=True) == "gather"


def test_a_layer_knows_when_xla_compiles_it() -> None:
    seen = []

    def trace(x: tf.Tensor) -> tf.Tensor:
        seen.append(in_compiled_function())
        return x

    tf.function(trace, jit_compile=True)(tf.constant(1.0))
    tf.function(trace)(tf.constant(2.0))
    trace(tf.constant(3.0))
    assert seen == [True, False, False]


def test_auto_under_xla_equals_the_reference() -> None:
    """The large grid's ``auto`` takes the gathers under XLA and the pairs in a graph: the same values."""
    reference, fast = _gsa_pair((8, 8), "auto", triangles=1)
    x = tf.constant(np.random.default_rng(4).normal(size=(2, reference.num_tokens, 8)))
    expected = reference(x, training=False)
    for jit_compile in (False, True):
        got = tf.function(lambda z: fast(z, training=False), jit_compile=jit_compile)(x)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-12)


@MODES
def test_pairs_form_keeps_rotations_breaks_flips_and_compiles(training: bool) -> None:
    _, layer = _gsa_pair((4, 4), "pairs", triangles=1, score_graph=True)
    x = tf.constant(np.random.default_rng(2).normal(size=(2, layer.num_tokens, 8)))

    def f(z: tf.Tensor) -> tf.Tensor:
        tf.random.set_seed(5)  # the same dropout masks for x and g x
        return layer(z, training=training)

    def act(name: str) -> testing.Transform:
        # The token at vertex v moves to g(v); the class token stays first.
        order = np.concatenate([[0], 1 + np.argsort(graphs.grid_permutation((4, 4), name))])
        return lambda z: tf.gather(z, order, axis=1)

    rotations = {name: act(name) for name in testing.ROTATIONS}
    flips = {name: act(name) for name in testing.REFLECTIONS}
    testing.assert_equivariant(f, x, rotations)
    for name, g in flips.items():
        assert testing.equivariance_error(f, x, g) > 1e-4, name
    compiled = tf.function(lambda z: layer(z, training=False), jit_compile=True)
    np.testing.assert_allclose(compiled(x).numpy(), layer(x, training=False).numpy(), rtol=1e-10, atol=1e-10)


def _local_pair(window: int, stride: int | None, num_layers: int, **options: Any) -> dict[str, LocalGSA]:
    """A reference and a fast ``LocalGSA`` on 4x4x3 maps with the same perturbed weights."""
    layers = {}
    for implementation in ("reference", "fast"):
        layer = LocalGSA(
            window=window,
            stride=stride,
            num_layers=num_layers,
            dim=8,
            num_heads=2,
            graph_dropout=DROPOUT,
            seed=0,
            implementation=implementation,
            dtype="float64",
            **{"triangles": 1, **options},
        )
        layer.build((None, 4, 4, 3))
        layers[implementation] = layer
    testing.perturb_weights(layers["reference"], 0.1)
    layers["fast"].set_weights(layers["reference"].get_weights())
    return layers


def _assert_local_pair_agrees(layers: dict[str, LocalGSA], x: tf.Tensor) -> None:
    # The composed path computes the LayerNorm variance as a quadratic form
    # in the pixel (a different rounding than the mean of squares): 1e-11.
    for training in (True, False):
        _assert_same(
            _values_and_gradients(layers["reference"], x, training),
            _values_and_gradients(layers["fast"], x, training),
            1e-11,
        )


@pytest.mark.parametrize(
    "window, stride, num_layers",
    [(2, None, 2), (2, None, 1), (3, 1, 2), (3, 1, 1)],
    ids=["tiling", "tiling-token_only", "sliding", "sliding-token_only"],
)
def test_local_gsa_from_pixels_equals_the_reference_and_compiles(
    window: int, stride: int | None, num_layers: int, kernels: str
) -> None:
    # Sliding windows zero-pad the map: the padded tokens must match the
    # reference's zero tokens; a single block's skip is its class token alone.
    layers = _local_pair(window, stride, num_layers)
    x = tf.constant(np.random.default_rng(4).uniform(size=(3, 4, 4, 3)))
    _assert_local_pair_agrees(layers, x)
    compiled = tf.function(lambda z: layers["fast"](z, training=False), jit_compile=True)
    reference = layers["reference"](x).numpy()
    # XLA may sum in another order: an output that cancels to near 0 keeps an error of the
    # operands' scale (3e-12 seen under load), so the absolute tolerance is relative to that scale.
    np.testing.assert_allclose(
        compiled(x).numpy(), reference, rtol=1e-10, atol=1e-10 * np.abs(reference).max()
    )


@pytest.mark.parametrize(
    "options",
    [
        {"antisymmetric": True},
        {"symmetrize": False},
        {"graph_qkv": "v"},
        {"graph_qkv": "qk"},
        {"graph_qkv": ""},
        {"query_key_norm": True},  # not linear in the pixels: the layer keeps the projected path
    ],
    ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()),
)
def test_a_single_local_block_equals_the_reference_for_every_score_option(
    options: dict, kernels: str
) -> None:
    """One local block computes only its class token's row from the pixels: its scores are composed
    from the projection, ``G_q``, ``G_k`` and the constant class token (``attend_constant_class_token``),
    and with the native kernels its values are one op (``native.class_token_values``), which a train step
    runs wherever the scores are linear in the pixels."""
    x = tf.constant(np.random.default_rng(6).uniform(size=(3, 4, 4, 3)))
    layers = _local_pair(3, 1, 1, **options)
    _assert_local_pair_agrees(layers, x)

    @tf.function
    def gradient(z: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            out = layers["fast"](z, training=True)
        return tape.gradient(out, layers["fast"].trainable_variables)

    linear = "query_key_norm" not in options  # else the layer projects every token (it keeps no op)
    assert ("SitClassTokenValuesGrad" in op_types(gradient, x)) == (kernels == "native" and linear)


def test_the_composed_class_token_row_refuses_scores_that_are_not_linear() -> None:
    layer = GraphSymmetricAttention((2, 2), num_heads=2, query_key_norm=True)
    layer.build((None, 5, 4))
    with pytest.raises(ValueError, match="query_key_norm=False"):
        layer.attend_constant_class_token(tf.zeros((3, 1, 5)), tf.zeros((3, 12)), tf.zeros((12,)))


# -- whole encoders ------------------------------------------------------------------
ENCODER_CASES = {
    "sit": ("sit", (16, 16, 3), {}),
    "sit_star": ("sit_star", (16, 16, 3), {}),
    "set": ("set", (16, 16, 3), {}),
    "siet": ("siet", (16, 16, 3), {}),
    "sit_dihedral": ("sit_dihedral", (16, 16, 3), {}),
    "minigrid": ("sit", (14, 14, 3), {"preset": "minigrid"}),
    "one_local_block": ("sit", (16, 16, 3), {"local_layers": 1}),
    "global_pairs": ("sit", (16, 16, 3), {"window": 2}),  # 4x4 global grid + token: T^2 = 289
    "query_key_norm": ("sit", (16, 16, 3), {"query_key_norm": True}),
}


@MODES
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(ENCODER_CASES))
def test_fast_encoder_equals_the_reference(case: str, dtype: str, training: bool, kernels: str) -> None:
    name, shape, overrides = ENCODER_CASES[case]
    tf_keras.utils.set_random_seed(0)  # the Dense initialisers: the same weights whatever ran before
    encoders = {
        implementation: build_encoder(
            name,
            shape,
            dtype=dtype,
            graph_dropout=DROPOUT,
            seed=0,
            implementation=implementation,
            **overrides,
        )
        for implementation in ("reference", "fast")
    }
    reference, fast = encoders["reference"], encoders["fast"]
    # The same variables under the same names (below the model's own, uniquified, scope).
    assert [v.name.split("/", 1)[1] for v in fast.weights] == [
        v.name.split("/", 1)[1] for v in reference.weights
    ]
    testing.perturb_weights(reference, 0.1)
    fast.set_weights(reference.get_weights())
    x = tf.constant(np.random.default_rng(5).uniform(size=(2, *shape)), dtype)
    _assert_same(
        _values_and_gradients(reference, x, training),
        _values_and_gradients(fast, x, training),
        ENCODER_RTOL[dtype],
    )


def test_a_checkpoint_of_one_implementation_restores_into_the_other(tmp_path) -> None:
    reference = build_encoder("siet", (16, 16, 3), implementation="reference", seed=0)
    testing.perturb_weights(reference, 0.1)
    tf.train.Checkpoint(encoder=reference).write(str(tmp_path / "ckpt"))
    fast = build_encoder("siet", (16, 16, 3), implementation="fast", seed=1)
    tf.train.Checkpoint(encoder=fast).read(str(tmp_path / "ckpt")).assert_consumed()
    x = tf.constant(np.random.default_rng(6).uniform(size=(2, 16, 16, 3)), tf.float32)
    np.testing.assert_allclose(fast(x).numpy(), reference(x).numpy(), rtol=1e-4, atol=1e-5)


# -- pieces ----------------------------------------------------------------------------
def test_standardize_equals_layer_normalization_without_affine_part() -> None:
    x = tf.constant(np.random.default_rng(8).normal(size=(4, 5, 16)) * 3.0 + 1.0)
    norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, center=False, scale=False, dtype="float64")
    upstream = tf.constant(np.random.default_rng(9).normal(size=(4, 5, 16)))
    results = []
    for fn in (norm, lambda z: standardize(z, 1e-6)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        results.append([y.numpy(), tape.gradient(y, x, output_gradients=upstream).numpy()])
    _assert_same(*results, 1e-12)


def _projection_values_and_gradients(project, kernel: tf.Tensor, x: tf.Tensor, upstream: tf.Tensor) -> list:
    with tf.GradientTape() as tape:
        tape.watch([kernel, x])
        y = project(kernel, x)
    return [y, *tape.gradient(y, [kernel, x], output_gradients=upstream)]


@given(rows=st.integers(1, 9), outputs=st.integers(1, 12), columns=st.integers(1, 40))
def test_the_channels_first_projection_is_tensorflows_matmul_with_its_gradients(
    rows: int, outputs: int, columns: int
) -> None:
    rng = np.random.default_rng(rows * 1000 + outputs * 50 + columns)
    kernel, x = (tf.constant(rng.normal(size=shape)) for shape in [(rows, outputs), (rows, columns)])
    upstream = tf.constant(rng.normal(size=(outputs, columns)))
    expected = _projection_values_and_gradients(
        lambda w, v: tf.matmul(w, v, transpose_a=True), kernel, x, upstream
    )
    got = _projection_values_and_gradients(project_channels_first, kernel, x, upstream)
    assert [g.shape for g in got] == [(outputs, columns), (rows, outputs), (rows, columns)]
    _assert_same([e.numpy() for e in expected], [g.numpy() for g in got], 1e-12)


def test_the_channels_first_projection_differentiates_a_variable_kernel() -> None:
    kernel = tf.Variable(np.random.default_rng(4).normal(size=(3, 5)))
    x = tf.constant(np.random.default_rng(5).normal(size=(3, 7)))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(project_channels_first(kernel, x))
    np.testing.assert_allclose(tape.gradient(total, kernel).numpy(), np.tile(x.numpy().sum(1)[:, None], 5))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_channels_first_projection_compiles_in_the_compute_dtype(dtype: str) -> None:
    rng = np.random.default_rng(3)
    kernel, x = (tf.constant(rng.normal(size=shape), dtype) for shape in [(6, 8), (6, 50)])
    upstream = tf.constant(rng.normal(size=(8, 50)), dtype)
    compiled = tf.function(
        lambda w, v: _projection_values_and_gradients(project_channels_first, w, v, upstream),
        jit_compile=True,
    )
    got = compiled(kernel, x)
    expected = _projection_values_and_gradients(
        lambda w, v: tf.matmul(w, v, transpose_a=True), kernel, x, upstream
    )
    tolerance = {"float32": 1e-5, "bfloat16": 5e-2}[dtype]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == tf.as_dtype(dtype)
        np.testing.assert_allclose(
            tf.cast(g, tf.float32).numpy(),
            tf.cast(e, tf.float32).numpy(),
            rtol=tolerance,
            atol=tolerance * 10,
        )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"implementation": "quick"}, "implementation must be one of"),
        ({"triangle_form": "sparse"}, "triangle_form must be one of"),
    ],
)
def test_invalid_implementation_options_raise(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GraphSymmetricAttention((3, 3), num_heads=2, **options)
