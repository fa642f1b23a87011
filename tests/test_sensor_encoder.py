"""Tests of SensorSetEncoder: a stateful, permutation-invariant encoder of unordered sensors.

What this file proves:

- the code is invariant under every permutation of the sensors applied to
  the readings, the type ids and the per-sensor LSTM state together, with
  and without sensor types, for tanh and softmax attention, also when the
  sensors are reshuffled in the middle of a sequence;
- one encoder runs on any number of sensors (5, then 10) and on any
  ``(B, N, F)`` (hypothesis);
- padded sensors with a mask contribute nothing: whatever the padding holds
  (NaN readings, invalid type ids), the real sensors' new state is
  bit-identical to the unpadded one and the code equal up to float64
  rounding; gradients stay finite;
- the code depends on every reading, on the type ids, on the previous
  action and on the state; ``F = 1`` without types is exactly a linear layer
  on the paper's AttentionNeuron;
- the encoder survives a config round trip and an HDF5 weight round trip,
  compiles with XLA to the eager result, passes gradients to every weight,
  rejects bad shapes with a ``ValueError`` that shows them, and converts to
  TFLite with builtin ops only for a fixed maximum number of sensors plus a
  mask, where LiteRT's interpreter matches TensorFlow to 1e-5 over a sequence.
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
from sit_keras.layers.attention_neuron import AttentionNeuron
from sit_keras.models import sensor_encoder as encoder_module
from sit_keras.models.sensor_encoder import SensorSetEncoder

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
ACTION_DIM = 2
HIDDEN = 4

CONFIGS = {
    "typed_tanh": {"num_sensor_types": 3},
    "typed_softmax_value_dim": {"num_sensor_types": 3, "attention": "softmax", "value_dim": 5},
    "untyped_tanh": {},
    "untyped_softmax": {"attention": "softmax"},
}
CONFIG = pytest.mark.parametrize("options", CONFIGS.values(), ids=CONFIGS.keys())
TWO = ("typed_softmax_value_dim", "untyped_tanh")
TWO_CONFIGS = pytest.mark.parametrize("options", [CONFIGS[name] for name in TWO], ids=TWO)


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


# -- helpers -----------------------------------------------------------------------
def _encoder(num_features: int = 3, dtype: str = DTYPE, **options: Any) -> SensorSetEncoder:
    defaults = {"num_queries": 6, "hidden_size": HIDDEN, "projection_dim": 8, "activation": "tanh"}
    encoder = SensorSetEncoder(num_features, ACTION_DIM, output_dim=7, dtype=dtype, **(defaults | options))
    encoder.build((None, None, num_features))
    rng = np.random.default_rng(0)
    for v in encoder.trainable_weights:  # away from the initialisation
        v.assign(v + rng.normal(0.0, 0.3, v.shape).astype(v.dtype.as_numpy_dtype))
    return encoder


class Episode:
    """Random readings, type ids, actions and state for ``batch`` x ``count`` sensors."""

    def __init__(self, encoder: SensorSetEncoder, batch: int, count: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.readings = tf.constant(rng.normal(size=(batch, count, encoder.num_features)), DTYPE)
        types = encoder.num_sensor_types
        self.types = None if types is None else tf.constant(rng.integers(0, types, (batch, count)), tf.int32)
        self.action = tf.constant(rng.normal(size=(batch, ACTION_DIM)), DTYPE)
        self.state = [tf.constant(rng.normal(size=(batch, count, HIDDEN)), DTYPE) for _ in range(2)]


def _permute(x: tf.Tensor | None, order: np.ndarray) -> tf.Tensor | None:
    return None if x is None else tf.gather(x, order, axis=1)


def _rel(a: tf.Tensor, b: tf.Tensor) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-30))


def _pad(x: tf.Tensor | None, slots: np.ndarray, size: int, fill: Any) -> tf.Tensor | None:
    """Places ``x``'s sensors (axis 1) at ``slots`` of a ``size``-long axis filled with ``fill``."""
    if x is None:
        return None
    x = np.asarray(x)
    out = np.full((x.shape[0], size, *x.shape[2:]), fill, dtype=x.dtype)
    out[:, slots] = x
    return tf.constant(out)


# -- permutation invariance ---------------------------------------------------------
@CONFIG
def test_code_is_invariant_under_permutations_of_sensors_types_and_state(options: dict[str, Any]) -> None:
    encoder = _encoder(**options)
    ep = Episode(encoder, batch=3, count=6)
    f = encoder.num_features
    # Readings, type ids and state packed on one (B, N, .) tensor: a permutation of
    # its axis 1 moves a sensor's reading, type and memory together.
    types = tf.zeros(ep.readings.shape[:2], DTYPE) if ep.types is None else tf.cast(ep.types, DTYPE)
    packed = tf.concat([ep.readings, types[..., None], *ep.state], axis=-1)

    def fn(p: tf.Tensor) -> tf.Tensor:
        repeat = p.shape[0] // ep.action.shape[0]
        sensor_types = None if ep.types is None else tf.cast(p[..., f], tf.int32)
        state = [p[..., f + 1 : f + 1 + HIDDEN], p[..., f + 1 + HIDDEN :]]
        action = tf.tile(ep.action, [repeat, 1])
        return encoder(p[..., :f], action, sensor_types=sensor_types, state=state)[0]

    rng = np.random.default_rng(5)
    orders = [rng.permutation(6) for _ in range(3)] + [np.roll(np.arange(6), 1)]
    testing.assert_invariant(
        fn, packed, {f"perm{k}": lambda t, o=o: _permute(t, o) for k, o in enumerate(orders)}
    )
    # Moving the readings and types without their memories is not a symmetry.
    order = orders[-1]
    code, _ = encoder(ep.readings, ep.action, sensor_types=ep.types, state=ep.state)
    moved, _ = encoder(
        _permute(ep.readings, order), ep.action, sensor_types=_permute(ep.types, order), state=ep.state
    )
    assert _rel(moved, code) > 1e-3


@CONFIG
def test_reshuffling_sensors_mid_sequence_keeps_every_code(options: dict[str, Any]) -> None:
    encoder = _encoder(**options)
    steps, batch, count = 5, 2, 6
    episodes = [Episode(encoder, batch, count, seed=10 + t) for t in range(steps)]
    types = episodes[0].types  # a sensor keeps its type for the whole episode
    reference, state = [], None
    for ep in episodes:
        code, state = encoder(ep.readings, ep.action, sensor_types=types, state=state)
        reference.append(code)
    rng = np.random.default_rng(4)
    order, shuffled = np.arange(count), None
    for t, ep in enumerate(episodes):
        if t in (1, 3):
            new = rng.permutation(count)
            shuffled = [_permute(s, new) for s in shuffled]
            order = order[new]
        readings, shuffled_types = _permute(ep.readings, order), _permute(types, order)
        code, shuffled = encoder(readings, ep.action, sensor_types=shuffled_types, state=shuffled)
        assert _rel(code, reference[t]) <= TOL, f"step {t}"
    for s, p in zip(state, shuffled, strict=True):
        assert _rel(p, _permute(s, order)) <= TOL
    assert min(_rel(a, b) for a, b in zip(reference[:-1], reference[1:], strict=True)) > 1e-3


# -- variable N, masks, shapes ----------------------------------------------------------
@CONFIG
def test_one_encoder_runs_on_5_then_10_sensors(options: dict[str, Any]) -> None:
    encoder = _encoder(**options)
    five, ten = Episode(encoder, 2, 5), Episode(encoder, 2, 10, seed=2)
    code5, state5 = encoder(five.readings, five.action, sensor_types=five.types)
    code10, state10 = encoder(ten.readings, ten.action, sensor_types=ten.types, state=ten.state)
    assert code5.shape == code10.shape == (2, 7)
    assert state5[0].shape == (2, 5, HIDDEN) and state10[1].shape == (2, 10, HIDDEN)
    assert np.all(np.isfinite(code5.numpy())) and np.all(np.isfinite(code10.numpy()))


@CONFIG
def test_padded_masked_sensors_contribute_nothing(options: dict[str, Any]) -> None:
    encoder = _encoder(**options)
    batch, count, size = 2, 5, 9
    slots = np.array([0, 2, 3, 6, 8])  # padding interleaved
    mask = np.zeros((batch, size), bool)
    mask[:, slots] = True
    state, padded_state = None, [_pad(np.zeros((batch, count, HIDDEN)), slots, size, 7.0)] * 2
    for t in range(3):
        ep = Episode(encoder, batch, count, seed=20 + t)
        code, state = encoder(ep.readings, ep.action, sensor_types=ep.types, state=state)
        padded_code, padded_state = encoder(
            _pad(ep.readings, slots, size, np.nan),
            ep.action,
            sensor_types=_pad(ep.types, slots, size, -1 if t % 2 else 99),  # invalid ids
            state=padded_state,
            mask=mask,
        )
        # The sum over the sensors may associate differently for 5 and 9 terms: rounding only.
        assert _rel(padded_code, code) <= TOL, f"step {t}"
        for s, p in zip(state, padded_state, strict=True):
            np.testing.assert_array_equal(tf.gather(p, slots, axis=1).numpy(), s.numpy())
            np.testing.assert_array_equal(np.delete(p.numpy(), slots, axis=1), 7.0)


def test_gradients_are_finite_with_nan_padding_and_reach_every_weight() -> None:
    encoder = _encoder(num_sensor_types=3, value_dim=4, attention="softmax")
    ep = Episode(encoder, 2, 5)
    slots = np.array([1, 2, 4, 5, 7])
    mask = np.zeros((2, 8), bool)
    mask[:, slots] = True
    with tf.GradientTape() as tape:
        code, state = encoder(
            _pad(ep.readings, slots, 8, np.nan),
            ep.action,
            sensor_types=_pad(ep.types, slots, 8, 50),
            mask=mask,
        )
        code, _ = encoder(
            _pad(ep.readings, slots, 8, np.inf), ep.action, _pad(ep.types, slots, 8, 0), state, mask
        )
        loss = tf.reduce_sum(code * testing.random_normal(code.shape, seed=7))
    gradients = tape.gradient(loss, encoder.trainable_variables)
    assert len(gradients) == 10
    for variable, gradient in zip(encoder.trainable_variables, gradients, strict=True):
        values = tf.convert_to_tensor(gradient).numpy()
        assert np.all(np.isfinite(values)) and np.any(values != 0), variable.name


_ENCODERS: dict[int, SensorSetEncoder] = {}


@given(
    batch=st.integers(1, 4),
    count=st.integers(1, 10),
    features=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_shapes_invariance_and_masks_for_any_b_n_f(batch: int, count: int, features: int, seed: int) -> None:
    # One encoder per feature count for all examples: building is the slow part.
    if features not in _ENCODERS:
        _ENCODERS[features] = _encoder(
            features, num_sensor_types=2, attention="softmax" if features % 2 else "tanh"
        )
    encoder = _ENCODERS[features]
    ep = Episode(encoder, batch, count, seed)
    code, new_state = encoder(ep.readings, ep.action, sensor_types=ep.types, state=ep.state)
    assert code.shape == (batch, 7) and new_state[0].shape == (batch, count, HIDDEN)
    assert np.all(np.isfinite(code.numpy()))
    order = np.random.default_rng(seed).permutation(count)
    state = [_permute(s, order) for s in ep.state]
    permuted, _ = encoder(_permute(ep.readings, order), ep.action, _permute(ep.types, order), state)
    assert _rel(permuted, code) <= TOL
    size = count + 1 + seed % 4
    slots = np.sort(np.random.default_rng(seed + 1).choice(size, count, replace=False))
    mask = np.zeros((batch, size), bool)
    mask[:, slots] = True
    padded, padded_state = encoder(
        _pad(ep.readings, slots, size, 1e6),
        ep.action,
        sensor_types=_pad(ep.types, slots, size, -7),
        state=[_pad(s, slots, size, 0.5) for s in ep.state],
        mask=mask,
    )
    assert _rel(padded, code) <= TOL
    np.testing.assert_array_equal(tf.gather(padded_state[0], slots, axis=1).numpy(), new_state[0].numpy())


# -- what the code depends on ---------------------------------------------------------
def test_code_depends_on_each_reading_the_types_the_action_and_the_state() -> None:
    encoder = _encoder(num_sensor_types=3)
    ep = Episode(encoder, 2, 5)
    code, _ = encoder(ep.readings, ep.action, sensor_types=ep.types, state=ep.state)
    for i in range(5):
        for f in range(3):
            changed = ep.readings.numpy().copy()
            changed[:, i, f] += 0.5
            assert _rel(encoder(changed, ep.action, ep.types, ep.state)[0], code) > 1e-4, (i, f)
        retyped = ep.types.numpy().copy()
        retyped[:, i] = (retyped[:, i] + 1) % 3
        assert _rel(encoder(ep.readings, ep.action, retyped, ep.state)[0], code) > 1e-4, i
    assert _rel(encoder(ep.readings, ep.action + 0.5, ep.types, ep.state)[0], code) > 1e-3
    assert _rel(encoder(ep.readings, ep.action, ep.types)[0], code) > 1e-3  # zero state


def test_one_feature_without_types_is_a_linear_layer_on_the_attention_neuron() -> None:
    encoder = _encoder(num_features=1, activation=None)
    neuron = AttentionNeuron(ACTION_DIM, num_queries=6, hidden_size=HIDDEN, projection_dim=8, dtype=DTYPE)
    neuron.build((None, None))
    neuron.set_weights(encoder.neuron.get_weights())
    ep = Episode(encoder, 3, 5)
    code, state = encoder(ep.readings, ep.action, state=ep.state)
    paper_code, paper_state = neuron(ep.readings[..., 0], ep.action, state=ep.state)  # (B, M)
    kernel, bias = encoder.projection.get_weights()
    np.testing.assert_allclose(code.numpy(), paper_code.numpy() @ kernel + bias, rtol=1e-12, atol=1e-12)
    for s, p in zip(state, paper_state, strict=True):
        np.testing.assert_array_equal(s.numpy(), p.numpy())


# -- serialisation, XLA ---------------------------------------------------------------
@CONFIG
def test_config_and_weights_round_trip(options: dict[str, Any], tmp_path) -> None:
    encoder = _encoder(**options)
    restored = testing.config_round_trip(encoder)
    assert restored.get_config() == encoder.get_config() and restored.compute_dtype == DTYPE
    ep = Episode(encoder, 2, 4)
    restored(ep.readings, ep.action, sensor_types=ep.types)
    path = str(tmp_path / "encoder.weights.h5")
    encoder.save_weights(path)
    restored.load_weights(path)
    expected = encoder(ep.readings, ep.action, sensor_types=ep.types, state=ep.state)
    got = restored(ep.readings, ep.action, sensor_types=ep.types, state=ep.state)
    for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    spec = restored.state_spec(4)
    assert [(s.shape, s.dtype) for s in spec] == [((4, HIDDEN), tf.float64)] * 2
    assert all(s.is_compatible_with(part[0]) for s, part in zip(spec, got[1], strict=True))  # one example
    registered = tf_keras.utils.get_registered_object("sit_keras>SensorSetEncoder")
    assert registered is SensorSetEncoder


@TWO_CONFIGS
def test_xla_matches_eager(options: dict[str, Any]) -> None:
    encoder = _encoder(**options)
    ep = Episode(encoder, 2, 6)
    mask = tf.constant(np.random.default_rng(0).uniform(size=(2, 6)) > 0.3)

    @tf.function(jit_compile=True)
    def compiled(readings, action, types, h, c, mask):
        return encoder(readings, action, sensor_types=types, state=[h, c], mask=mask, training=False)

    eager = encoder(ep.readings, ep.action, sensor_types=ep.types, state=ep.state, mask=mask)
    fast = compiled(ep.readings, ep.action, ep.types, *ep.state, mask)
    for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(eager), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


# -- TFLite ----------------------------------------------------------------------------
@TWO_CONFIGS
def test_tflite_export_with_builtin_ops_matches_tensorflow(options: dict[str, Any]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    encoder = _encoder(dtype="float32", **options)
    max_sensors, count = 8, 5
    function = encoder.serving_function(max_sensors)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()], encoder)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    assert not {name for name in ops if "FLEX" in name.upper() or "CUSTOM" in name.upper()}, ops
    run = interpreter.get_signature_runner()
    slots = np.array([0, 3, 4, 6, 7])
    mask = np.zeros((1, max_sensors), bool)
    mask[:, slots] = True
    zeros = np.zeros((1, max_sensors, HIDDEN), np.float32)
    state, lite_state = None, {"hidden": zeros, "cell": zeros}
    rng = np.random.default_rng(3)
    types = None if encoder.num_sensor_types is None else rng.integers(0, 3, (1, count)).astype(np.int32)
    for t in range(4):
        readings = rng.normal(size=(1, count, 3)).astype(np.float32)
        action = rng.normal(size=(1, ACTION_DIM)).astype(np.float32)
        code, state = encoder(readings, action, sensor_types=types, state=state)
        inputs = {"readings": _pad(readings, slots, max_sensors, 0.0).numpy(), "previous_action": action}
        if types is not None:
            inputs["sensor_types"] = _pad(types, slots, max_sensors, 0).numpy()
        lite = run(mask=mask, **inputs, **lite_state)
        lite_state = {"hidden": lite["hidden"], "cell": lite["cell"]}
        np.testing.assert_allclose(lite["code"], code.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"step {t}")
        np.testing.assert_allclose(lite["hidden"][:, slots], state[0].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.delete(lite["cell"], slots, axis=1), 0.0)


# -- errors --------------------------------------------------------------------------
def _call(options: dict[str, Any] | None = None, **overrides: Any):
    encoder = SensorSetEncoder(3, ACTION_DIM, 4, hidden_size=HIDDEN, **(options or {}))
    inputs = overrides.pop("inputs", np.zeros((2, 5, 3), np.float32))
    kwargs = {"previous_action": np.zeros((2, ACTION_DIM), np.float32), **overrides}
    return lambda: encoder(inputs, **kwargs)


TYPED = {"num_sensor_types": 3}
BAD_CALLS = [
    (
        _call(inputs=np.zeros((2, 5))),
        "sensor readings of shape (B, N, 3) with N >= 1. Received: inputs.shape=(2, 5)",
    ),
    (_call(inputs=np.zeros((2, 5, 2))), "Received: inputs.shape=(2, 5, 2)"),
    (_call(inputs=np.zeros((2, 0, 3))), "with N >= 1. Received: inputs.shape=(2, 0, 3)"),
    (_call(TYPED), "sensor_types of shape (B, N) with num_sensor_types=3. Received: sensor_types=None"),
    (
        _call(TYPED, sensor_types=np.zeros((2, 4), np.int32)),
        "sensor_types of shape (2, 5). Received: sensor_types.shape=(2, 4)",
    ),
    (
        _call(TYPED, sensor_types=np.zeros((2, 5), np.float32)),
        "Received: sensor_types.shape=(2, 5), dtype=float32",
    ),
    (
        _call(sensor_types=np.zeros((2, 5), np.int32)),
        "without sensor types (num_sensor_types=None) but received",
    ),
    (
        _call(mask=np.ones((2, 6), bool)),
        "mask of shape (2, 5) matching the inputs. Received: mask.shape=(2, 6)",
    ),
    (_call(state=[np.zeros((2, 5, 3))] * 2), "expects state [h, c], each of shape (2, 5, 4)"),
    (_call(previous_action=np.zeros((2, 3))), "of shape (2, 2). Received: previous_action.shape=(2, 3)"),
]


@pytest.mark.parametrize("call, message", BAD_CALLS)
def test_bad_shapes_raise_clear_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


INVALID_OPTIONS = [
    ({"num_features": 0}, "num_features must be a positive integer. Received: num_features=0"),
    ({"output_dim": -1}, "output_dim must be a positive integer"),
    ({"num_sensor_types": 0}, "num_sensor_types must be a positive integer"),
    ({"attention": "relu"}, "attention must be one of ('tanh', 'softmax')"),
    ({"hidden_size": 0}, "hidden_size must be a positive integer"),
]


@pytest.mark.parametrize("options, message", INVALID_OPTIONS)
def test_invalid_options_raise(options: dict[str, Any], message: str) -> None:
    arguments = {"num_features": 3, "action_dim": ACTION_DIM, "output_dim": 4} | options
    with pytest.raises(ValueError, match=re.escape(message)):
        SensorSetEncoder(**arguments)


def test_docstring_examples() -> None:
    result = doctest.testmod(encoder_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
