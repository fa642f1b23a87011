"""The native depth-wise convolution of the SiT's stem (``native.depthwise_conv``, ``depthwise_stem.cc``).

What this file proves:

- the ops equal ``tf.nn.depthwise_conv2d`` (stride 1, "SAME", depth multiplier 1) plus a bias, and its
  gradients for the input, the kernel and the bias, in float64 to 1e-12, on shapes that are multiples of
  nothing (the lane width, the kernel) and kernels of 1, 3 and 5, through the wrapper and the
  kernel-gradient op;
- a tape outside a ``tf.function`` still gets the input's gradient (the wrapper's separate op for it);
- the gradients are the same bits on every run (fixed partition of the kernel gradient's sums);
- malformed inputs raise ``InvalidArgumentError`` naming the expected shapes;
- a ``GraphConv2D`` stem traced under a gradient tape runs the op, which adds its bias, traced without one
  (a SavedModel's signature) it does not, nor with a stride, a depth multiplier or "valid" padding; in a
  train step nothing consumes the image's gradient (TensorFlow prunes its op), and the step's gradients are
  the builtin's; under mixed_bfloat16 the op reads and writes bfloat16 and computes in float32;
- a SiT whose stem runs the op keeps its rotations and breaks its flips (float64, perturbed weights).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import op_types

from sit_keras import native, testing
from sit_keras.layers import GraphConv2D
from sit_keras.models import build_encoder

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)


def _ops():
    return native.library()


def _builtin(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None) -> tf.Tensor:
    y = tf.nn.depthwise_conv2d(x, kernel[..., None], [1, 1, 1, 1], "SAME")
    return y if bias is None else y + bias


def _with_gradients(
    conv, x: tf.Tensor, kernel: tf.Tensor, dy: tf.Tensor, bias: tf.Tensor | None = None
) -> list[tf.Tensor]:
    sources = [x, kernel] if bias is None else [x, kernel, bias]
    with tf.GradientTape() as tape:
        tape.watch(sources)
        y = conv(x, kernel) if bias is None else conv(x, kernel, bias)
    return [y, *tape.gradient(y, sources, output_gradients=dy)]


shapes = st.tuples(
    st.integers(1, 5), st.integers(1, 12), st.integers(1, 12), st.integers(1, 5), st.sampled_from([1, 3, 5])
)


@settings(deadline=None, max_examples=30)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_the_op_and_its_gradients_are_the_builtin_convolutions(shape: tuple, seed: int) -> None:
    images, height, width, channels, side = shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(images, height, width, channels)))
    kernel = tf.constant(rng.normal(size=(side, side, channels)))
    bias = tf.constant(rng.normal(size=(channels,)))
    dy = tf.constant(rng.normal(size=x.shape))
    expected = _with_gradients(_builtin, x, kernel, dy, bias)
    for a, b in zip(_with_gradients(native.depthwise_conv, x, kernel, dy, bias), expected, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    dkernel, dbias = _ops().sit_depthwise_conv_kernel_grad(dy, x, kernel)
    np.testing.assert_allclose(dkernel.numpy(), expected[2].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dbias.numpy(), expected[3].numpy(), rtol=1e-12, atol=1e-12)
    # Without a bias, the wrapper's convolution is the builtin's alone.
    unbiased = native.depthwise_conv(x, kernel)
    np.testing.assert_allclose(unbiased.numpy(), _builtin(x, kernel).numpy(), rtol=1e-12, atol=1e-12)


def test_a_tape_outside_a_function_gets_the_inputs_gradient() -> None:
    """Traced inside the function, no tape watches x: the input's gradient must not depend on that."""
    rng = np.random.default_rng(0)
    x, kernel = tf.constant(rng.normal(size=(2, 6, 7, 3))), tf.constant(rng.normal(size=(3, 3, 3)))
    grads = []
    for conv in (native.depthwise_conv, _builtin):
        function = tf.function(lambda x, conv=conv: tf.reduce_sum(conv(x, kernel) ** 2))
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = function(x)
        grads.append(tape.gradient(loss, x))
    np.testing.assert_allclose(grads[0].numpy(), grads[1].numpy(), rtol=1e-12, atol=1e-12)


def test_the_gradients_are_the_same_on_every_run() -> None:
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(24, 33, 35, 3)), tf.float32)
    kernel = tf.constant(rng.normal(size=(3, 3, 3)), tf.float32)
    bias = tf.constant(rng.normal(size=(3,)), tf.float32)
    dy = tf.constant(rng.normal(size=x.shape), tf.float32)
    runs = [_with_gradients(native.depthwise_conv, x, kernel, dy, bias)[1:] for _ in range(3)]
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
    "x_shape, kernel_shape, message",
    [
        ((2, 5, 5), (3, 3, 5), r"expects x \(B, H, W, C\) and a kernel \(k, k, C\)"),  # x of rank 3
        ((2, 5, 5, 3), (3, 3, 3, 1), r"and a kernel \(k, k, 3\)"),  # the builtin's kernel rank
        ((2, 5, 5, 3), (3, 3, 2), r"and a kernel \(k, k, 3\)"),  # kernel channels differ
        ((2, 5, 5, 3), (3, 5, 3), r"and a kernel \(k, k, 3\)"),  # not square
        ((2, 5, 5, 3), (2, 2, 3), r"and a kernel \(k, k, 3\) with k odd"),
    ],
    ids=["x_rank", "kernel_rank", "channels_differ", "not_square", "even_k"],
)
def test_the_ops_refuse_malformed_inputs(x_shape: tuple, kernel_shape: tuple, message: str) -> None:
    x, kernel = tf.zeros(x_shape), tf.zeros(kernel_shape)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _ops().sit_depthwise_conv(x, kernel, tf.zeros(x_shape[-1:]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _ops().sit_depthwise_conv_kernel_grad(tf.zeros(x_shape), x, kernel)


@pytest.mark.parametrize("bias_shape", [(2,), (3, 1), ()])
def test_the_op_refuses_a_bias_of_another_shape(bias_shape: tuple) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"expects a bias \(3\); got \["):
        _ops().sit_depthwise_conv(tf.zeros((2, 5, 5, 3)), tf.zeros((3, 3, 3)), tf.zeros(bias_shape))


def test_the_gradient_op_refuses_a_dy_of_another_shape() -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"expects dy of x's shape \[2,5,5,3\]"):
        _ops().sit_depthwise_conv_kernel_grad(
            tf.zeros((2, 5, 4, 3)), tf.zeros((2, 5, 5, 3)), tf.zeros((3, 3, 3))
        )


def _train_step(layer: GraphConv2D) -> tf.types.experimental.GenericFunction:
    @tf.function
    def step(images: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(images)))
        return tape.gradient(loss, layer.trainable_variables)

    return step


def test_a_stem_runs_the_op_under_a_tape_and_the_builtin_op_elsewhere() -> None:
    images = tf.zeros((2, 16, 16, 3))
    stem = GraphConv2D(3)
    stem(images)
    trained = _train_step(stem)
    assert {"SitDepthwiseConv", "SitDepthwiseConvKernelGrad"} <= op_types(trained, images)
    assert "DepthwiseConv2dNative" not in op_types(trained, images)
    assert not {"AddV2", "BiasAdd", "BiasAddGrad"} & op_types(trained, images)  # the op adds the bias
    forward = tf.function(lambda x: stem(x))
    assert "SitDepthwiseConv" not in op_types(forward, images)
    assert "DepthwiseConv2dNative" in op_types(forward, images)
    with native.forward_passes():
        assert "SitDepthwiseConv" in op_types(tf.function(lambda x: stem(x)), images)
    with native.builtin_only():
        assert "SitDepthwiseConv" not in op_types(_train_step(stem), images)
    others = (GraphConv2D(3, strides=2), GraphConv2D(3, padding="valid"), GraphConv2D(3, depth_multiplier=2))
    for other in others:
        other(images)
        assert "SitDepthwiseConv" not in op_types(_train_step(other), images)


def test_a_train_step_leaves_the_images_gradient_unused() -> None:
    """In a step that differentiates the weights only, the input's gradient op (the convolution of dy with
    the turned kernel) has no consumer, so TensorFlow prunes it, and the step's gradients equal the builtin
    convolution's."""
    rng = np.random.default_rng(2)
    images = tf.constant(rng.normal(size=(3, 9, 10, 3)))
    stem = GraphConv2D(3, dtype="float64")
    stem(images)
    testing.perturb_weights(stem, 0.3)
    step = _train_step(stem)
    operations = step.get_concrete_function(images).graph.get_operations()
    assert [op.type for op in operations].count("SitDepthwiseConvKernelGrad") == 1
    convolutions = [op for op in operations if op.type == "SitDepthwiseConv"]
    assert sorted(len(op.outputs[0].consumers()) == 0 for op in convolutions) == [False, True]
    with native.builtin_only():
        builtin = _train_step(stem)(images)
    for a, b in zip(step(images), builtin, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_under_mixed_bfloat16_the_stem_runs_the_op_storing_bfloat16() -> None:
    images = tf.constant(np.random.default_rng(3).uniform(size=(2, 8, 8, 3)), tf.float32)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        stem = GraphConv2D(3)
        stem(images)
    finally:
        tf_keras.mixed_precision.set_global_policy(None)
    step = _train_step(stem)
    assert "SitDepthwiseConv" in op_types(step, images)
    with tf.GradientTape():
        out = stem(images)
    assert out.dtype == tf.bfloat16
    with native.builtin_only(), tf.GradientTape():
        reference = stem(images)
    np.testing.assert_allclose(np.float32(out.numpy()), np.float32(reference.numpy()), atol=0.05)


@pytest.fixture
def fixed_seed():
    tf_keras.utils.set_random_seed(0)
    yield
    tf.random.set_seed(None)


def test_a_sit_whose_stem_runs_the_op_keeps_rotations_and_breaks_flips(fixed_seed: None) -> None:
    encoder = build_encoder("sit", (16, 16, 3), dtype="float64")
    x = tf.constant(np.random.default_rng(3).uniform(size=(2, 16, 16, 3)))
    encoder(x)
    testing.perturb_weights(encoder, 0.3)
    with native.forward_passes():
        forward = tf.function(lambda z: encoder(z, training=False))
        assert "SitDepthwiseConv" in op_types(forward, x)
        testing.assert_invariant(forward, x, testing.ROTATIONS, tol=1e-10)
        testing.assert_not_invariant(forward, x, testing.REFLECTIONS)
        with native.builtin_only():
            builtin = tf.function(lambda z: encoder(z, training=False))
            np.testing.assert_allclose(forward(x).numpy(), builtin(x).numpy(), rtol=1e-10, atol=1e-10)
