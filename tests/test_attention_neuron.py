"""Tests of AttentionNeuron and VisionAttentionNeuron (Tang & Ha, NeurIPS 2021, eq. 1-2).

What this file proves:

- ``AttentionNeuron``'s code is invariant under every permutation of its
  inputs applied with the same permutation of the per-input LSTM state (the
  new state is permuted along), also when the inputs are reshuffled in the
  middle of a sequence; without moving the state along it is *not*;
- it runs on any number of inputs with the same weights (5, then 10), and the
  tanh / softmax codes of duplicated inputs are exactly the doubled sum /
  the same weighted mean;
- padded inputs with a mask contribute exactly nothing: the code and the
  real inputs' state equal those of the unpadded inputs bit for bit, over
  several steps, whatever the padding holds (NaN included), and gradients
  stay finite;
- the code depends on every input value, on the previous action and on the
  state (not a constant function);
- ``VisionAttentionNeuron`` is invariant under shuffling the screen's patches
  or a list of patches, and occlusion by ``patch_indices``, by ``mask`` or by
  passing only the visible patches gives the same code;
- both layers survive a config round trip, compile with XLA to the eager
  result, pass gradients to every weight and reject bad shapes and options
  with a ``ValueError`` that shows the expected and received shapes.

Symmetry checks run in float64 on random inputs with perturbed weights.
"""

from __future__ import annotations

import doctest
import re
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import given
from hypothesis import strategies as st

from sit_keras import testing
from sit_keras.layers import attention_neuron as neuron_module
from sit_keras.layers import vision_attention_neuron as vision_module
from sit_keras.layers.attention_neuron import AttentionNeuron, sinusoidal_queries
from sit_keras.layers.vision_attention_neuron import VisionAttentionNeuron, extract_patches

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
ATTENTIONS = pytest.mark.parametrize("attention", ["tanh", "softmax"])

# (num_features, value_dim): scalar pass-through (the paper), F features, learned W_v.
VARIANTS = {"scalar": (None, None), "features": (3, None), "value_dim": (2, 5), "scalar_value_dim": (None, 4)}
VARIANT = pytest.mark.parametrize("num_features, value_dim", VARIANTS.values(), ids=VARIANTS.keys())


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


# -- helpers -----------------------------------------------------------------------
def _neuron(num_features: int | None = None, value_dim: int | None = None, **options: Any) -> AttentionNeuron:
    options = {
        "action_dim": 2,
        "num_queries": 6,
        "hidden_size": 4,
        "projection_dim": 8,
        "dtype": DTYPE,
    } | options
    layer = AttentionNeuron(num_features=num_features, value_dim=value_dim, **options)
    layer.build((None, None) if num_features is None else (None, None, num_features))
    testing.perturb_weights(layer, trainable_only=True)
    return layer


def _readings(layer: AttentionNeuron, batch: int, count: int, seed: int = 1) -> tf.Tensor:
    shape = (batch, count) if layer.num_features is None else (batch, count, layer.num_features)
    return testing.random_normal(shape, seed)


def _state(layer: AttentionNeuron, batch: int, count: int, seed: int = 2) -> list[tf.Tensor]:
    return [testing.random_normal((batch, count, layer.hidden_size), seed + k) for k in range(2)]


def _permute(x: tf.Tensor, order: np.ndarray) -> tf.Tensor:
    return tf.gather(x, order, axis=1)


def _rel(a: tf.Tensor, b: tf.Tensor) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-30))


def _packed_call(layer: AttentionNeuron, action: tf.Tensor):
    """``f(packed)`` for ``assert_invariant``: inputs and state packed on one ``(B, N, .)`` tensor.

    A permutation of axis 1 of the packed tensor then permutes the inputs and
    the state together, which is the symmetry the layer promises.
    """
    f, h = layer.features_per_input, layer.hidden_size

    def fn(packed: tf.Tensor) -> tf.Tensor:
        x = packed[..., :f] if layer.num_features is not None else packed[..., 0]
        state = [packed[..., f : f + h], packed[..., f + h :]]
        repeat = packed.shape[0] // action.shape[0]
        return layer(x, tf.tile(action, [repeat, 1]), state=state)[0]

    return fn


def _pack(x: tf.Tensor, state: list[tf.Tensor]) -> tf.Tensor:
    x = x[..., None] if x.shape.rank == 2 else x
    return tf.concat([x, *state], axis=-1)


def _permutations(count: int, number: int = 3, seed: int = 5) -> dict[str, testing.Transform]:
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(count) for _ in range(number)] + [np.roll(np.arange(count), 1)]
    return {f"perm{k}": (lambda t, o=o: _permute(t, o)) for k, o in enumerate(orders)}


# -- permutation invariance ---------------------------------------------------------
@ATTENTIONS
@VARIANT
def test_code_is_invariant_under_permutations_of_inputs_and_state(
    attention: str, num_features: int | None, value_dim: int | None
) -> None:
    layer = _neuron(num_features, value_dim, attention=attention)
    x, state, action = _readings(layer, 3, 7), _state(layer, 3, 7), testing.random_normal((3, 2), seed=9)
    packed = _pack(x, state)
    testing.assert_invariant(_packed_call(layer, action), packed, _permutations(7))
    # Equivariance of the new state: it is permuted along with the inputs.
    order = np.random.default_rng(3).permutation(7)
    _, new_state = layer(x, action, state=state)
    _, permuted_state = layer(_permute(x, order), action, state=[_permute(s, order) for s in state])
    for s, p in zip(new_state, permuted_state, strict=True):
        assert _rel(p, _permute(s, order)) <= TOL


@ATTENTIONS
def test_moving_the_inputs_without_their_state_changes_the_code(attention: str) -> None:
    # The per-input state is what identifies an input: the check above can fail.
    layer = _neuron(attention=attention)
    x, state, action = _readings(layer, 3, 7), _state(layer, 3, 7), testing.random_normal((3, 2), seed=9)
    order = np.roll(np.arange(7), 1)
    code, _ = layer(x, action, state=state)
    moved, _ = layer(_permute(x, order), action, state=state)
    assert _rel(moved, code) > 1e-3


@ATTENTIONS
@VARIANT
def test_reshuffling_mid_sequence_keeps_every_output(
    attention: str, num_features: int | None, value_dim: int | None
) -> None:
    layer = _neuron(num_features, value_dim, attention=attention)
    steps, batch, count = 6, 2, 5
    xs = [_readings(layer, batch, count, seed=10 + t) for t in range(steps)]
    actions = [testing.random_normal((batch, 2), seed=30 + t) for t in range(steps)]
    rng = np.random.default_rng(4)
    reference, state = [], None
    for x, a in zip(xs, actions, strict=True):
        code, state = layer(x, a, state=state)
        reference.append(code)
    # The same episode, reshuffled before steps 2 and 4: `order[j]` is the original index in slot j.
    order, shuffled_state = np.arange(count), None
    for t, (x, a) in enumerate(zip(xs, actions, strict=True)):
        if t in (2, 4):
            new = rng.permutation(count)
            shuffled_state = [_permute(s, new) for s in shuffled_state]
            order = order[new]
        code, shuffled_state = layer(_permute(x, order), a, state=shuffled_state)
        assert _rel(code, reference[t]) <= TOL, f"step {t}"
    for s, p in zip(state, shuffled_state, strict=True):
        assert _rel(p, _permute(s, order)) <= TOL
    assert (
        min(_rel(a, b) for a, b in zip(reference[:-1], reference[1:], strict=True)) > 1e-3
    )  # a sequence, not a constant


# -- variable N and exact masks ------------------------------------------------------
@ATTENTIONS
def test_one_layer_runs_on_5_then_10_inputs(attention: str) -> None:
    layer = _neuron(attention=attention)
    action = testing.random_normal((2, 2), seed=9)
    x5 = _readings(layer, 2, 5)
    code5, state5 = layer(x5, action)
    code10, state10 = layer(tf.concat([x5, x5], axis=1), action)
    noisy, _ = layer(tf.concat([x5, 0.1 * testing.random_normal((2, 5), seed=3)], axis=1), action)
    assert code5.shape == code10.shape == noisy.shape == (2, layer.num_queries)
    assert state10[0].shape == (2, 10, layer.hidden_size)
    assert all(np.all(np.isfinite(c.numpy())) for c in (code5, code10, noisy))
    # Each input twice: tanh sums twice the same terms, softmax keeps the same weighted mean.
    expected = 2 * code5 if attention == "tanh" else code5
    assert _rel(code10, expected) <= TOL
    assert _rel(noisy, code10) > 1e-3


def _pad(x: tf.Tensor, slots: np.ndarray, size: int, fill: float) -> tf.Tensor:
    """Places ``x``'s inputs (axis 1) at ``slots`` of a ``size``-long axis filled with ``fill``."""
    x = np.asarray(x)
    out = np.full((x.shape[0], size, *x.shape[2:]), fill, dtype=x.dtype)
    out[:, slots] = x
    return tf.constant(out)


@ATTENTIONS
@VARIANT
@pytest.mark.parametrize("fill", [0.0, 1e3, np.nan], ids=["zero", "large", "nan"])
def test_padded_and_masked_inputs_contribute_nothing(
    attention: str, num_features: int | None, value_dim: int | None, fill: float
) -> None:
    layer = _neuron(num_features, value_dim, attention=attention)
    batch, count, size = 3, 5, 9
    slots = np.sort(np.random.default_rng(6).choice(size, count, replace=False))  # padding interleaved
    mask = np.zeros((batch, size), bool)
    mask[:, slots] = True
    state, padded_state = None, _pad(np.zeros((batch, count, layer.hidden_size)), slots, size, 7.0)
    padded_state = [padded_state, padded_state]  # padded slots hold memories that must stay as they are
    for t in range(3):
        x, a = _readings(layer, batch, count, seed=40 + t), testing.random_normal((batch, 2), seed=50 + t)
        padded_x = _pad(x, slots, size, fill)
        readings = padded_x if layer.num_features is not None else padded_x[..., None]
        readings = tf.where(mask[..., None], readings, tf.zeros_like(readings))
        hidden = layer.keys(readings, a, *padded_state)[0]
        weights = layer.attention_weights(hidden, tf.constant(mask)).numpy()
        np.testing.assert_array_equal(np.delete(weights, slots, axis=1), 0.0)  # exactly nothing
        code, state = layer(x, a, state=state)
        padded_code, padded_state = layer(padded_x, a, state=padded_state, mask=mask)
        # The sum over N may associate differently for 5 and 9 terms: rounding only.
        assert _rel(padded_code, code) <= TOL
        for s, p in zip(state, padded_state, strict=True):
            np.testing.assert_array_equal(tf.gather(p, slots, axis=1).numpy(), s.numpy())
            np.testing.assert_array_equal(np.delete(p.numpy(), slots, axis=1), 7.0)


@ATTENTIONS
def test_masked_padding_leaves_gradients_finite_and_everything_masked_gives_zeros(attention: str) -> None:
    layer = _neuron(attention=attention)
    x = _pad(_readings(layer, 2, 4), np.array([0, 2, 3, 5]), 6, np.nan)
    mask = tf.constant(~np.isnan(x.numpy()))
    mask = tf.tensor_scatter_nd_update(mask, [[1, 0], [1, 2], [1, 3], [1, 5]], [False] * 4)  # row 1: no input
    with tf.GradientTape() as tape:
        code, _ = layer(x, testing.random_normal((2, 2), seed=9), mask=mask)
        loss = tf.reduce_sum(code * testing.random_normal(code.shape, seed=8))
    gradients = tape.gradient(loss, layer.trainable_variables)
    assert all(np.all(np.isfinite(g.numpy())) for g in gradients)
    np.testing.assert_array_equal(code[1].numpy(), 0.0)
    assert np.all(code[0].numpy() != 0.0)


# -- the code depends on what it should -----------------------------------------------
@ATTENTIONS
@VARIANT
def test_code_changes_with_each_value_the_action_and_the_state(
    attention: str, num_features: int | None, value_dim: int | None
) -> None:
    layer = _neuron(num_features, value_dim, attention=attention)
    x, state, action = _readings(layer, 2, 5), _state(layer, 2, 5), testing.random_normal((2, 2), seed=9)
    code, _ = layer(x, action, state=state)
    for i in range(5):
        changed = x.numpy().copy()
        changed[:, i] += 0.5
        assert _rel(layer(changed, action, state=state)[0], code) > 1e-3, f"input {i}"
    assert _rel(layer(x, action + 0.5, state=state)[0], code) > 1e-3
    assert _rel(layer(x, action, state=[state[0] + 0.5, state[1]])[0], code) > 1e-3
    assert _rel(layer(x, action)[0], code) > 1e-3  # zero state


@given(
    batch=st.integers(1, 3),
    count=st.integers(1, 9),
    features=st.sampled_from([None, 1, 3]),
    seed=st.integers(0, 2**16),
)
def test_invariance_and_masks_hold_for_any_shape(
    batch: int, count: int, features: int | None, seed: int
) -> None:
    layer = _layer_for_features(features)
    x, state = _readings(layer, batch, count, seed), _state(layer, batch, count, seed)
    action = testing.random_normal((batch, 2), seed)
    code, new_state = layer(x, action, state=state)
    assert code.shape == (batch, *layer.output_shape_per_example)
    assert np.all(np.isfinite(code.numpy()))
    order = np.random.default_rng(seed).permutation(count)
    permuted, _ = layer(_permute(x, order), action, state=[_permute(s, order) for s in state])
    assert _rel(permuted, code) <= TOL
    slots = np.arange(count) * 2  # every other slot is padding
    mask = np.zeros((batch, 2 * count), bool)
    mask[:, slots] = True
    padded_state = [_pad(s, slots, 2 * count, 3.0) for s in state]
    padded, padded_new_state = layer(_pad(x, slots, 2 * count, -5.0), action, state=padded_state, mask=mask)
    assert _rel(padded, code) <= TOL
    for s, p in zip(new_state, padded_new_state, strict=True):
        np.testing.assert_array_equal(tf.gather(p, slots, axis=1).numpy(), s.numpy())


_LAYERS: dict[int | None, AttentionNeuron] = {}


def _layer_for_features(features: int | None) -> AttentionNeuron:
    # One layer per feature count for every hypothesis example: building is the slow part.
    if features not in _LAYERS:
        _LAYERS[features] = _neuron(features, attention="softmax" if features else "tanh")
    return _LAYERS[features]


# -- the query bank ------------------------------------------------------------------
def test_queries_are_fixed_sinusoidal_positional_encodings() -> None:
    q = sinusoidal_queries(16, 8)
    assert q.shape == (16, 8)
    np.testing.assert_allclose(q[0], [0, 1, 0, 1, 0, 1, 0, 1])
    np.testing.assert_allclose(q[3, 2], np.sin(3 / 10000 ** (2 / 8)))
    np.testing.assert_allclose(q[5, 7], np.cos(5 / 10000 ** (6 / 8)))
    assert len({tuple(row) for row in np.round(q, 12)}) == 16  # distinct queries
    layer = _neuron()
    names = sorted(w.name.split("/")[-1] for w in layer.trainable_weights)
    kernels = ["action_kernel", "input_kernel", "key_kernel", "query_kernel", "recurrent_kernel"]
    assert names == sorted(f"{n}:0" for n in [*kernels, "lstm_bias"])
    assert not layer.non_trainable_weights


# -- VisionAttentionNeuron -------------------------------------------------------------
def _vision(**options: Any) -> VisionAttentionNeuron:
    options = {
        "action_dim": 3,
        "num_queries": 10,
        "projection_dim": 8,
        "value_dim": 6,
        "dtype": DTYPE,
    } | options
    layer = VisionAttentionNeuron(**options)
    layer.build((None, 24, 18, options.get("num_frames", 4)))
    testing.perturb_weights(layer, trainable_only=True)
    return layer


def _frames(batch: int = 2, seed: int = 1, shape: tuple[int, int, int] = (24, 18, 4)) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).uniform(size=(batch, *shape)), dtype=DTYPE)


def _shuffle_patches(order: np.ndarray, patch: int = 6) -> testing.Transform:
    """Shuffles the patches of ``(B, H, W, k)`` frames: patch slot ``j`` gets patch ``order[j]``."""

    def transform(frames: tf.Tensor) -> tf.Tensor:
        _, h, w, k = frames.shape
        rows, cols = h // patch, w // patch
        grid = tf.reshape(extract_patches(frames, patch), [-1, rows, cols, patch * patch * k])
        grid = testing.permute_grid(grid, order)
        grid = tf.reshape(grid, [-1, rows, cols, patch, patch, k])
        return tf.reshape(tf.transpose(grid, [0, 1, 3, 2, 4, 5]), [-1, h, w, k])

    return transform


def test_extract_patches_cuts_row_major_patches() -> None:
    frames = _frames()
    patches = extract_patches(frames, 6)
    assert patches.shape == (2, 12, 6, 6, 4)
    np.testing.assert_array_equal(patches[:, 4].numpy(), frames[:, 6:12, 6:12].numpy())  # row 1, column 1
    np.testing.assert_array_equal(_shuffle_patches(np.arange(12))(frames).numpy(), frames.numpy())


@pytest.mark.parametrize("attention", ["softmax", "tanh"])
def test_vision_code_is_invariant_under_shuffled_patches(attention: str) -> None:
    layer = _vision(attention=attention)
    frames, action = _frames(), testing.random_normal((2, 3), seed=9)
    rng = np.random.default_rng(2)
    shuffles = {f"shuffle{k}": _shuffle_patches(rng.permutation(12)) for k in range(3)}

    def fn(x: tf.Tensor) -> tf.Tensor:
        return layer(x, tf.tile(action, [x.shape[0] // 2, 1]))

    testing.assert_invariant(fn, frames, shuffles)
    # A list of patches in any order gives the same code as the frames.
    patches = extract_patches(frames, 6)
    listed = layer(_permute(patches, rng.permutation(12)), action)
    assert _rel(listed, layer(frames, action)) <= TOL
    # Mirroring the screen also mirrors the pixels inside each patch: not a symmetry.
    testing.assert_not_invariant(fn, frames, {"flip_h": testing.flip_h})


def test_vision_occlusion_by_indices_mask_or_list_gives_one_code() -> None:
    layer = _vision()
    frames, action = _frames(), testing.random_normal((2, 3), seed=9)
    visible = np.array([1, 4, 5, 9, 11])
    by_indices = layer(frames, action, patch_indices=visible)
    per_example = layer(frames, action, patch_indices=np.stack([visible, visible[::-1]]))
    by_list = layer(tf.gather(extract_patches(frames, 6), visible, axis=1), action)
    mask = np.zeros((2, 12), bool)
    mask[:, visible] = True
    hidden_patches = extract_patches(frames, 6).numpy()
    hidden_patches[:, ~mask[0]] = np.nan  # occluded patches may hold anything
    by_mask = layer(tf.constant(hidden_patches), action, mask=mask)
    np.testing.assert_array_equal(by_list.numpy(), by_indices.numpy())
    assert _rel(by_mask, by_indices) <= TOL
    assert _rel(per_example, by_indices) <= TOL
    full = layer(frames, action)
    assert by_indices.shape == full.shape == (2, 10, 6)
    assert _rel(by_indices, full) > 1e-3
    # A single visible patch still works.
    assert np.all(np.isfinite(layer(frames, action, patch_indices=[3]).numpy()))


def test_vision_code_depends_on_the_frames_and_normalises_its_output() -> None:
    layer = _vision()
    frames, action = _frames(), testing.random_normal((2, 3), seed=9)
    code = layer(frames, action)
    changed = frames.numpy().copy()
    changed[:, 7, 8, 2] += 0.5  # one pixel of one frame
    assert _rel(layer(changed, action), code) > 1e-4
    # uint8 frames are scaled by 1/255.
    pixels = np.random.default_rng(3).integers(0, 256, size=(2, 24, 18, 4)).astype(np.uint8)
    assert _rel(layer(pixels, action), layer(pixels / 255.0, action)) <= TOL
    # The output layer norm: with its initial scale and offset each code row has mean 0, variance ~1.
    plain = VisionAttentionNeuron(3, num_queries=10, projection_dim=8, value_dim=6, dtype=DTYPE)
    out = plain(frames, action).numpy()
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=-1), 1.0, rtol=1e-3)


def test_softmax_cancels_the_previous_action_in_the_vision_keys() -> None:
    # eq. 2 with linear keys: a_{t-1} shifts all of a query's patch scores
    # equally, which the softmax over the patches removes; tanh keeps it.
    frames, action = _frames(), testing.random_normal((2, 3), seed=9)
    softmax, tanh = _vision(attention="softmax"), _vision(attention="tanh")
    assert _rel(softmax(frames, action + 1.0), softmax(frames, action)) <= TOL
    assert _rel(tanh(frames, action + 1.0), tanh(frames, action)) > 1e-3


# -- serialisation, XLA, gradients -----------------------------------------------------
def _round_trip(layer: tf_keras.layers.Layer) -> tf_keras.layers.Layer:
    restored = testing.serialization_round_trip(layer)
    assert type(restored) is type(layer)
    assert restored.get_config() == layer.get_config()
    return restored


@VARIANT
def test_attention_neuron_config_round_trip(num_features: int | None, value_dim: int | None) -> None:
    layer = _neuron(num_features, value_dim, attention="softmax")
    restored = _round_trip(layer)
    x, action, state = _readings(layer, 2, 4), testing.random_normal((2, 2)), _state(layer, 2, 4)
    restored(x, action)
    restored.set_weights(layer.get_weights())
    assert restored.compute_dtype == DTYPE
    expected = layer(x, action, state=state)[0].numpy()
    np.testing.assert_array_equal(restored(x, action, state=state)[0].numpy(), expected)


def test_vision_config_round_trip() -> None:
    layer = _vision(attention="tanh", epsilon=1e-4)
    restored = _round_trip(layer)
    frames, action = _frames(), testing.random_normal((2, 3))
    restored(frames, action)
    restored.set_weights(layer.get_weights())
    np.testing.assert_array_equal(restored(frames, action).numpy(), layer(frames, action).numpy())


@ATTENTIONS
def test_xla_matches_eager(attention: str) -> None:
    layer = _neuron(3, attention=attention)
    x, action, state = _readings(layer, 2, 6), testing.random_normal((2, 2)), _state(layer, 2, 6)
    mask = tf.constant(np.random.default_rng(0).uniform(size=(2, 6)) > 0.3)

    @tf.function(jit_compile=True)
    def compiled(x, action, h, c, mask):
        return layer(x, action, state=[h, c], mask=mask, training=False)

    eager = layer(x, action, state=state, mask=mask)
    for a, b in zip(tf.nest.flatten(compiled(x, action, *state, mask)), tf.nest.flatten(eager), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    vision = _vision(attention=attention)
    frames, vision_action = _frames(), testing.random_normal((2, 3))
    fast = tf.function(lambda f, a: vision(f, a, patch_indices=[0, 2, 7], training=True), jit_compile=True)
    np.testing.assert_allclose(
        fast(frames, vision_action).numpy(),
        vision(frames, vision_action, patch_indices=[0, 2, 7]).numpy(),
        rtol=1e-12,
        atol=1e-12,
    )


@given(batch=st.integers(1, 3), count=st.integers(1, 6), hidden=st.integers(1, 5), seed=st.integers(0, 3))
def test_both_forms_of_the_lstm_gates_give_the_same_gates_and_gradients(
    batch: int, count: int, hidden: int, seed: int
) -> None:
    pre_activations = testing.random_normal((batch, count, 4 * hidden), seed)
    upstream = [testing.random_normal((batch, count, hidden), seed + 1 + k) for k in range(4)]
    results = []
    for whole_sigmoid in (False, True):
        with tf.GradientTape() as tape:
            tape.watch(pre_activations)
            gates = neuron_module.lstm_gates(pre_activations, whole_sigmoid=whole_sigmoid)
            loss = sum(tf.reduce_sum(g * u) for g, u in zip(gates, upstream, strict=True))
        assert [g.shape for g in gates] == [(batch, count, hidden)] * 4
        results.append([*gates, tape.gradient(loss, pre_activations)])
    for split, whole in zip(*results, strict=True):
        np.testing.assert_allclose(whole.numpy(), split.numpy(), rtol=1e-15, atol=1e-15)


def test_xla_takes_the_lstm_gates_whole_and_a_graph_split() -> None:
    layer = _neuron(3)
    x, action = _readings(layer, 2, 5), testing.random_normal((2, 2))

    def sigmoid_widths(jit_compile: bool) -> list[int]:
        function = tf.function(lambda x, a: layer(x, a)[0], jit_compile=jit_compile)
        graph = function.get_concrete_function(x, action).graph
        return sorted(op.outputs[0].shape[-1] for op in graph.get_operations() if op.type == "Sigmoid")

    assert sigmoid_widths(jit_compile=True) == [4 * layer.hidden_size]
    assert sigmoid_widths(jit_compile=False) == [layer.hidden_size] * 3


@pytest.mark.parametrize("which", ["neuron", "neuron_value_dim", "vision"])
def test_gradients_reach_every_weight(which: str) -> None:
    if which == "vision":
        layer = _vision()
        inputs = (_frames(), testing.random_normal((2, 3)))
    else:
        layer = _neuron(3, 4 if which == "neuron_value_dim" else None)
        inputs = (_readings(layer, 2, 5), testing.random_normal((2, 2)))
    with tf.GradientTape() as tape:
        # Two steps, so that the recurrent kernel matters too.
        out = layer(*inputs)
        if which != "vision":
            out = layer(*inputs, state=out[1])[0]
        loss = tf.reduce_sum(out * testing.random_normal(out.shape, seed=7))
    gradients = tape.gradient(loss, layer.trainable_variables)
    for variable, gradient in zip(layer.trainable_variables, gradients, strict=True):
        assert gradient is not None and np.any(gradient.numpy() != 0), variable.name


def test_float32_layers_compute_in_float32() -> None:
    layer = AttentionNeuron(action_dim=1)
    code, state = layer(np.ones((2, 5)), np.zeros((2, 1)))
    assert code.dtype == state[0].dtype == tf.float32
    vision = VisionAttentionNeuron(action_dim=1, num_queries=4, value_dim=4)
    assert vision(np.ones((1, 12, 12, 4), np.float32), np.zeros((1, 1))).dtype == tf.float32


# -- errors --------------------------------------------------------------------------
def _call_neuron(features: int | None = None, **overrides: Any):
    layer = AttentionNeuron(action_dim=2, hidden_size=4, num_features=features)
    inputs = overrides.pop("inputs", np.zeros((2, 5) if features is None else (2, 5, features), np.float32))
    kwargs = {"previous_action": np.zeros((2, 2), np.float32), **overrides}
    return lambda: layer(inputs, **kwargs)


BAD_CALLS = [
    (
        _call_neuron(inputs=np.zeros((2, 5, 1))),
        "inputs of shape (B, N) with N >= 1. Received: inputs.shape=(2, 5, 1)",
    ),
    (_call_neuron(3, inputs=np.zeros((2, 5, 2))), "(B, N, 3) with N >= 1. Received: inputs.shape=(2, 5, 2)"),
    (_call_neuron(inputs=np.zeros((2, 0))), "with N >= 1. Received: inputs.shape=(2, 0)"),
    (
        _call_neuron(previous_action=np.zeros((2, 3))),
        "previous_action of shape (2, 2). Received: previous_action.shape=(2, 3)",
    ),
    (_call_neuron(previous_action=np.zeros((3, 2))), "expects previous_action of shape (2, 2)"),
    (_call_neuron(previous_action=np.zeros(2)), "Received: previous_action.shape=(2,)"),
    (
        _call_neuron(mask=np.ones((2, 4), bool)),
        "mask of shape (2, 5) matching the inputs. Received: mask.shape=(2, 4)",
    ),
    (
        _call_neuron(state=[np.zeros((2, 5, 4))]),
        "each of shape (2, 5, 4). Received: state shapes=[TensorShape([2, 5, 4])]",
    ),
    (_call_neuron(state=[np.zeros((2, 5, 3))] * 2), "expects state [h, c], each of shape (2, 5, 4)"),
    (_call_neuron(state=[np.zeros((2, 6, 4))] * 2), "expects state [h, c], each of shape (2, 5, 4)"),
]


@pytest.mark.parametrize("call, message", BAD_CALLS)
def test_bad_shapes_raise_clear_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


VISION_BAD_CALLS = [
    (
        (np.zeros((1, 20, 18, 4)), np.zeros((1, 3))),
        {},
        "expects frames (B, H, W, 4) with H and W multiples of 6, or patches (B, N, 6, 6, 4). "
        "Received: inputs.shape=(1, 20, 18, 4)",
    ),
    ((np.zeros((1, 24, 18, 3)), np.zeros((1, 3))), {}, "Received: inputs.shape=(1, 24, 18, 3)"),
    (
        (np.zeros((1, 5, 6, 6, 2)), np.zeros((1, 3))),
        {},
        "(B, N, 6, 6, 4). Received: inputs.shape=(1, 5, 6, 6, 2)",
    ),
    (
        (np.zeros((1, 24, 18, 4)), np.zeros((1, 2))),
        {},
        "previous_action of shape (B, 3). Received: previous_action.shape=(1, 2)",
    ),
    (
        (np.zeros((1, 24, 18, 4)), np.zeros((1, 3))),
        {"mask": np.ones((1, 11), bool)},
        "expects a mask of shape (1, 12)",
    ),
    (
        (np.zeros((1, 24, 18, 4)), np.zeros((1, 3))),
        {"patch_indices": np.zeros((1, 2, 2), np.int32)},
        "patch_indices of shape (K,) or (B, K). Received: patch_indices.shape=(1, 2, 2)",
    ),
    ((np.zeros((1, 24, 18, 4)), np.zeros((1, 3))), {"patch_indices": np.zeros(2)}, "dtype=float64"),
]


@pytest.mark.parametrize("args, kwargs, message", VISION_BAD_CALLS)
def test_vision_bad_shapes_raise_clear_errors(args, kwargs: dict[str, Any], message: str) -> None:
    layer = VisionAttentionNeuron(action_dim=3, num_queries=4, value_dim=4)
    with pytest.raises(ValueError, match=re.escape(message)):
        layer(*args, **kwargs)


INVALID_OPTIONS = [
    (lambda: AttentionNeuron(2, attention="relu"), "one of ('tanh', 'softmax'). Received: attention='relu'"),
    (lambda: AttentionNeuron(0), "action_dim must be a positive integer. Received: action_dim=0"),
    (lambda: AttentionNeuron(2, num_queries=2.5), "num_queries must be a positive integer"),
    (lambda: AttentionNeuron(2, num_features=0), "num_features must be a positive integer"),
    (lambda: AttentionNeuron(2, value_dim=-1), "value_dim must be a positive integer"),
    (lambda: VisionAttentionNeuron(2, num_frames=1), "num_frames must be an integer >= 2"),
    (lambda: VisionAttentionNeuron(2, patch_size=0), "patch_size must be a positive integer"),
    (lambda: VisionAttentionNeuron(2, attention="sigmoid"), "attention must be one of"),
]


@pytest.mark.parametrize("factory, message", INVALID_OPTIONS)
def test_invalid_options_raise(factory, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        factory()


@pytest.mark.parametrize("module", [neuron_module, vision_module], ids=["neuron", "vision"])
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
