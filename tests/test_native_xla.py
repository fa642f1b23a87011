"""The native kernels inside XLA (``sit_keras/native/xla/xla_kernels.cc``, ``native.XLA_LIBRARY``).

What this file proves:

- where LLVM's headers are installed the build makes the XLA library and it loads;
- under ``jit_compile=True`` the stem's depth-wise convolution, the max-pooling and the channels-first
  projection run as custom calls to the kernels' code: float64 values and gradients equal TensorFlow's
  ops (the pooling exactly, ties included; the others to rounding) on shapes that are multiples of
  nothing, and float32 ones equal the same ops outside XLA bit for bit;
- so do the GSA layers' ops (the window and class-token attention, with a kernel or without, dense or
  in the quarter turn's orbits, and the standardising op): float64 values and every gradient equal the
  same ops outside XLA (whose formulas ``tests/test_native.py`` proves) to rounding;
- a SiT's and a SieT's train step compiled by XLA runs every native op, and its float32 values and
  gradients are those of the graph-mode step to float32 rounding; without the XLA library, inside
  ``native.without_xla_kernels()``, or for ops it does not name, a compiled function keeps TensorFlow's ops;
- malformed shapes, and indices out of range or not constant, fail the compilation with the op's message;
- a library loaded after the process ran its first op (when XLA lists its kernels, once) still registers
  its kernels.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from invariant_graphs import invariant_graphs
from traced_ops import custom_calls, needs_xla_kernels, op_types

from sit_keras import native
from sit_keras.encoder_check import make_train_step
from sit_keras.layers.channels_first import project_channels_first
from sit_keras.layers.triangle_sums import TriangleSums
from sit_keras.models import build_encoder
from sit_keras.native import build

NATIVE_OPS = {"SitMaxPool", "SitChannelsFirstProjection", "SitWindowAttention"}
# The host functions of the native ops (xla/xla_kernels.cc), each a forward and a gradient.
XLA_TARGETS = [
    f"sit_{op}{grad}"
    for op in ("depthwise_conv", "max_pool", "channels_first_projection", "window_attention",
               "class_token_attention", "standardized_lanes")
    for grad in ("", "_kernel_grad" if op in ("depthwise_conv", "channels_first_projection") else "_grad")
]  # fmt: skip


@pytest.mark.skipif(build.llvm_headers() is None, reason=build.NO_LLVM_HEADERS)
def test_where_llvms_headers_are_installed_the_xla_library_is_built_and_loads() -> None:
    assert native.available(), native.load_problem()
    assert native.XLA_LIBRARY.exists()
    assert native.xla_load_problem() is None


def _pool_with_gradient(
    x: tf.Tensor, dy: tf.Tensor, size: int, use_native: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = native.max_pool(x, size) if use_native else tf.nn.max_pool2d(x, size, size, "VALID")
    return y, tape.gradient(y, x, output_gradients=dy)


shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 11), st.integers(1, 11), st.integers(1, 4), st.integers(1, 3)
)


@needs_xla_kernels
@settings(deadline=None, max_examples=15)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_under_xla_the_pooling_is_the_kernels_and_equals_tensorflows(shape: tuple, seed: int) -> None:
    images, height, width, channels, size = shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.integers(0, 3, size=(images, height, width, channels)), tf.float64)  # ties
    dy = tf.constant(rng.normal(size=(images, height // size, width // size, channels)))
    compiled = tf.function(lambda x, dy: _pool_with_gradient(x, dy, size, True), jit_compile=True)
    assert {"sit_max_pool_f64", "sit_max_pool_grad_f64"} <= custom_calls(compiled, x, dy)
    pooled, gradient = _pool_with_gradient(x, dy, size, False)
    if 0 in dy.shape:  # no window fits: TensorFlow's gradient is memory it never wrote, the kernel's zero
        gradient = np.zeros(x.shape)
    for got, want in zip(compiled(x, dy), [pooled, gradient], strict=True):
        np.testing.assert_array_equal(got, want)


def _stem_with_gradients(
    x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor, dy: tf.Tensor, use_native: bool
) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch([x, kernel, bias])
        if use_native:
            y = native.depthwise_conv(x, kernel, bias)
        else:
            y = tf.nn.depthwise_conv2d(x, kernel[..., None], [1, 1, 1, 1], "SAME") + bias
    return [y, *tape.gradient(y, [x, kernel, bias], output_gradients=dy)]


@needs_xla_kernels
@settings(deadline=None, max_examples=15)
@given(shape=shapes, side=st.sampled_from([1, 3, 5]), seed=st.integers(0, 2**16))
def test_under_xla_the_stem_is_the_kernels_and_equals_tensorflows(shape: tuple, side: int, seed: int) -> None:
    images, height, width, channels, _ = shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(images, height, width, channels)))
    kernel = tf.constant(rng.normal(size=(side, side, channels)))
    bias = tf.constant(rng.normal(size=(channels,)))
    dy = tf.constant(rng.normal(size=x.shape))
    compiled = tf.function(lambda *args: _stem_with_gradients(*args, True), jit_compile=True)
    assert {"sit_depthwise_conv_f64", "sit_depthwise_conv_kernel_grad_f64"} <= custom_calls(
        compiled, x, kernel, bias, dy
    )
    expected = _stem_with_gradients(x, kernel, bias, dy, False)
    for got, want in zip(compiled(x, kernel, bias, dy), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _projection_with_gradients(kernel: tf.Tensor, x: tf.Tensor, dy: tf.Tensor, project) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch([kernel, x])
        y = project(kernel, x)
    return [y, *tape.gradient(y, [kernel, x], output_gradients=dy)]


@needs_xla_kernels
@settings(deadline=None, max_examples=15)
@given(
    rows=st.integers(1, 9), outputs=st.integers(1, 13), columns=st.integers(1, 1100), seed=st.integers(0, 99)
)
def test_under_xla_the_projection_is_the_kernels_and_equals_a_matmul(
    rows: int, outputs: int, columns: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    kernel, x = tf.constant(rng.normal(size=(rows, outputs))), tf.constant(rng.normal(size=(rows, columns)))
    dy = tf.constant(rng.normal(size=(outputs, columns)))
    compiled = tf.function(
        lambda *args: _projection_with_gradients(*args, project_channels_first), jit_compile=True
    )
    with native.projection_gradients_by_the_ops():  # the gradients' kernels too, on a oneDNN host as well
        calls = custom_calls(compiled, kernel, x, dy)
        results = compiled(kernel, x, dy)
    assert {"sit_channels_first_projection_f64", "sit_channels_first_projection_kernel_grad_f64"} <= calls

    def matmul(w: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
        return tf.matmul(w, inputs, transpose_a=True)

    for got, want in zip(results, _projection_with_gradients(kernel, x, dy, matmul), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _attention_with_gradients(inputs: list[tf.Tensor], attend, upstream: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = attend(*inputs)
        loss = tf.reduce_sum(out * upstream)
    return [out, *tape.gradient(loss, inputs)]


@needs_xla_kernels
@settings(deadline=None, max_examples=12)
@given(
    windows=st.sampled_from([1, 9, 37, 130]),  # 130: enough blocks for the quarter turn's spectra
    heads=st.sampled_from([1, 2]),
    head_dim=st.sampled_from([2, 5]),
    maps=st.integers(1, 2),
    form=st.sampled_from(["window", "window_with_kernel", "class_token"]),
    orbits=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_under_xla_the_attention_ops_are_the_kernels_and_equal_the_ops_outside_it(
    windows: int, heads: int, head_dim: int, maps: int, form: str, orbits: bool, seed: int
) -> None:
    """Values and the gradients of every input, float64; the graphs C4-invariant on a 2x2 grid after a class
    token, so that given the turn's ``orbits`` and 130 windows the ops take their spectral form."""
    rng = np.random.default_rng(seed)
    sums = TriangleSums((2, 2), class_token=True)
    pattern, t, dim = sums.pattern(1, True), sums.num_tokens, heads * head_dim
    graphs, turn = invariant_graphs(rng, 3 * dim, 2)
    graphs = graphs.reshape(3 * dim, t, t)
    turn = turn if orbits else None
    rows = 3 if form == "window_with_kernel" else 3 * dim
    x = native.lane_blocks(tf.constant(rng.normal(size=(rows, windows, t))))
    inputs = [x, tf.constant(rng.normal(size=3 * dim)), tf.constant(graphs)]
    if form == "class_token":
        coefficients = tf.constant(rng.normal(size=(maps, 2)))

        def attend(qkv, bias, graphs):
            return native.class_token_attention(qkv, bias, graphs, coefficients, heads, orbits=turn)

        targets = {"sit_class_token_attention_f64", "sit_class_token_attention_grad_f64"}
        out_tokens = 1
    else:
        inputs.append(pattern.values_of(tf.constant(rng.normal(size=(maps, heads, t * t, t * t)))))
        if form == "window_with_kernel":
            inputs.append(tf.constant(rng.normal(size=(rows, 3 * dim))))

        def attend(qkv, bias, graphs, values, kernel=None):
            return native.window_attention(qkv, bias, graphs, values, pattern, heads, kernel, orbits=turn)

        targets = {"sit_window_attention_f64", "sit_window_attention_grad_f64"}
        out_tokens = t
    padded = x.shape[1] * native.LANES
    upstream = tf.constant(rng.normal(size=(padded, out_tokens, dim)))
    compiled = tf.function(
        lambda *args: _attention_with_gradients(list(args), attend, upstream), jit_compile=True
    )
    assert targets <= custom_calls(compiled, *inputs)
    want = _attention_with_gradients(inputs, attend, upstream)
    for got, expected in zip(compiled(*inputs), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@needs_xla_kernels
@settings(deadline=None, max_examples=10)
@given(
    windows=st.integers(1, 40),
    tokens=st.integers(1, 6),
    channels=st.integers(1, 40),
    skip_tokens=st.integers(0, 6),
    seed=st.integers(0, 2**16),
)
def test_under_xla_the_standardizing_op_is_the_kernels_and_equals_the_op_outside_it(
    windows: int, tokens: int, channels: int, skip_tokens: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    skip_tokens = min(skip_tokens, tokens)
    x = tf.constant(rng.normal(size=(windows, tokens, channels)) * 3.0 + 1.0)
    upstream = tf.constant(rng.normal(size=(channels, -(-windows // native.LANES), tokens, native.LANES)))
    skip_upstream = tf.constant(rng.normal(size=(windows, skip_tokens, channels)))

    def standardized(x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, skip = native.standardized_lane_blocks(x, 1e-6, skip_tokens)
            loss = tf.reduce_sum(y * upstream) + tf.reduce_sum(skip * skip_upstream)
        return [y, skip, tape.gradient(loss, x)]

    compiled = tf.function(standardized, jit_compile=True)
    assert {"sit_standardized_lanes_f64", "sit_standardized_lanes_grad_f64"} <= custom_calls(compiled, x)
    for got, want in zip(compiled(x), standardized(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@needs_xla_kernels
def test_float32_results_under_xla_are_the_same_bits_as_outside_it() -> None:
    rng = np.random.default_rng(3)
    images = tf.constant(rng.normal(size=(5, 13, 9, 3)), tf.float32)
    kernel = tf.constant(rng.normal(size=(7, 11)), tf.float32)
    tokens = tf.constant(rng.normal(size=(7, 3001)), tf.float32)

    stem = tf.constant(rng.normal(size=(3, 3, 3)), tf.float32)

    def step(images: tf.Tensor, kernel: tf.Tensor, tokens: tf.Tensor, stem: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([images, kernel, tokens, stem])
            pooled = native.max_pool(native.depthwise_conv(images, stem), 2)
            projected = native.project_channels_first(kernel, tokens)
            loss = tf.reduce_sum(pooled * pooled) + tf.reduce_sum(projected * projected)
        return [pooled, projected, *tape.gradient(loss, [images, kernel, tokens, stem])]

    graph = tf.function(step)(images, kernel, tokens, stem)
    compiled = tf.function(step, jit_compile=True)(images, kernel, tokens, stem)
    for a, b in zip(graph, compiled, strict=True):
        np.testing.assert_array_equal(a, b)


def _loss_and_gradients(encoder: tf.keras.Model, images: tf.Tensor, jit_compile: bool) -> list[np.ndarray]:
    @tf.function(jit_compile=jit_compile)
    def step(images: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            features = encoder(images, training=False)
            loss = tf.reduce_sum(features * features)
        return [loss, *map(tf.convert_to_tensor, tape.gradient(loss, encoder.trainable_variables))]

    return [value.numpy() for value in step(images)]


@needs_xla_kernels
@pytest.mark.parametrize("variant", ["sit", "siet"])
def test_an_xla_train_step_runs_every_native_op_and_matches_the_graph_step(variant: str) -> None:
    """With the projection's gradients by its ops, which a oneDNN host takes from matmuls instead."""
    encoder = build_encoder(variant, (16, 16, 3), dim=16, num_heads=2)
    images = tf.random.uniform((21, 16, 16, 3), seed=4)
    with native.projection_gradients_by_the_ops():
        calls = custom_calls(make_train_step(encoder, jit_compile=True), images)
        graph, compiled = (_loss_and_gradients(encoder, images, jit) for jit in (False, True))
    assert {f"{name}_f32" for name in XLA_TARGETS} <= calls
    for a, b in zip(graph, compiled, strict=True):  # the same ops; XLA's own fusions round differently
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5 * float(np.max(np.abs(a))))


@needs_xla_kernels
def test_a_sits_xla_train_step_runs_the_kernels_and_without_the_library_tensorflows_ops(monkeypatch) -> None:
    sit = build_encoder("sit", (16, 16, 3), dim=16, num_heads=2)
    images = tf.random.uniform((3, 16, 16, 3))
    monkeypatch.setattr(native, "projection_gradients_by_matmul", lambda: False)  # every kernel, any host
    calls = custom_calls(make_train_step(sit, jit_compile=True), images)
    assert {f"{name}_f32" for name in XLA_TARGETS} <= calls
    with native.without_xla_kernels():  # what benchmarks/encoders.py compares them with
        assert not custom_calls(make_train_step(sit, jit_compile=True), images)
        assert NATIVE_OPS <= op_types(make_train_step(sit, jit_compile=False), images)  # graphs keep them
    monkeypatch.setitem(native._loaded, "xla_problem", "not built")
    assert not custom_calls(make_train_step(sit, jit_compile=True), images)


@needs_xla_kernels
def test_in_a_compiled_function_only_ops_with_an_xla_kernel_are_usable() -> None:
    @tf.function(jit_compile=True)
    def usable() -> tf.Tensor:
        with tf.GradientTape():
            flags = [
                native.usable(tf.float32, native.POOL_OPS),
                native.usable(tf.float32, native.PROJECTION_OPS),
                native.usable(tf.float32, native.STEM_OPS),
                native.usable(tf.float32, native.ATTENTION_OPS),
                native.usable(tf.float32),  # ops not named: none known to have an XLA kernel
                native.usable(tf.float32, native.POOL_OPS | {"SitNotAnOp"}),
            ]
        return tf.constant(flags)

    assert usable().numpy().tolist() == [True, True, True, True, False, False]


@needs_xla_kernels
@pytest.mark.parametrize(
    "op, inputs, message",
    [
        ("sit_max_pool", [(4, 4, 3)], r"SitMaxPool expects x \(B, H, W, C\); got \[4,4,3\]"),
        (
            "sit_max_pool_grad",
            [(1, 4, 4, 3), (1, 2, 2, 3), (1, 2, 3, 3)],
            r"expects y and dy \[1,2,2,3\] for x \[1,4,4,3\] and size 2",
        ),
        (
            "sit_channels_first_projection",
            [(3, 5), (4, 7)],
            r"expects a kernel \(R, N\) and x \(R, L\) with the same R; got \[3,5\] and \[4,7\]",
        ),
        (
            "sit_channels_first_projection_kernel_grad",
            [(5, 6), (3, 7)],
            r"expects dy \(N, L\) and x \(R, L\) with the same L; got \[5,6\] and \[3,7\]",
        ),
        (
            "sit_depthwise_conv",
            [(2, 5, 5, 3), (2, 2, 3), (3,)],
            r"SitDepthwiseConv expects x \(B, H, W, C\) and a kernel \(k, k, 3\) with k odd; "
            r"got \[2,5,5,3\] and \[2,2,3\]",
        ),
        (
            "sit_depthwise_conv",
            [(2, 5, 5, 3), (3, 3, 3), (2,)],
            r"SitDepthwiseConv expects a bias \[3\]; got \[2\]",
        ),
        (
            "sit_depthwise_conv_kernel_grad",
            [(2, 5, 4, 3), (2, 5, 5, 3), (3, 3, 3)],
            r"SitDepthwiseConvKernelGrad expects dy of x's shape \[2,5,5,3\]; got \[2,5,4,3\]",
        ),
        (
            "sit_class_token_attention",
            [(25, 1, 10, native.LANES), (25,), (25, 10, 10), (1, 2)],
            r"SitWindowAttention expects qkv \(3 H d, B / \d+, T, \d+\) with H = 2",
        ),
        (
            "sit_class_token_attention_grad",
            [(8, 1, 12), (24, 1, 10, native.LANES), (24,), (24, 10, 10), (1, 2)],
            r"SitClassTokenAttentionGrad expects dout \(\d+, 1, 8\); got \[8,1,12\]",
        ),
        (
            "sit_standardized_lanes",
            [(4, 64), ()],
            r"SitStandardizedLanes expects tokens \(B, T, D\) and a scalar epsilon; got \[4,64\]",
        ),
        (
            "sit_standardized_lanes_grad",
            [(64, 1, 17, native.LANES), (4, 17, 64), (), (4, 18, 64)],
            r"SitStandardizedLanesGrad expects skip_dy \(4, K <= 17, 64\); got \[4,18,64\]",
        ),
    ],
    ids=[
        "pool_rank",
        "pool_grad_shapes",
        "projection_rows",
        "kernel_grad_columns",
        "stem_kernel",
        "stem_bias",
        "stem_dy",
        "class_token_qkv",
        "class_token_dout",
        "standardize_rank",
        "standardize_skip",
    ],  # fmt: skip
)
def test_malformed_shapes_fail_the_compilation_with_the_ops_message(
    op: str, inputs: list, message: str
) -> None:
    """Traced with unknown shapes (the ops' shape functions would refuse known ones first), so that the
    XLA kernels see the shapes when XLA compiles."""
    attributes = {"size": 2} if op.startswith("sit_max_pool") else {}
    attributes = {"num_heads": 2} if op.startswith("sit_class_token") else attributes
    signature = [tf.TensorSpec(None, tf.float32)] * len(inputs)
    compiled = tf.function(
        lambda *args: getattr(native.library(), op)(*args, **attributes),
        input_signature=signature,
        jit_compile=True,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        compiled(*[tf.zeros(shape) for shape in inputs])


@needs_xla_kernels
def test_under_xla_the_window_ops_check_their_indices_when_they_compile() -> None:
    """The indices must be constants of the compiled function, in range: the kernel reads them then."""
    pattern = TriangleSums((3, 3), class_token=True).pattern(1, True)  # T = 10, 100 token pairs
    inputs = [tf.zeros((24, 1, 10, native.LANES)), tf.zeros((0, 24)), tf.zeros(24), tf.zeros((24, 10, 10))]
    values = tf.zeros((1, 2, 100, pattern.terms))
    attend = native.library().sit_window_attention
    no_skip = tf.zeros((0, 10, 8))
    outside = pattern.indices.copy()
    outside[3, 0] = 100  # one past the pairs

    @tf.function(jit_compile=True)
    def out_of_range() -> tf.Tensor:
        return attend(*inputs, values, tf.constant(outside), no_skip, num_heads=2)

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"index 100 is outside \[0, 100\)"):
        out_of_range()

    @tf.function(jit_compile=True)
    def computed() -> tf.Tensor:  # indices XLA cannot know when it compiles
        noise = tf.cast(tf.random.uniform(pattern.indices.shape, maxval=0.5), tf.int32)
        return attend(*inputs, values, tf.constant(pattern.indices) + noise, no_skip, num_heads=2)

    with pytest.raises(tf.errors.InvalidArgumentError, match="constant"):
        computed()


@needs_xla_kernels
def test_a_library_loaded_after_the_first_op_registers_its_xla_kernels() -> None:
    script = textwrap.dedent(
        """
        import sit_keras.quiet_start
        import tensorflow as tf
        x = tf.random.uniform((2, 6, 6, 1))  # the process's first op: XLA lists its kernels now
        from sit_keras import native
        assert native.xla_load_problem() is None, native.xla_load_problem()
        pooled = tf.function(lambda x: native.max_pool(x, 3), jit_compile=True)(x)
        assert (pooled.numpy() == tf.nn.max_pool2d(x, 3, 3, "VALID").numpy()).all()
        from sit_keras.layers.triangle_sums import TriangleSums
        pattern = TriangleSums((3, 3), class_token=True).pattern(1, True)  # with constant indices
        qkv = tf.random.uniform((24, 1, 10, native.LANES))
        graphs, values = tf.random.uniform((24, 10, 10)), tf.ones((1, 2, 100, pattern.terms))
        bias = tf.zeros(24)
        attend = lambda: native.window_attention(qkv, bias, graphs, values, pattern, 2)
        assert (tf.function(attend, jit_compile=True)().numpy() == attend().numpy()).all()
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
