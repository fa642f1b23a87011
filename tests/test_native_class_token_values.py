"""``native.class_token_values`` (``SitClassTokenValues`` and its gradient): the values half of the class
token's row of a single local block (``GraphSymmetricAttention.attend_constant_class_token``).

Its formula and every gradient in float64 against TensorFlow's ops on the same inputs, for window counts
that are not multiples of the lanes, any number of input rows, tokens, heads and maps; the same bits on
every run; malformed inputs refused with the expected shape; and under XLA the op's custom call, equal
to the op outside it. The layer's use of it is tested against the reference in ``tests/test_fast_paths.py``
and in bfloat16 storage in ``tests/test_native_bfloat16.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from traced_ops import custom_calls, needs_xla_kernels

from sit_keras import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load_problem()}")


def _case(
    rng: np.random.Generator, windows: int, rows: int, tokens: int, heads: int, head_dim: int, maps: int
):
    """Random float64 inputs of the op: x in lane blocks, scores for the padded windows; and an upstream."""
    dim = heads * head_dim
    x = native.lane_blocks(tf.constant(rng.normal(size=(rows, windows, tokens))))
    padded = x.shape[1] * native.LANES
    scores = tf.constant(rng.normal(size=(padded, 2, heads, tokens)))
    kernel = tf.constant(rng.normal(size=(rows, dim)))
    graphs = tf.constant(rng.normal(size=(dim, tokens, tokens)) / tokens)
    coefficients = tf.constant(rng.normal(size=(maps, 2)))
    upstream = tf.constant(rng.normal(size=(padded, 1, dim)))
    return [x, scores, kernel, graphs], coefficients, upstream


def _builtin(x, scores, kernel, graphs, coefficients, heads: int) -> tf.Tensor:
    """The op's formula in TensorFlow's ops: the maps' softmaxes, the values projected, mixed and weighted."""
    row, column = scores[:, 0], scores[:, 1]  # (B, H, T)
    attention = sum(tf.nn.softmax(c[0] * row + c[1] * column, axis=-1) for c in tf.unstack(coefficients))
    rows, blocks, tokens, lanes = x.shape
    inputs = tf.reshape(tf.transpose(x, [0, 1, 3, 2]), [rows, blocks * lanes, tokens])  # (R, B, T)
    values = tf.einsum("rc,rbt->cbt", kernel, inputs)
    mixed = tf.einsum("cbt,ctj->cbj", values, graphs)  # G_v per feature (eq. 11)
    per_head = tf.reshape(mixed, [heads, -1, *mixed.shape[1:]])  # (H, d, B, T)
    out = tf.einsum("bhj,hdbj->bhd", attention, per_head)
    return tf.reshape(out, [out.shape[0], 1, -1])


def _with_gradients(attend, inputs: list[tf.Tensor], upstream: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = attend(*inputs)
        loss = tf.reduce_sum(out * upstream)
    return [out, *tape.gradient(loss, inputs)]


@settings(deadline=None, max_examples=12)
@given(
    windows=st.integers(1, 40),
    rows=st.integers(1, 7),
    tokens=st.integers(2, 26),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([1, 3, 8]),
    maps=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_the_op_and_its_gradients_are_its_formula(
    windows: int, rows: int, tokens: int, heads: int, head_dim: int, maps: int, seed: int
) -> None:
    inputs, coefficients, upstream = _case(
        np.random.default_rng(seed), windows, rows, tokens, heads, head_dim, maps
    )

    def op(*args: tf.Tensor) -> tf.Tensor:
        return native.class_token_values(*args, coefficients, heads)

    def builtin(*args: tf.Tensor) -> tf.Tensor:
        return _builtin(*args, coefficients, heads)

    results = [_with_gradients(f, inputs, upstream) for f in (op, builtin)]
    for got, expected in zip(*results, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-11, atol=1e-11)


def test_gradients_finished_in_full_and_part_full_groups_are_the_formula() -> None:
    """Enough windows that a chunk of blocks (two chunks a thread on a 2-core host) spans a whole group of
    kValuesGroup = 16 blocks and a part-full one, each of which the gradient finishes together
    (class_token_values.h)."""
    inputs, coefficients, upstream = _case(np.random.default_rng(5), 2000, 3, 6, 2, 3, 2)

    def op(*args: tf.Tensor) -> tf.Tensor:
        return native.class_token_values(*args, coefficients, 2)

    def builtin(*args: tf.Tensor) -> tf.Tensor:
        return _builtin(*args, coefficients, 2)

    results = [_with_gradients(f, inputs, upstream) for f in (op, builtin)]
    for got, expected in zip(*results, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-11, atol=1e-11)


def test_the_gradients_are_the_same_bits_on_every_run() -> None:
    """The kernel's and the graphs' gradients are summed per chunk of windows and then in a fixed order."""
    inputs, coefficients, upstream = _case(np.random.default_rng(3), 300, 6, 10, 4, 8, 1)
    inputs = [tf.cast(t, tf.float32) for t in inputs]
    ops = native.library()
    runs = [
        ops.sit_class_token_values_grad(
            tf.cast(upstream, tf.float32), *inputs, tf.cast(coefficients, tf.float32), num_heads=4
        )
        for _ in range(3)
    ]
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
    "shapes, message",
    [
        ([(6, 1, 10, 3), (16, 2, 4, 10), (6, 32), (32, 10, 10), (1, 2)], r"expects x \(R, B / \d+, T, \d+\)"),
        ([(6, 1, 10, None), (16, 2, 4, 10), (5, 32), (32, 10, 10), (1, 2)], r"expects kernel \(6, H d\)"),
        ([(6, 1, 10, None), (16, 2, 4, 10), (6, 30), (30, 10, 10), (1, 2)], r"expects kernel \(6, H d\)"),
        (
            [(6, 1, 10, None), (16, 2, 4, 9), (6, 32), (32, 10, 10), (1, 2)],
            r"expects scores \(\d+, 2, 4, 10\)",
        ),
        ([(6, 1, 10, None), (16, 2, 4, 10), (6, 32), (32, 9, 9), (1, 2)], r"expects graphs \(32, 10, 10\)"),
        ([(6, 1, 10, None), (16, 2, 4, 10), (6, 32), (32, 10, 10), (1, 3)], r"expects coefficients \(M, 2\)"),
    ],
    ids=["x_lanes", "kernel_rows", "kernel_heads", "scores", "graphs", "coefficients"],
)
def test_the_op_refuses_malformed_inputs_naming_the_expected_shape(shapes: list, message: str) -> None:
    lanes = native.LANES
    shapes = [tuple(lanes if d is None else d for d in shape) for shape in shapes]
    shapes[1] = (lanes * shapes[0][1], *shapes[1][1:]) if shapes[1][0] == 16 else shapes[1]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        native.library().sit_class_token_values(*[tf.zeros(s) for s in shapes], num_heads=4)


def test_the_gradient_refuses_a_dout_of_another_shape() -> None:
    lanes = native.LANES
    inputs = [
        tf.zeros((6, 1, 10, lanes)),
        tf.zeros((lanes, 2, 4, 10)),
        tf.zeros((6, 32)),
        tf.zeros((32, 10, 10)),
    ]
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"expects dout \({lanes}, 1, 32\)"):
        native.library().sit_class_token_values_grad(
            tf.zeros((lanes, 1, 31)), *inputs, tf.ones((1, 2)), num_heads=4
        )


@needs_xla_kernels
@settings(deadline=None, max_examples=6)
@given(windows=st.integers(1, 40), maps=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_under_xla_the_op_is_its_custom_call_and_equals_the_op_outside_it(windows: int, maps: int, seed: int):
    inputs, coefficients, upstream = _case(np.random.default_rng(seed), windows, 6, 10, 2, 3, maps)

    def op(*args: tf.Tensor) -> tf.Tensor:
        return native.class_token_values(*args, coefficients, 2)

    compiled = tf.function(lambda *args: _with_gradients(op, list(args), upstream), jit_compile=True)
    assert {"sit_class_token_values_f64", "sit_class_token_values_grad_f64"} <= custom_calls(
        compiled, *inputs
    )
    for got, expected in zip(compiled(*inputs), _with_gradients(op, inputs, upstream), strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
