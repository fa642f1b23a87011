"""The exact indexing helpers (constant gathers, shared-weight expansion) and scoped sublayer builds."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given
from hypothesis import strategies as st

from sit_keras.encoder_check import make_train_step
from sit_keras.layers.indexing import ConstantGather, expand_shared, preimage_table, row_gather
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.models import ENCODER_NAMES, build_encoder
from sit_keras.models.group_transformer import build_group_transformer
from sit_keras.models.sensor_encoder import SensorSetEncoder


@given(
    rows=st.integers(1, 5),
    index_shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    width=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_row_gather_is_tf_gather_with_a_dense_gradient(
    rows: int, index_shape: list[int], width: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(rows, width)))
    indices = rng.integers(0, rows, size=index_shape)
    upstream = tf.constant(rng.normal(size=(*index_shape, width)))
    gradients = []
    for gather in (row_gather, tf.gather):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gather(x, indices)
        np.testing.assert_array_equal(y, tf.gather(x, indices))
        gradients.append(tape.gradient(y, x, output_gradients=upstream))
    assert isinstance(gradients[0], tf.Tensor)
    assert isinstance(gradients[1], tf.IndexedSlices)  # what row_gather avoids
    np.testing.assert_allclose(gradients[0], tf.convert_to_tensor(gradients[1]), rtol=1e-12, atol=1e-12)


def _not_dense_gradients(model: tf_keras.layers.Layer, x: tf.Tensor) -> list[str]:
    """The weights whose gradient is not a dense tensor: ``tf.IndexedSlices``, or none at all."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(model(x, training=True), tf.float32) ** 2)
    gradients = tape.gradient(loss, model.trainable_variables)
    return [
        f"{v.name}: {type(g).__name__}"
        for v, g in zip(model.trainable_variables, gradients, strict=True)
        if not isinstance(g, tf.Tensor)
    ]


@pytest.mark.parametrize("name", ENCODER_NAMES)
def test_no_encoder_hands_the_optimizer_a_sparse_gradient(name: str) -> None:
    # Tables of shared weights are read thousands of times; as tf.IndexedSlices their gradients
    # would make Adam deduplicate every row read (tf.unique: a sort under XLA) at each step.
    encoder = build_encoder(name, (16, 16, 3))
    assert not _not_dense_gradients(encoder, tf.random.uniform((2, 16, 16, 3)))


def test_a_siet_train_step_under_xla_sorts_nothing() -> None:
    # What the sparse gradients cost under XLA: Adam's tf.unique of their indices became sorts.
    encoder = build_encoder("siet", (16, 16, 3))
    images = tf.random.uniform((2, 16, 16, 3))
    step = make_train_step(encoder, jit_compile=True)
    hlo = step.experimental_get_compiler_ir(images)(stage="optimized_hlo")
    assert " dot(" in hlo or "matmul" in hlo  # the compiled step itself, not an empty module
    assert " sort(" not in hlo


@pytest.mark.parametrize("group", ["p4", "p4m"])
def test_no_group_transformer_hands_the_optimizer_a_sparse_gradient(group: str) -> None:
    model = build_group_transformer(group, (8, 8, 1), 10, preset="digits")
    assert not _not_dense_gradients(model, tf.random.uniform((2, 8, 8, 1)))


def test_the_sensor_type_embedding_hands_the_optimizer_a_dense_gradient() -> None:
    encoder = SensorSetEncoder(num_features=3, action_dim=2, output_dim=8, num_sensor_types=4)
    readings, actions = tf.random.uniform((5, 7, 3)), tf.zeros((5, 2))
    types = tf.constant(np.random.default_rng(0).integers(0, 4, size=(5, 7)), tf.int32)
    with tf.GradientTape() as tape:
        code, _ = encoder(readings, actions, sensor_types=types)
        loss = tf.reduce_sum(code**2)
    variables = encoder.trainable_variables
    gradients = dict(zip([v.name for v in variables], tape.gradient(loss, variables), strict=True))
    assert all(isinstance(g, tf.Tensor) for g in gradients.values()), gradients
    table = encoder.type_embedding.embeddings
    assert float(tf.norm(gradients[table.name])) > 0
    # The same rows the embedding layer reads.
    np.testing.assert_array_equal(
        encoder._with_types(readings, types, None)[..., 3:], encoder.type_embedding(types)
    )


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
