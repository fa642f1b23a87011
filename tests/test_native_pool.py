"""The native max-pooling after the SiT's stem (``native.max_pool``, ``max_pool.cc``).

What this file proves:

- the op and its gradient equal ``tf.nn.max_pool2d(x, k, k, "VALID")`` and TensorFlow's gradient exactly,
  on shapes that are multiples of nothing (sides not divisible by ``k``, sides below ``k``), with ties
  (small integers): the gradient goes to the same, first, maximum of each window (and with no window at
  all, a side below ``k``, it is zero, where TensorFlow's returns memory it never wrote), whichever way
  the op finds it (2 x 2 windows unrolled, up to 64 positions by a bit mask, more by a search);
- malformed inputs raise ``InvalidArgumentError`` naming the expected shapes;
- a SiT traced under a gradient tape pools with the op, traced without one (an export) with
  TensorFlow's, nor under ``builtin_only()``; under mixed_bfloat16 the op runs in bfloat16 (a maximum
  is exact) and gives the same values.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import op_types

from sit_keras import native
from sit_keras.encoder_check import make_train_step
from sit_keras.models import build_encoder

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)


def _pooled_with_gradient(pool, x: tf.Tensor, size: int, dy: tf.Tensor) -> list[np.ndarray]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pool(x, size)
    return [y.numpy(), tape.gradient(y, x, output_gradients=dy).numpy()]


def _builtin(x: tf.Tensor, size: int) -> tf.Tensor:
    return tf.nn.max_pool2d(x, size, size, "VALID")


shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 13), st.integers(1, 13), st.integers(1, 5), st.integers(1, 4)
)


@settings(deadline=None, max_examples=40)
@given(shape=shapes, ties=st.booleans(), seed=st.integers(0, 2**16))
def test_the_op_and_its_gradient_are_tensorflows_max_pooling(shape: tuple, ties: bool, seed: int) -> None:
    images, height, width, channels, size = shape
    rng = np.random.default_rng(seed)
    values = (
        rng.integers(0, 3, size=(images, height, width, channels))
        if ties
        else rng.normal(size=(images, height, width, channels))
    )
    x = tf.constant(values, tf.float64)
    dy = tf.constant(rng.normal(size=(images, height // size, width // size, channels)))
    expected = _pooled_with_gradient(_builtin, x, size, dy)
    if 0 in dy.shape:  # TensorFlow's CPU gradient then returns memory it never wrote: no window, no gradient
        expected[1] = np.zeros(x.shape)
    got = _pooled_with_gradient(native.max_pool, x, size, dy)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("size", [2, 8, 9], ids=["unrolled", "largest_mask", "searched"])
def test_the_gradient_finds_the_first_maximum_in_windows_of_any_size(size: int) -> None:
    """The gradient's three ways to a window's first maximum: the SiT's 2 x 2 unrolled, windows of up to 64
    positions by a bit mask, larger ones by a search; ties everywhere (values 0 and 1)."""
    rng = np.random.default_rng(size)
    x = tf.constant(rng.integers(0, 2, size=(2, 2 * size + 1, 4 * size - 1, 3)), tf.float64)
    dy = tf.constant(rng.normal(size=(2, 2, 3, 3)))
    expected = _pooled_with_gradient(_builtin, x, size, dy)
    got = _pooled_with_gradient(native.max_pool, x, size, dy)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "x_shape, dy_shape, message",
    [
        ((4, 4, 3), None, r"SitMaxPool expects x \(B, H, W, C\); got \[4,4,3\]"),
        ((1, 4, 4, 3), (1, 2, 3, 3), r"expects y and dy \[1,2,2,3\] for x \[1,4,4,3\] and size 2"),
    ],
    ids=["x_rank", "dy_shape"],
)
def test_the_ops_refuse_malformed_inputs(x_shape: tuple, dy_shape: tuple | None, message: str) -> None:
    ops = native.library()
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        if dy_shape is None:
            ops.sit_max_pool(tf.zeros(x_shape), size=2)
        else:
            ops.sit_max_pool_grad(tf.zeros(x_shape), tf.zeros(dy_shape), tf.zeros(dy_shape), size=2)


@pytest.fixture(scope="module")
def sit() -> tf_keras.Model:
    encoder = build_encoder("sit", (16, 16, 3))
    assert encoder.pool_size == 2
    return encoder


def test_a_sit_pools_with_the_op_under_a_tape_and_with_tensorflows_elsewhere(sit) -> None:
    images = tf.zeros((3, 16, 16, 3), tf.uint8)
    trained = op_types(make_train_step(sit, jit_compile=False), images)
    assert {"SitMaxPool", "SitMaxPoolGrad"} <= trained and "MaxPool" not in trained
    forward = op_types(tf.function(lambda x: sit(x, training=False)), images)
    assert "SitMaxPool" not in forward and "MaxPool" in forward
    with native.builtin_only():
        assert "SitMaxPool" not in op_types(make_train_step(sit, jit_compile=False), images)


def test_under_mixed_bfloat16_the_op_pools_in_bfloat16_to_the_same_values() -> None:
    x = tf.cast(tf.constant(np.random.default_rng(1).normal(size=(2, 9, 8, 3)), tf.float32), tf.bfloat16)
    pooled = native.max_pool(x, 2)
    assert pooled.dtype == tf.bfloat16
    np.testing.assert_array_equal(pooled.numpy(), _builtin(x, 2).numpy())
