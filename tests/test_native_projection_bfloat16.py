"""The channels-first projection stored as bfloat16 (``native.project_bfloat16``, channels_first_bfloat16.h).

What this file proves:

- the op is the float sums of the bfloat16 products, rounded once to bfloat16: within one rounding of the
  exact (float64) projection of its inputs, plus the float sums' error, on shapes that are multiples of
  nothing (the 16 x 16 tiles, the 32-deep K tiles, the pairs of tiles, the column chunks) and on the
  SiT's aligned shapes (whose outputs are streamed as whole cache lines where the host has AMX; through
  floats elsewhere);
- empty shapes give empty or zero results, and malformed inputs raise ``InvalidArgumentError`` naming the
  expected shapes;
- ``sit_keras.layers.channels_first.project_channels_first`` on bfloat16 runs the op for the projection
  and the input's gradient where ``native.projects_bfloat16_on_amx()`` (TensorFlow's batched matmul for
  the kernel's gradient), with the values and gradients of TensorFlow's bfloat16 matmuls to bfloat16
  rounding; and TensorFlow's matmul elsewhere: without AMX, compiled by XLA, under ``builtin_only()``.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import op_types

from sit_keras import native
from sit_keras.layers.channels_first import project_channels_first

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)

OP = "SitChannelsFirstProjectionBfloat16"


def _bfloat16(rng: np.random.Generator, shape: tuple[int, ...]) -> tf.Tensor:
    return tf.cast(tf.constant(rng.normal(size=shape)), tf.bfloat16)


def _assert_rounded_float_sums(kernel: tf.Tensor, x: tf.Tensor, y: tf.Tensor) -> None:
    """``y`` within one bfloat16 rounding (2^-8 relative) of the exact projection of the bfloat16 inputs,
    plus the float sums' error (at most a few 2^-24 of the sum of the products' magnitudes)."""
    k, v = (tf.cast(t, tf.float64).numpy() for t in (kernel, x))
    exact = k.T @ v
    magnitude = np.abs(k).T @ np.abs(v)
    error = np.abs(tf.cast(y, tf.float64).numpy() - exact)
    assert y.dtype == tf.bfloat16 and y.shape == exact.shape
    assert np.all(error <= 2.0**-8 * np.abs(exact) + 1e-5 * magnitude)


@settings(deadline=None, max_examples=40)
@given(
    shape=st.tuples(st.integers(1, 70), st.integers(1, 70), st.integers(1, 600)), seed=st.integers(0, 2**16)
)
def test_the_op_is_the_rounded_float_sums_of_bfloat16_products(
    shape: tuple[int, int, int], seed: int
) -> None:
    rows, outputs, columns = shape
    rng = np.random.default_rng(seed)
    kernel, x = _bfloat16(rng, (rows, outputs)), _bfloat16(rng, (rows, columns))
    _assert_rounded_float_sums(kernel, x, native.project_bfloat16(kernel, x))


@pytest.mark.parametrize(
    "rows, outputs, columns", [(64, 192, 4096), (192, 64, 4096 + 32), (64, 192, 4096 + 48)]
)
def test_the_sits_shapes_are_the_rounded_float_sums_too(rows: int, outputs: int, columns: int) -> None:
    """The SiT's 64 -> 192 projection and its input gradient, 192 -> 64, on whole chunks and a last one
    of an odd count of tiles: the streamed outputs where the host has AMX."""
    rng = np.random.default_rng(columns)
    kernel, x = _bfloat16(rng, (rows, outputs)), _bfloat16(rng, (rows, columns))
    _assert_rounded_float_sums(kernel, x, native.project_bfloat16(kernel, x))


def test_empty_shapes_give_empty_or_zero_results() -> None:
    for rows, outputs, columns in [(3, 4, 0), (0, 4, 5), (3, 0, 5)]:
        y = native.project_bfloat16(
            tf.zeros((rows, outputs), tf.bfloat16), tf.ones((rows, columns), tf.bfloat16)
        )
        assert y.shape == (outputs, columns) and not np.any(tf.cast(y, tf.float32).numpy())


@pytest.mark.parametrize(
    "kernel_shape, x_shape, message",
    [
        ((3,), (3, 5), r"expects a kernel \(R, N\) of rank 2"),
        (
            (3, 4),
            (2, 5),
            r"expects a kernel \(R, N\) and x \(R, L\) with the same R; got \[3,4\] and \[2,5\]",
        ),
    ],
    ids=["kernel_rank", "rows_differ"],
)
def test_the_op_refuses_malformed_inputs(kernel_shape: tuple, x_shape: tuple, message: str) -> None:
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=f"{OP} {message}"):
        native.project_bfloat16(tf.zeros(kernel_shape, tf.bfloat16), tf.zeros(x_shape, tf.bfloat16))


def _step(jit_compile: bool = False) -> tf.types.experimental.GenericFunction:
    """The projection and its gradients for the kernel and the inputs, for an upstream gradient dy."""

    @tf.function(jit_compile=jit_compile)
    def step(kernel: tf.Tensor, x: tf.Tensor, dy: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([kernel, x])
            y = project_channels_first(kernel, x)
        return [y, *tape.gradient(y, [kernel, x], output_gradients=dy)]

    return step


@pytest.fixture
def amx(monkeypatch: pytest.MonkeyPatch):
    """The layer's routing as on a host with AMX (the op itself runs on any host)."""
    monkeypatch.setattr(native, "projects_bfloat16_on_amx", lambda: True)


def test_with_amx_the_layers_projection_runs_the_op_for_the_values_and_the_inputs_gradient(amx) -> None:
    rng = np.random.default_rng(5)
    kernel, x, dy = _bfloat16(rng, (64, 40)), _bfloat16(rng, (64, 300)), _bfloat16(rng, (40, 300))
    step = _step()
    graph = step.get_concrete_function(kernel, x, dy).graph
    assert [op.type for op in graph.get_operations()].count(OP) == 2  # y, and the input's gradient
    assert "BatchMatMulV2" in op_types(step, kernel, x, dy)  # the kernel's gradient
    with native.builtin_only():
        expected = _step()(kernel, x, dy)
        assert OP not in op_types(_step(), kernel, x, dy)
    for got, want in zip(step(kernel, x, dy), expected, strict=True):
        assert got.dtype == want.dtype == tf.bfloat16 and got.shape == want.shape
        got, want = (tf.cast(t, tf.float64).numpy() for t in (got, want))
        np.testing.assert_allclose(got, want, rtol=2.0**-7, atol=1e-2 * np.abs(want).max())
    assert OP not in op_types(_step(jit_compile=True), kernel, x, dy)


def test_without_amx_the_layers_projection_keeps_tensorflows_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "projects_bfloat16_on_amx", lambda: False)
    rng = np.random.default_rng(6)
    kernel, x, dy = _bfloat16(rng, (6, 8)), _bfloat16(rng, (6, 50)), _bfloat16(rng, (8, 50))
    types = op_types(_step(), kernel, x, dy)
    assert OP not in types and "MatMul" in types
