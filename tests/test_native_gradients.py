"""The CNNs' native convolutions and gradients under XLA (``conv2d.cc``, ``conv_kernel_grad.cc``,
``SitStridedMaxPoolGrad`` of ``max_pool.cc``, ``sit_keras.layers.native_gradients``).

What this file proves:

- ``SitConv2D`` is ``tf.nn.conv2d(x, kernel, 1, "SAME")`` and, with the kernel turned, its input's
  gradient: float64 values equal TensorFlow's to rounding on widths and channel counts that take each of
  its passes, in a graph and under XLA, the same bits in both and, in float32, on every run;
- ``SitConv2DKernelGrad`` is the kernel gradient of a stride-1 "same" convolution: float64 values equal
  TensorFlow's ``Conv2DBackpropFilter`` to rounding on shapes that are multiples of nothing (runs longer than
  the sums a pass keeps in registers included), in a graph and under XLA, the same bits in both and on
  every run;
- ``SitStridedMaxPoolGrad`` is the gradient of ``tf.nn.max_pool2d(x, k, s, "SAME")`` with overlapping
  windows: exactly TensorFlow's on values without ties, and with ties the first maximum in row-major order
  (a NumPy reference), overlapping windows' values added, in a graph and under XLA;
- malformed inputs fail with the op's message, in a graph and when XLA compiles;
- ``NativeGradConv2D`` and ``NativeGradMaxPool2D`` are Keras' layers (same values, weights and config) that
  take these gradients inside a function XLA compiles and nowhere else, and an IMPALA-CNN's and a MiniGrid
  CNN's XLA train step runs them and matches the graph step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import custom_calls, needs_xla_kernels, op_types

from sit_keras import native
from sit_keras.encoder_check import make_train_step
from sit_keras.layers.native_gradients import NativeGradConv2D, NativeGradMaxPool2D
from sit_keras.models import build_encoder


def _kernel_grad(dy: tf.Tensor, x: tf.Tensor, size: int) -> tf.Tensor:
    return native.library().sit_conv2d_kernel_grad(dy, x, size=size)


def _tensorflows_kernel_grad(dy: tf.Tensor, x: tf.Tensor, size: int) -> tf.Tensor:
    shape = [size, size, x.shape[-1], dy.shape[-1]]
    return tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=shape, out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"
    )


conv_shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 19), st.integers(1, 19)
)


@needs_xla_kernels
@settings(deadline=None, max_examples=20)
@given(shape=conv_shapes, size=st.sampled_from([1, 3, 5]), seed=st.integers(0, 2**16))
def test_the_kernel_gradient_op_is_tensorflows_in_a_graph_and_under_xla(shape: tuple, size: int, seed: int):
    images, height, width, c_in, c_out = shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(images, height, width, c_in)))
    dy = tf.constant(rng.normal(size=(images, height, width, c_out)))
    want = _tensorflows_kernel_grad(dy, x, size)
    got = _kernel_grad(dy, x, size)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(want)) + 1))
    compiled = tf.function(lambda dy, x: _kernel_grad(dy, x, size), jit_compile=True)
    assert custom_calls(compiled, dy, x) == {"sit_conv2d_kernel_grad_f64"}
    np.testing.assert_array_equal(compiled(dy, x), got)  # the same code on XLA's buffers


@needs_xla_kernels
def test_the_kernel_gradient_of_long_runs_and_float32_is_the_same_bits_on_every_run():
    """A 5x5 kernel to 30 channels: runs of 150 values, more vectors than a pass keeps in registers."""
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(7, 11, 13, 3)), tf.float32)
    dy = tf.constant(rng.normal(size=(7, 11, 13, 30)), tf.float32)
    want = _tensorflows_kernel_grad(tf.cast(dy, tf.float64), tf.cast(x, tf.float64), 5)
    runs = [_kernel_grad(dy, x, 5).numpy() for _ in range(3)]
    compiled = tf.function(lambda dy, x: _kernel_grad(dy, x, 5), jit_compile=True)
    runs += [compiled(dy, x).numpy() for _ in range(2)]
    for run in runs:
        np.testing.assert_array_equal(run, runs[0])
    np.testing.assert_allclose(runs[0], want, rtol=1e-4, atol=1e-4)


def _conv_with_input_gradient(
    x: tf.Tensor, kernel: tf.Tensor, dy: tf.Tensor, conv: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = conv(x, kernel)
    return y, tape.gradient(y, x, output_gradients=dy)


# Widths past a pass's 12 pixels and output channels that take vectors of 16, 8 and 4 and one by one.
conv_forward_shapes = st.tuples(
    st.integers(1, 2), st.integers(1, 6), st.integers(1, 29), st.integers(1, 5), st.integers(1, 37)
)


@needs_xla_kernels
@settings(deadline=None, max_examples=20)
@given(shape=conv_forward_shapes, size=st.sampled_from([1, 3, 5]), seed=st.integers(0, 2**16))
def test_the_convolution_op_and_its_input_gradient_are_tensorflows_in_a_graph_and_under_xla(
    shape: tuple, size: int, seed: int
):
    images, height, width, c_in, c_out = shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(images, height, width, c_in)))
    kernel = tf.constant(rng.normal(size=(size, size, c_in, c_out)))
    dy = tf.constant(rng.normal(size=(images, height, width, c_out)))
    want = _conv_with_input_gradient(x, kernel, dy, lambda x, k: tf.nn.conv2d(x, k, 1, "SAME"))
    got = _conv_with_input_gradient(x, kernel, dy, native.conv2d)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(w)) + 1))
    zero_bias = tf.zeros([c_out], tf.float64)
    op = native.library().sit_conv2d(x, kernel, zero_bias)  # the op itself, whatever the channels
    np.testing.assert_allclose(op, want[0], rtol=1e-12, atol=1e-12 * float(np.max(np.abs(want[0])) + 1))
    bias = tf.constant(rng.normal(size=(c_out,)))
    with_relu = native.library().sit_conv2d(x, kernel, bias, relu=True)
    np.testing.assert_allclose(
        with_relu,
        tf.nn.relu(tf.nn.bias_add(want[0], bias)),
        rtol=1e-12,
        atol=1e-12 * float(np.max(np.abs(want[0])) + 1),
    )
    compiled = tf.function(lambda *args: _conv_with_input_gradient(*args, native.conv2d), jit_compile=True)
    applies = native.native_convolution_applies(c_in, c_out)
    assert ("sit_conv2d_f64" in custom_calls(compiled, x, kernel, dy)) == applies
    for g, c in zip(got, compiled(x, kernel, dy), strict=True):
        if applies:  # the same code on XLA's buffers
            np.testing.assert_array_equal(c, g)
        else:  # TensorFlow's op in a graph, XLA's under XLA
            np.testing.assert_allclose(c, g, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(g)) + 1))
    compiled_op = tf.function(native.library().sit_conv2d, jit_compile=True)
    np.testing.assert_array_equal(compiled_op(x, kernel, zero_bias), op)
    np.testing.assert_array_equal(compiled_op(x, kernel, bias, relu=True), with_relu)


@needs_xla_kernels
@pytest.mark.parametrize(
    "c_in, c_out, ops",
    [
        (4, 8, {"sit_conv2d_f32", "sit_conv2d_kernel_grad_f32"}),
        (3, 16, {"sit_conv2d_kernel_grad_f32"}),  # 3 input channels: XLA's convolutions
        (16, 32, {"sit_conv2d_kernel_grad_f32"}),  # 512 channel pairs: XLA's convolutions
    ],
)
def test_the_convolution_op_computes_only_where_it_applies(c_in: int, c_out: int, ops: set):
    x, kernel = tf.ones((2, 6, 6, c_in)), tf.ones((3, 3, c_in, c_out))

    @tf.function(jit_compile=True)
    def step(x: tf.Tensor, kernel: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = native.conv2d(x, kernel)
        return tape.gradient(y, [x, kernel])

    assert custom_calls(step, x, kernel) == ops


@needs_xla_kernels
@pytest.mark.parametrize("c_in, c_out", [(4, 8), (3, 16)], ids=["native", "tensorflows_convolution"])
def test_the_convolution_with_a_bias_and_its_three_gradients_are_tensorflows(c_in: int, c_out: int):
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(3, 7, 9, c_in)))
    kernel = tf.constant(rng.normal(size=(3, 3, c_in, c_out)))
    bias = tf.constant(rng.normal(size=(c_out,)))
    dy = tf.constant(rng.normal(size=(3, 7, 9, c_out)))

    def values_and_gradients(conv: Callable[..., tf.Tensor]) -> Callable[[], list[tf.Tensor]]:
        def run() -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                tape.watch([x, kernel, bias])
                y = conv(x, kernel, bias)
            return [y, *tape.gradient(y, [x, kernel, bias], output_gradients=dy)]

        return run

    want = values_and_gradients(lambda x, k, b: tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b))()
    for jit_compile in (False, True):
        got = tf.function(values_and_gradients(native.conv2d), jit_compile=jit_compile)()
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(w)) + 1))


@needs_xla_kernels
def test_the_convolution_in_float32_is_the_same_bits_on_every_run():
    """Each sum runs over the taps in one order, whatever thread computes its row."""
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=(2, 40, 27, 7)), tf.float32)
    kernel = tf.constant(rng.normal(size=(3, 3, 7, 21)), tf.float32)
    bias = tf.constant(rng.normal(size=(21,)), tf.float32)
    conv = native.library().sit_conv2d
    runs = [conv(x, kernel, bias).numpy() for _ in range(3)]
    compiled = tf.function(conv, jit_compile=True)
    runs += [compiled(x, kernel, bias).numpy() for _ in range(2)]
    for run in runs:
        np.testing.assert_array_equal(run, runs[0])
    want = tf.nn.conv2d(tf.cast(x, tf.float64), tf.cast(kernel, tf.float64), 1, "SAME") + tf.cast(
        bias, tf.float64
    )
    np.testing.assert_allclose(runs[0], want, rtol=1e-4, atol=1e-4)


def _pool_gradient_reference(x: np.ndarray, dy: np.ndarray, size: int, stride: int) -> np.ndarray:
    """Each dy value at its window's first maximum in row-major order (TensorFlow's "same" padding)."""
    _, height, width, _ = x.shape
    out_height, out_width = dy.shape[1:3]
    top = max((out_height - 1) * stride + size - height, 0) // 2
    left = max((out_width - 1) * stride + size - width, 0) // 2
    dx = np.zeros(x.shape)
    for b, i, j, c in np.ndindex(dy.shape):
        rows = range(max(i * stride - top, 0), min(i * stride - top + size, height))
        columns = range(max(j * stride - left, 0), min(j * stride - left + size, width))
        window = [(r, q) for r in rows for q in columns]
        values = [x[b, r, q, c] for r, q in window]
        r, q = window[int(np.argmax(values))]  # argmax: the first maximum
        dx[b, r, q, c] += dy[b, i, j, c]
    return dx


def _pool_with_gradient(x: tf.Tensor, dy: tf.Tensor, size: int, stride: int) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = native.strided_max_pool(x, size, stride)
    return y, tape.gradient(y, x, output_gradients=dy)


# Channels that take the gradient's vectors of 16, 8 and 4 channels and its channels one by one.
pool_channels = st.sampled_from([1, 2, 3, 4, 5, 8, 13, 16, 29])
pool_shapes = st.tuples(st.integers(1, 2), st.integers(1, 10), st.integers(1, 10), pool_channels)
windows = st.sampled_from([(3, 2), (3, 1), (5, 2), (4, 3), (2, 1)])


@needs_xla_kernels
@settings(deadline=None, max_examples=20)
@given(
    shape=pool_shapes,
    window=windows,
    ties=st.booleans(),
    dtype=st.sampled_from([tf.float32, tf.float64]),
    seed=st.integers(0, 2**16),
)
def test_the_pooling_gradient_puts_each_value_at_its_windows_first_maximum(
    shape: tuple, window: tuple, ties: bool, dtype: tf.DType, seed: int
):
    size, stride = window
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, size=shape) if ties else rng.normal(size=shape)
    x = tf.constant(values, dtype)
    values = x.numpy().astype(np.float64)
    out_shape = (shape[0], -(-shape[1] // stride), -(-shape[2] // stride), shape[3])
    dy = tf.constant(rng.normal(size=out_shape), dtype)
    compiled = tf.function(lambda x, dy: _pool_with_gradient(x, dy, size, stride), jit_compile=True)
    assert f"sit_strided_max_pool_grad_f{dtype.size * 8}" in custom_calls(compiled, x, dy)
    tolerance = 1e-12 if dtype == tf.float64 else 1e-5
    (pooled, gradient), (xla_pooled, xla_gradient) = _pool_with_gradient(x, dy, size, stride), compiled(x, dy)
    np.testing.assert_array_equal(pooled, tf.nn.max_pool2d(x, size, stride, "SAME"))
    np.testing.assert_array_equal(xla_pooled, pooled)
    np.testing.assert_array_equal(xla_gradient, gradient)
    np.testing.assert_allclose(
        gradient, _pool_gradient_reference(values, dy.numpy(), size, stride), atol=tolerance
    )
    if not ties:  # TensorFlow's own gradient (its choice among equal values is its kernel's)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(x, size, stride, "SAME")
        np.testing.assert_allclose(gradient, tape.gradient(y, x, output_gradients=dy), atol=tolerance)


@needs_xla_kernels
@pytest.mark.parametrize(
    "op, inputs, attributes, message",
    [
        (
            "sit_conv2d_kernel_grad",
            [(2, 5, 5, 4), (3, 5, 5, 3)],
            {"size": 3},
            r"SitConv2DKernelGrad expects dy \(B, H, W, C_out\) and x \(B, H, W, C_in\); got \[2,5,5,4\] and "
            r"\[3,5,5,3\]",
        ),
        ("sit_conv2d_kernel_grad", [(2, 5, 5, 4), (2, 5, 5, 3)], {"size": 2}, r"expects an odd size; got 2"),
        (
            "sit_conv2d",
            [(2, 5, 5, 4), (3, 3, 3, 2), (2,)],
            {},
            r"SitConv2D expects x \(B, H, W, C_in\), a kernel \(k, k, C_in, C_out\) with k odd and a bias "
            r"\(C_out\); got \[2,5,5,4\], \[3,3,3,2\] and \[2\]",
        ),
        ("sit_conv2d", [(2, 5, 5, 4), (2, 2, 4, 2), (2,)], {}, r"got \[2,5,5,4\], \[2,2,4,2\] and \[2\]"),
        (
            "sit_conv2d",
            [(2, 5, 5, 4), (3, 3, 4, 2), (3,)],
            {"relu": True},
            r"got \[2,5,5,4\], \[3,3,4,2\] and \[3\]",
        ),
        (
            "sit_strided_max_pool_grad",
            [(1, 6, 6, 2), (1, 3, 3, 2), (1, 3, 2, 2)],
            {"size": 3, "stride": 2},
            r"SitStridedMaxPoolGrad expects y and dy \[1,3,3,2\] for x \[1,6,6,2\], size 3 and stride 2",
        ),
        (
            "sit_strided_max_pool_grad",
            [(1, 9, 9, 1), (1, 1, 1, 1), (1, 1, 1, 1)],
            {"size": 9, "stride": 8},
            r"expects windows of at most 64 positions; got size 9",
        ),
    ],
    ids=[
        "conv_batch",
        "conv_even_size",
        "conv_channels",
        "conv_even_kernel",
        "conv_bias",
        "pool_dy",
        "pool_window",
    ],
)
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_malformed_inputs_fail_with_the_ops_message(op: str, inputs: list, attributes: dict, message: str,
                                                     jit_compile: bool):  # fmt: skip
    """Traced with unknown shapes, so that the kernels, not the shape functions, see them."""
    compiled = tf.function(
        lambda *args: getattr(native.library(), op)(*args, **attributes),
        input_signature=[tf.TensorSpec(None, tf.float32)] * len(inputs),
        jit_compile=jit_compile,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        compiled(*[tf.zeros(shape) for shape in inputs])


def _layer_step(layer: tf_keras.layers.Layer, x: tf.Tensor, jit_compile: bool):
    @tf.function(jit_compile=jit_compile)
    def step(x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * y)
        return [y, *tape.gradient(loss, [x, *layer.trainable_variables])]

    return step


@needs_xla_kernels
@pytest.mark.parametrize(
    "native_layer, keras_layer, channels",
    [
        (lambda: NativeGradConv2D(5, 3, padding="same", dtype="float64"), tf_keras.layers.Conv2D, 2),
        # SitConv2D itself (4 channels or more), the relu its own.
        (
            lambda: NativeGradConv2D(6, 3, padding="same", activation="relu", dtype="float64"),
            tf_keras.layers.Conv2D,
            4,
        ),
        (
            lambda: NativeGradConv2D(6, 3, padding="same", use_bias=False, dtype="float64"),
            tf_keras.layers.Conv2D,
            5,
        ),
        (lambda: NativeGradMaxPool2D(3, 2, padding="same", dtype="float64"), tf_keras.layers.MaxPool2D, 2),
    ],
    ids=["conv", "conv_relu", "conv_no_bias", "pool"],
)
def test_the_layers_are_keras_layers_with_native_gradients_under_xla_only(
    native_layer, keras_layer, channels
):
    layer = native_layer()
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 7, 9, channels)))
    layer(x)
    twin = keras_layer.from_config(layer.get_config())
    twin(x)
    twin.set_weights(layer.get_weights())
    rebuilt = tf_keras.layers.deserialize(tf_keras.layers.serialize(layer))
    assert type(rebuilt) is type(layer) and rebuilt.get_config() == layer.get_config()
    compiled = _layer_step(layer, x, jit_compile=True)
    calls = custom_calls(compiled, x)
    assert calls & {"sit_conv2d_kernel_grad_f64", "sit_strided_max_pool_grad_f64"}
    if isinstance(layer, NativeGradConv2D):
        assert ("sit_conv2d_f64" in calls) == native.native_convolution_applies(channels, layer.filters)
    assert not {"SitConv2D", "SitConv2DKernelGrad", "SitStridedMaxPoolGrad"} & op_types(
        _layer_step(layer, x, False), x
    )
    for got, want in zip(compiled(x), _layer_step(twin, x, jit_compile=False)(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_native_gradients_apply_only_where_their_ops_compute_the_layer():
    conv, pool = NativeGradConv2D(4, 3, padding="same"), NativeGradMaxPool2D(3, 2, padding="same")
    others = [
        NativeGradConv2D(4, 3, strides=2, padding="same"),
        NativeGradConv2D(4, 3, padding="valid"),
        NativeGradConv2D(4, 2, padding="same"),
        NativeGradConv2D(4, 3, padding="same", dilation_rate=2),
        NativeGradMaxPool2D(2, 2, padding="same"),  # windows that do not overlap
        NativeGradMaxPool2D(3, 2, padding="valid"),
        NativeGradMaxPool2D(9, 2, padding="same"),  # 81 positions
    ]

    @tf.function(jit_compile=True)
    def under_xla() -> tf.Tensor:
        with tf.GradientTape():  # a train step's tape: the ops' condition besides XLA
            flags = [conv.uses_native_op(tf.float32), pool.uses_native_op(tf.float64)]
            flags += [conv.uses_native_op(tf.bfloat16), pool.uses_native_op(tf.bfloat16)]
            flags += [layer.uses_native_op(tf.float32) for layer in others]
        return tf.constant(flags)

    @tf.function
    def in_a_graph() -> tf.Tensor:
        with tf.GradientTape():
            return tf.constant([conv.uses_native_op(tf.float32), pool.uses_native_op(tf.float32)])

    expected = [native.xla_load_problem() is None and native.available()] * 2 + [False] * (2 + len(others))
    assert under_xla().numpy().tolist() == expected
    assert in_a_graph().numpy().tolist() == [False, False]


@needs_xla_kernels
@pytest.mark.parametrize(
    "encoder, kwargs, image",
    [
        ("impala_cnn", {"channels": (4, 8), "output_dim": 16}, (16, 16, 3)),
        ("cnn", {"filters": (8, 16), "strides": 1, "output_dim": 16}, (14, 14, 3)),
    ],
    ids=["impala_cnn", "minigrid_cnn"],
)
def test_a_cnns_xla_train_step_runs_the_native_gradients_and_matches_the_graph_step(encoder, kwargs, image):
    model = build_encoder(encoder, image, **kwargs)
    images = tf.random.uniform((5, *image), seed=2)
    targets = {"sit_conv2d_kernel_grad_f32"} | (
        {"sit_strided_max_pool_grad_f32"} if encoder == "impala_cnn" else set()
    )
    assert targets <= custom_calls(make_train_step(model, jit_compile=True), images)

    def loss_and_gradients(jit_compile: bool) -> list[np.ndarray]:
        @tf.function(jit_compile=jit_compile)
        def step(images: tf.Tensor) -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                features = model(images, training=True)
                loss = tf.reduce_sum(features * features)
            return [loss, *tape.gradient(loss, model.trainable_variables)]

        return [value.numpy() for value in step(images)]

    for a, b in zip(loss_and_gradients(False), loss_and_gradients(True), strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5 * float(np.max(np.abs(a))))
