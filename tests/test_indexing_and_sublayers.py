"""The exact indexing helpers (constant gathers, shared-weight expansion) and scoped sublayer builds."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given
from hypothesis import strategies as st

from sit_keras.layers.indexing import ConstantGather, expand_shared, preimage_table
from sit_keras.layers.sublayers import build_sublayer


@given(
    indices=st.lists(st.integers(0, 6), min_size=1, max_size=20),
    ignore=st.one_of(st.none(), st.integers(0, 6)),
)
def test_preimage_table_lists_exactly_the_outputs_reading_each_input(
    indices: list[int], ignore: int | None
) -> None:
    table = preimage_table(np.array(indices), 7, ignore=ignore)
    sentinel = len(indices)
    for position in range(7):
        listed = sorted(int(o) for o in table[position] if o != sentinel)
        expected = [] if position == ignore else [o for o, i in enumerate(indices) if i == position]
        assert listed == expected


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_constant_gather_matches_tf_gather_and_its_gradient(axis: int) -> None:
    rng = np.random.default_rng(axis + 5)
    x = tf.constant(rng.normal(size=(3, 4, 5)))
    n = x.shape[axis]
    indices = rng.integers(0, n, size=9)
    gather = ConstantGather(indices, n, axis)
    weights = tf.constant(rng.normal(size=tf.gather(x, indices, axis=axis).shape))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = gather(x)
        reference = tf.gather(x, indices, axis=axis)
        loss_ours, loss_reference = tf.reduce_sum(ours * weights), tf.reduce_sum(reference * weights)
    np.testing.assert_array_equal(ours.numpy(), reference.numpy())
    np.testing.assert_allclose(
        tape.gradient(loss_ours, x).numpy(),
        tf.convert_to_tensor(tape.gradient(loss_reference, x)).numpy(),
        atol=1e-12,
    )


def test_constant_gather_drops_only_the_gradient_of_the_zero_input() -> None:
    x = tf.constant([[1.0, 2.0, 0.0]])  # position 2 is padding that many outputs read
    gather = ConstantGather(np.array([0, 2, 2, 1, 2]), 3, axis=1, zero_input=2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(gather(x) * tf.constant([[1.0, 2.0, 3.0, 4.0, 5.0]]))
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), [[1.0, 4.0, 0.0]])


def test_expand_shared_reads_rows_and_zero_for_the_sentinel() -> None:
    weights = tf.constant([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    out = expand_shared(weights, np.array([[2, 0], [3, 1]]))
    np.testing.assert_array_equal(out.numpy(), [[[3, 30], [1, 10]], [[0, 0], [2, 20]]])
    with tf.GradientTape() as tape:
        tape.watch(weights)
        loss = tf.reduce_sum(expand_shared(weights, np.array([0, 0, 2, 3])))
    np.testing.assert_array_equal(tape.gradient(loss, weights).numpy(), [[2, 2], [0, 0], [1, 1]])


def test_build_sublayer_names_variables_after_the_sublayer() -> None:
    first, second = tf_keras.layers.Dense(3, name="first"), tf_keras.layers.Dense(3, name="second")
    build_sublayer(first, tf.TensorShape([None, 4]))
    build_sublayer(second, tf.TensorShape([None, 4]))
    names = [v.name for v in first.weights + second.weights]
    assert len(set(names)) == len(names) == 4
    assert all(name.startswith(("first/", "second/")) for name in names), names
