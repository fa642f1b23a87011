"""The GSA layers' native channels-first projection (``native.project_channels_first``, channels_first.cc).

What this file proves:

- the op and its gradients equal ``tf.matmul(kernel, x, transpose_a=True)`` and TensorFlow's gradients
  in float64 to 1e-12, on shapes that are multiples of nothing (the lane width, the register tiles, the
  column chunks), including rows 4 KiB apart (the layers' case the op copies tiles for), through the
  wrapper and the kernel-gradient op;
- empty shapes give empty or zero results;
- the kernel's gradient is the same bits on every run (fixed partition of its sums);
- malformed inputs raise ``InvalidArgumentError`` naming the expected shapes;
- ``sit_keras.layers.channels_first.project_channels_first`` runs the op where the native kernels are
  usable (a gradient tape, float32 or float64; compiled by XLA where the ops' XLA kernels load) and
  TensorFlow's matmul elsewhere: traced without a tape (an export), under ``builtin_only()``, compiled
  by XLA without the XLA kernels, and in bfloat16 (tests/test_native_projection_bfloat16.py); where
  TensorFlow runs oneDNN (``native.projection_gradients_by_matmul``, off with ``TF_ENABLE_ONEDNN_OPTS=0``)
  the op's gradients are TensorFlow's matmuls (XLA's dots under XLA), the same values to 1e-12 in float64.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import op_types

from sit_keras import native
from sit_keras.layers.channels_first import folded_kernel_gradients, project_channels_first

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)


def _ops():
    return native.library()


def _with_gradients(project, kernel: tf.Tensor, x: tf.Tensor, dy: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch([kernel, x])
        y = project(kernel, x)
    return [y, *tape.gradient(y, [kernel, x], output_gradients=dy)]


def _builtin(kernel: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    return tf.matmul(kernel, x, transpose_a=True)


def _random(rows: int, outputs: int, columns: int, seed: int, dtype=tf.float64) -> list[tf.Tensor]:
    rng = np.random.default_rng(seed)
    shapes = [(rows, outputs), (rows, columns), (outputs, columns)]
    return [tf.constant(rng.normal(size=shape), dtype) for shape in shapes]


def _assert_matches_the_builtin(kernel: tf.Tensor, x: tf.Tensor, dy: tf.Tensor) -> None:
    expected = _with_gradients(_builtin, kernel, x, dy)
    got = _with_gradients(native.project_channels_first, kernel, x, dy)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    dkernel = _ops().sit_channels_first_projection_kernel_grad(dy, x)
    np.testing.assert_allclose(dkernel.numpy(), expected[1].numpy(), rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=40)
@given(
    shape=st.tuples(st.integers(1, 70), st.integers(1, 30), st.integers(1, 1200)), seed=st.integers(0, 2**16)
)
def test_the_op_and_its_gradients_are_tensorflows_matmul(shape: tuple[int, int, int], seed: int) -> None:
    _assert_matches_the_builtin(*_random(*shape, seed))


@pytest.mark.parametrize("columns", [1024, 4096 + 3])
def test_rows_4_kib_apart_and_whole_chunks_are_the_builtin_too(columns: int) -> None:
    """L = 1024 doubles or floats: rows 8 or 4 KiB apart, every column chunk whole (no padded copy)."""
    _assert_matches_the_builtin(*_random(64, 192, columns, seed=columns))


def test_empty_shapes_give_empty_or_zero_results() -> None:
    for rows, outputs, columns in [(3, 4, 0), (0, 4, 5), (3, 0, 5)]:
        kernel, x, dy = _random(rows, outputs, columns, seed=0)
        y = _ops().sit_channels_first_projection(kernel, x)
        assert y.shape == (outputs, columns) and not np.any(y.numpy())
        dkernel = _ops().sit_channels_first_projection_kernel_grad(dy, x)
        assert dkernel.shape == (rows, outputs) and not np.any(dkernel.numpy())


def test_the_kernels_gradient_is_the_same_on_every_run() -> None:
    kernel, x, dy = _random(64, 192, 40_000 + 5, seed=1, dtype=tf.float32)
    runs = [_with_gradients(native.project_channels_first, kernel, x, dy)[1] for _ in range(3)]
    for run in runs[1:]:
        np.testing.assert_array_equal(runs[0].numpy(), run.numpy())


@pytest.mark.parametrize(
    "kernel_shape, x_shape, message",
    [
        ((3,), (3, 5), r"expects a kernel \(R, N\) of rank 2"),
        ((3, 4), (3, 5, 1), r"expects x \(R, L\) of rank 2"),
        ((3, 4), (2, 5), r"a kernel \(R, N\) and x \(R, L\) with the same R; got \[3,4\] and \[2,5\]"),
    ],
    ids=["kernel_rank", "x_rank", "rows_differ"],
)
def test_the_projection_op_refuses_malformed_inputs(kernel_shape: tuple, x_shape: tuple, message: str):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        _ops().sit_channels_first_projection(tf.zeros(kernel_shape), tf.zeros(x_shape))


@pytest.mark.parametrize(
    "dy_shape, x_shape, message",
    [
        ((4,), (3, 5), r"expects dy \(N, L\) of rank 2"),
        ((4, 5), (3,), r"expects x \(R, L\) of rank 2"),
        ((4, 6), (3, 5), r"dy \(N, L\) and x \(R, L\) with the same L; got \[4,6\] and \[3,5\]"),
    ],
    ids=["dy_rank", "x_rank", "columns_differ"],
)
def test_the_gradient_op_refuses_malformed_inputs(dy_shape: tuple, x_shape: tuple, message: str) -> None:
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        _ops().sit_channels_first_projection_kernel_grad(tf.zeros(dy_shape), tf.zeros(x_shape))


def _train_step(jit_compile: bool = False) -> tf.types.experimental.GenericFunction:
    @tf.function(jit_compile=jit_compile)
    def step(kernel: tf.Tensor, x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(kernel)
            loss = tf.reduce_sum(tf.square(project_channels_first(kernel, x)))
        return tape.gradient(loss, [kernel])

    return step


OPS = {"SitChannelsFirstProjection", "SitChannelsFirstProjectionKernelGrad"}


def _gradients_by(matmul: bool):
    return native.projection_gradients_by_matmuls() if matmul else native.projection_gradients_by_the_ops()


@pytest.mark.parametrize("by_matmul", [False, True], ids=["native_gradients", "onednn_matmul_gradients"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_the_layers_projection_runs_the_ops_under_a_tape_and_matmul_elsewhere(
    dtype: tf.DType, by_matmul: bool
) -> None:
    """Where TensorFlow runs oneDNN (``projection_gradients_by_matmul``) the gradients are its matmuls
    (XLA's dots under XLA) and the forward the op."""
    kernel, x, _ = _random(6, 8, 50, seed=2, dtype=dtype)
    with _gradients_by(by_matmul):
        graph = op_types(_train_step(), kernel, x)
        in_xla = op_types(_train_step(jit_compile=True), kernel, x)
    assert OPS & graph == ({"SitChannelsFirstProjection"} if by_matmul else OPS)
    assert ("BatchMatMulV2" in graph) == by_matmul  # the kernel's gradient as a batch of one
    assert not OPS & op_types(tf.function(project_channels_first), kernel, x)
    loads = native.xla_load_problem() is None  # tests/test_native_xla.py
    assert OPS & in_xla == (graph & OPS if loads else set())  # XLA takes the same way
    with native.builtin_only():
        assert not OPS & op_types(_train_step(), kernel, x)
    with native.forward_passes():
        assert "SitChannelsFirstProjection" in op_types(tf.function(project_channels_first), kernel, x)


@pytest.mark.parametrize("by_matmul", [False, True], ids=["native_gradients", "onednn_matmul_gradients"])
def test_the_layers_projection_and_its_gradients_are_the_matmuls_either_way(by_matmul: bool) -> None:
    """float64, shapes multiples of nothing: the native forward with either set of gradients is the matmul
    and TensorFlow's gradients to 1e-12."""
    kernel, x, dy = _random(13, 7, 1037, seed=5)
    step = tf.function(lambda *args: _with_gradients(project_channels_first, *args))
    with _gradients_by(by_matmul):
        step.get_concrete_function(kernel, x, dy)  # traced here
    assert ("SitChannelsFirstProjectionKernelGrad" in op_types(step, kernel, x, dy)) != by_matmul
    expected = _with_gradients(_builtin, kernel, x, dy)
    for got, want in zip(step(kernel, x, dy), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("folded", [False, True], ids=["gathered", "folded"])
def test_under_xla_the_kernel_gradient_keeps_its_product_and_transposes_after(folded: bool) -> None:
    """Under XLA the matmuls' kernel gradient is ``dy x^T`` (``(N, R)`` in memory) transposed after by a
    gather, not XLA's fold of the transpose into ``x dy^T`` (``(R, N)``), unless
    ``folded_kernel_gradients()``; either way TensorFlow's gradients to 1e-12 in float64 (shapes multiples
    of nothing)."""
    step = tf.function(lambda *args: _with_gradients(project_channels_first, *args), jit_compile=True)
    kernel, x, dy = _random(13, 7, 1037, seed=6)
    folding = folded_kernel_gradients() if folded else contextlib.nullcontext()
    with native.projection_gradients_by_matmuls(), folding:
        step.get_concrete_function(kernel, x, dy)  # traced here
        float32 = [tf.cast(t, tf.float32) for t in (kernel, x, dy)]
        hlo = step.experimental_get_compiler_ir(*float32)(stage="optimized_hlo")
    # Each product's shape as it lies in memory: a layout {0,1} is the transpose of {1,0}.
    products = re.findall(r"= f32\[(\d+),(\d+)\]\{(\d),\d\} (?:dot|custom-call)\(", hlo)
    in_memory = [(rows, cols) if minor == "1" else (cols, rows) for rows, cols, minor in products]
    kernel_products = [shape for shape in in_memory if set(shape) == {"13", "7"}]
    assert kernel_products == [("13", "7") if folded else ("7", "13")]
    for got, want in zip(step(kernel, x, dy), _with_gradients(_builtin, kernel, x, dy), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_gradients_are_matmuls_where_tensorflow_runs_onednn() -> None:
    """``projection_gradients_by_matmul`` is TensorFlow's own answer (``IsMklEnabled``), which
    ``TF_ENABLE_ONEDNN_OPTS=0`` turns off in a new process."""
    from tensorflow.python.util import _pywrap_util_port

    assert native.projection_gradients_by_matmul() == _pywrap_util_port.IsMklEnabled()
    with native.projection_gradients_by_the_ops():
        assert not native.projection_gradients_by_matmul()
        with native.projection_gradients_by_matmuls():
            assert native.projection_gradients_by_matmul()
    code = "from sit_keras import native; print(native.projection_gradients_by_matmul())"
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_in_bfloat16_the_layers_projection_runs_neither_float_op() -> None:
    """bfloat16 runs TensorFlow's matmul or the bfloat16 op (tests/test_native_projection_bfloat16.py)."""
    kernel, x, _ = _random(6, 8, 50, seed=3, dtype=tf.bfloat16)
    assert not OPS & op_types(_train_step(), kernel, x)
