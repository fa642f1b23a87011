"""The TF-Agents networks of ``sit_keras.agents`` under float32, mixed_bfloat16 and mixed_float16.

What this file proves, for every network class (actor and value on an
encoder, DQN and C51 Q-networks, SAC's actor and critic on a shared encoder,
the AttentionNeuron actor and value networks), built inside
``mixed_precision.dtype_policy(precision)``:

- the torso computes in the policy's compute dtype and the outputs that
  losses read (logits, distribution parameters, values, Q-values) are
  float32; every variable is float32 and named as in float32; every
  trainable variable gets a finite float32 gradient;
- a checkpoint written in a mixed precision restores into a float32 network,
  whose outputs then match within ``testing.tolerance(compute dtype)``;
- float16 loss scaling (``agents/networks/loss_scaling.py``): the gradients through a
  scaled torso equal the float32 network's on the same weights (within
  float16's tolerance), also where unscaled float16 gradients underflow to
  zero; a step that overflows gives the torso zero gradients (an SGD step
  leaves it unchanged) and halves the scale; the dynamic rule is Keras'; it
  runs the same eagerly, in a ``tf.function`` and compiled with XLA; the
  scale is checkpointed with its torso but is not a network variable;
- TF-Agents' own train steps (PPO with DrAC, SAC on the shared encoder, DQN,
  C51), compiled with ``xla.compile_with_xla``, train every float16 region
  with plain optimizers.

``dtype_policy`` nests and restores the unset default.
"""

from __future__ import annotations

import dataclasses
import doctest
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.agents.categorical_dqn import categorical_dqn_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import random_tf_environment
from tf_agents.networks import network
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras import mixed_precision, testing, xla
from sit_keras.agents.algorithms import ppo_agent, sac_agent
from sit_keras.agents.networks import actor_critic, loss_scaling, q_networks, sac_networks, sensor_networks

pytestmark = pytest.mark.precision  # make test-precision runs these under several kernels

IMAGES = tensor_spec.BoundedTensorSpec((8, 8, 3), tf.uint8, 0, 255)
VECTORS = tf.TensorSpec((4,), tf.float32)
SENSORS = tf.TensorSpec((5,), tf.float32)
DISCRETE = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
CONTINUOUS = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
CNN = {"filters": (4,), "strides": 1, "output_dim": 8}
MLP = {"units": (8,)}
SENSOR = {"output_dim": 8, "num_queries": 4, "hidden_size": 4, "projection_dim": 4}
BATCH, STEPS = 3, 2
MIXED = ["mixed_bfloat16", "mixed_float16"]

Outputs = dict[str, tf.Tensor]


def _images(seed: int = 0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).integers(0, 256, (BATCH, *IMAGES.shape)), tf.uint8)


def _vectors(shape: tuple[int, ...], seed: int = 0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).normal(size=shape), tf.float32)


def _distribution_outputs(distribution) -> Outputs:
    if hasattr(distribution, "logits_parameter"):
        return {"logits": distribution.logits_parameter()}
    base = getattr(distribution, "input_distribution", distribution)  # SAC's tanh-squashed normal
    return {"loc": base.mean(), "scale": base.stddev()}


def _log_prob(distribution, actions: tf.Tensor) -> Outputs:
    return {"log_prob": distribution.log_prob(actions)}


@dataclasses.dataclass(frozen=True)
class Case:
    """Networks built by ``build`` (the first acts; the others share its torso or not) and a forward pass."""

    build: Callable[[], dict[str, network.Network]]
    forward: Callable[[dict[str, network.Network]], Outputs]
    torso: Callable[[dict[str, network.Network]], tf_keras.layers.Layer]


def _actor_case(spec, encoder, kwargs, actions_spec, observations, actions) -> Case:
    def build():
        return {"actor": actor_critic.EncoderActorNetwork(spec, actions_spec, encoder, kwargs, (8,))}

    def forward(nets):
        distribution, _ = nets["actor"](observations(), training=True)
        return {**_distribution_outputs(distribution), **_log_prob(distribution, actions)}

    return Case(build, forward, lambda nets: nets["actor"]._torso)


def _value_case() -> Case:
    def build():
        return {"value": actor_critic.EncoderValueNetwork(IMAGES, "cnn", CNN, (8,))}

    def forward(nets):
        return {"values": nets["value"](_images(), training=True)[0]}

    return Case(build, forward, lambda nets: nets["value"]._torso)


def _q_case(categorical: bool) -> Case:
    def build():
        if categorical:
            return {
                "q": q_networks.EncoderCategoricalQNetwork(VECTORS, DISCRETE, "mlp", MLP, (8,), num_atoms=5)
            }
        return {"q": q_networks.EncoderQNetwork(IMAGES, DISCRETE, "cnn", CNN, (8,))}

    def forward(nets):
        observations = _vectors((BATCH, 4)) if categorical else _images()
        return {"logits" if categorical else "q_values": nets["q"](observations, training=True)[0]}

    return Case(build, forward, lambda nets: nets["q"]._torso)


def _sac_case() -> Case:
    def build():
        actor = sac_networks.SacActorNetwork(IMAGES, CONTINUOUS, "cnn", CNN, (8,))
        critic = sac_networks.twin_critics(actor, CONTINUOUS, (8,))["critic_network"]
        return {"actor": actor, "critic": critic}

    def forward(nets):
        distribution, _ = nets["actor"](_images(), training=True)
        q_values, _ = nets["critic"]((_images(), _vectors((BATCH, 2), seed=3)), training=True)
        return {
            **_distribution_outputs(distribution),
            **_log_prob(distribution, tf.fill([BATCH, 2], 0.3)),
            "q_values": q_values,
        }

    return Case(build, forward, lambda nets: nets["actor"].encoder)


def _step_types() -> tf.Tensor:
    types = np.full((BATCH, STEPS), ts.StepType.MID, np.int32)
    types[:, 0] = ts.StepType.FIRST
    return tf.constant(types)


def _sensor_case(actions_spec, memory_units: int = 0) -> Case:
    encoder_kwargs = {**SENSOR, "memory_units": memory_units}

    def build():
        return {
            "actor": sensor_networks.SensorActorNetwork(SENSORS, actions_spec, encoder_kwargs, (8,)),
            "value": sensor_networks.SensorValueNetwork(SENSORS, encoder_kwargs, (8,)),
        }

    def forward(nets):
        observations = _vectors((BATCH, STEPS, 5))
        distribution, _ = nets["actor"](observations, step_type=_step_types(), training=True)
        values, _ = nets["value"](observations, step_type=_step_types(), training=True)
        actions = (
            tf.zeros([BATCH, STEPS], tf.int64)
            if actions_spec is DISCRETE
            else tf.fill([BATCH, STEPS, 2], 0.3)
        )
        return {**_distribution_outputs(distribution), **_log_prob(distribution, actions), "values": values}

    return Case(build, forward, lambda nets: nets["actor"]._torso)


CASES: dict[str, Case] = {
    "actor_discrete_cnn": _actor_case(
        IMAGES, "cnn", CNN, DISCRETE, _images, tf.constant([0, 1, 2], tf.int64)
    ),
    "actor_continuous_mlp": _actor_case(
        VECTORS, "mlp", MLP, CONTINUOUS, lambda: _vectors((BATCH, 4)), tf.fill([BATCH, 2], 0.3)
    ),
    "value_cnn": _value_case(),
    "dqn_cnn": _q_case(categorical=False),
    "c51_mlp": _q_case(categorical=True),
    "sac_cnn": _sac_case(),
    "sensor_continuous": _sensor_case(CONTINUOUS),
    "sensor_discrete": _sensor_case(DISCRETE),
    "sensor_continuous_memory": _sensor_case(CONTINUOUS, memory_units=6),
}
ALL_CASES = pytest.mark.parametrize("case", list(CASES))


def _loss(outputs: Outputs) -> tf.Tensor:
    """A loss that reads every output: mean squares of the parameters and values, minus log-probabilities."""
    terms = [
        -tf.reduce_mean(value) if name == "log_prob" else tf.reduce_mean(tf.square(value))
        for name, value in outputs.items()
    ]
    return tf.add_n(terms)


def _trainable(nets: dict[str, network.Network]) -> list[tf.Variable]:
    seen: dict[int, tf.Variable] = {}
    for net in nets.values():
        for variable in net.trainable_variables:
            seen.setdefault(id(variable), variable)
    return list(seen.values())


def _variables(nets: dict[str, network.Network]) -> list[tf.Variable]:
    seen: dict[int, tf.Variable] = {}
    for net in nets.values():
        for variable in net.variables:
            seen.setdefault(id(variable), variable)
    return list(seen.values())


def _build(case: Case, precision: str, seed: int = 0) -> dict[str, network.Network]:
    """The case's networks built under ``precision``, with weights away from their initial values.

    Fresh Keras name counters: the variable names are those of any other
    precision. The weights are perturbed: at the initial ones some outputs
    (values ~0.03) are mostly cancellation, whose relative rounding error says
    little about the precision.
    """
    tf_keras.backend.clear_session()
    tf_keras.utils.set_random_seed(seed)
    with mixed_precision.dtype_policy(precision):
        nets = case.build()
    for net in nets.values():
        net.create_variables()
    case.forward(nets)  # every network called once: all variables exist
    rng = np.random.default_rng(seed)
    for variable in _variables(nets):
        variable.assign(variable + rng.normal(0.0, 0.3, variable.shape).astype(np.float32))
    return nets


def _regions(nets: dict[str, network.Network]) -> list[tf_keras.layers.Layer]:
    """The loss-scaled layers of the networks (float16 only): those with a ``loss_scale``."""
    seen: dict[int, tf_keras.layers.Layer] = {}
    for net in nets.values():
        for layer in net._flatten_layers(include_self=False):
            if getattr(layer, "loss_scale", None) is not None:
                seen.setdefault(id(layer), layer)
    return list(seen.values())


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-30))


@pytest.fixture(autouse=True)
def _default_policy() -> Iterator[None]:
    yield
    assert mixed_precision._keras_policy._global_policy is None  # every test leaves the default unset


# -- dtype_policy ---------------------------------------------------------------------------------
def test_dtype_policy_nests_and_restores_the_unset_default() -> None:
    assert mixed_precision._keras_policy._global_policy is None
    with mixed_precision.dtype_policy("mixed_float16"):
        with mixed_precision.dtype_policy("mixed_bfloat16"):
            assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
            with mixed_precision.full_precision():
                assert tf_keras.mixed_precision.global_policy().name == "float32"
            assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        assert tf_keras.mixed_precision.global_policy().name == "mixed_float16"
    assert mixed_precision._keras_policy._global_policy is None
    # Unset, the default follows floatx: float64 layers stay float64, in full_precision() too.
    tf_keras.backend.set_floatx("float64")
    try:
        with pytest.raises(RuntimeError), mixed_precision.dtype_policy("mixed_bfloat16"):
            raise RuntimeError("restored on errors too")
        assert tf_keras.mixed_precision.global_policy().name == "float64"
        with mixed_precision.full_precision():
            assert tf_keras.layers.Dense(1).compute_dtype == "float64"
        assert mixed_precision._keras_policy._global_policy is None
    finally:
        tf_keras.backend.set_floatx("float32")


def test_dtype_policy_restores_an_explicitly_set_policy() -> None:
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        with mixed_precision.dtype_policy("float32"):
            assert tf_keras.mixed_precision.global_policy().name == "float32"
        assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        with pytest.raises(ValueError, match="Unknown precision 'float8'"):
            with mixed_precision.dtype_policy("float8"):
                pytest.fail("dtype_policy accepted an unknown precision")
        assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        tf_keras.mixed_precision.set_global_policy(None)


@pytest.mark.float16
def test_doctests() -> None:
    for module in (mixed_precision, loss_scaling):
        assert doctest.testmod(module).failed == 0, module.__name__


# -- every network, every precision ---------------------------------------------------------------
@ALL_CASES
@pytest.mark.parametrize("precision", mixed_precision.PRECISIONS)
def test_float32_outputs_and_finite_gradients_for_every_variable(case: str, precision: str) -> None:
    nets = _build(CASES[case], precision)
    compute = tf_keras.mixed_precision.Policy(precision).compute_dtype
    torso = CASES[case].torso(nets)
    assert torso.compute_dtype == compute
    assert (torso.loss_scale is not None) == (precision == "mixed_float16")
    assert {v.dtype for v in _variables(nets)} == {tf.float32}
    variables = _trainable(nets)
    with tf.GradientTape() as tape:
        outputs = CASES[case].forward(nets)
        loss = _loss(outputs)
    for name, value in outputs.items():
        assert value.dtype == tf.float32, name
        assert np.all(np.isfinite(value.numpy())), name
    gradients = tape.gradient(loss, variables)
    for variable, gradient in zip(variables, gradients, strict=True):
        assert gradient is not None, variable.name
        gradient = tf.convert_to_tensor(gradient)
        assert gradient.dtype == tf.float32 and np.all(np.isfinite(gradient.numpy())), variable.name
    assert any(np.any(tf.convert_to_tensor(g).numpy() != 0) for g in gradients)


@ALL_CASES
@pytest.mark.parametrize("precision", MIXED)
def test_a_mixed_precision_checkpoint_restores_into_float32(case: str, precision: str, tmp_path) -> None:
    mixed = _build(CASES[case], precision, seed=0)
    mixed_outputs = CASES[case].forward(mixed)
    mixed_described = [(v.name, v.dtype, tuple(v.shape)) for v in _variables(mixed)]
    path = tf.train.Checkpoint(**mixed).write(str(tmp_path / "ckpt"))

    full = _build(CASES[case], "float32", seed=1)  # other weights
    assert [(v.name, v.dtype, tuple(v.shape)) for v in _variables(full)] == mixed_described
    status = tf.train.Checkpoint(**full).read(path)
    status.assert_existing_objects_matched().expect_partial()  # under float16 the loss scales are left over
    for restored, saved in zip(_variables(full), _variables(mixed), strict=True):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy(), err_msg=restored.name)
    tol = testing.tolerance(tf_keras.mixed_precision.Policy(precision).compute_dtype)
    for name, value in CASES[case].forward(full).items():
        assert _rel(mixed_outputs[name], value) <= tol, (name, _rel(mixed_outputs[name], value))


# -- float16 loss scaling -------------------------------------------------------------------------
def _same_weights(case: Case) -> tuple[dict[str, network.Network], dict[str, network.Network]]:
    """The case's networks in mixed_float16 and in float32, with the float16 networks' weights."""
    half = _build(case, "mixed_float16")
    full = _build(case, "float32", seed=1)
    for target, source in zip(_variables(full), _variables(half), strict=True):
        target.assign(source)
    return half, full


def _gradients(case: Case, nets: dict[str, network.Network], loss_factor: float) -> list[np.ndarray]:
    variables = _trainable(nets)
    with tf.GradientTape() as tape:
        loss = loss_factor * _loss(case.forward(nets))
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]


def _settled_gradients(case: Case, nets: dict[str, network.Network], loss_factor: float) -> list[np.ndarray]:
    """The gradients of the first backward pass for which no region's scale had to shrink (as in training)."""
    scales = [region.loss_scale.scale for region in _regions(nets)]
    for _ in range(16):  # down to a scale of 1
        before = [float(scale.numpy()) for scale in scales]
        gradients = _gradients(case, nets, loss_factor)
        if all(float(scale.numpy()) >= b for scale, b in zip(scales, before, strict=True)):
            return gradients
    raise AssertionError(f"The loss scales kept shrinking: {[float(s.numpy()) for s in scales]}")


# Rounding of the float16 forward and backward passes, relative to a gradient's largest entry. The
# scaled gradients of a 1e-6 loss still reach float16's subnormals in places (measured: up to 2.2e-2).
GRADIENT_TOL = 4 * testing.tolerance(tf.float16)


@pytest.mark.float16
@ALL_CASES
def test_float16_gradients_equal_the_float32_ones_on_the_same_weights(case: str) -> None:
    half, full = _same_weights(CASES[case])
    # Loss factor 1: gradients up to ~5, which overflow float16 at the initial scale 2**15 in some
    # regions (whose scale then halves). 1e-6: gradients of 1e-9..1e-5, mostly below float16's
    # normal range (6e-5), which the scale brings into it.
    for factor in (1.0, 1e-6):
        expected = _gradients(CASES[case], full, factor)
        got = _settled_gradients(CASES[case], half, factor)
        for want, have in zip(expected, got, strict=True):
            assert _rel(have, want) <= GRADIENT_TOL, (factor, _rel(have, want))


@pytest.mark.float16
def test_without_the_scale_small_float16_gradients_underflow() -> None:
    case = CASES["actor_discrete_cnn"]
    half, full = _same_weights(case)
    torso = case.torso(half)
    # Loss factor 1e-8: the torso's gradients are 1e-10..1e-7, and smaller on the way through it.
    expected = _gradients(case, full, 1e-8)
    scaled = _settled_gradients(case, half, 1e-8)
    torso.loss_scale = None  # the same network without loss scaling
    unscaled = _gradients(case, half, 1e-8)
    torso_ids = {id(v) for v in torso.trainable_variables}
    in_torso = [id(v) in torso_ids for v in _trainable(half)]
    assert sum(in_torso) == len(torso.trainable_variables) > 0
    for want, have, lost, torso_variable in zip(expected, scaled, unscaled, in_torso, strict=True):
        if torso_variable:
            assert _rel(have, want) <= GRADIENT_TOL
            assert np.all(lost == 0) and np.any(want != 0)  # every entry underflowed to zero


def _sgd_step(case: Case, nets: dict[str, network.Network], loss_factor: float, optimizer) -> Callable:
    variables = _trainable(nets)

    def step():
        with tf.GradientTape() as tape:
            loss = loss_factor * _loss(case.forward(nets))
        gradients = tape.gradient(loss, variables)
        gradients, _ = tf.clip_by_global_norm(gradients, 1e12)  # as PPO clips, before the optimizer
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        return gradients

    return step


@pytest.mark.float16
@pytest.mark.parametrize(
    "case, mode",
    [
        ("actor_discrete_cnn", "eager"),
        ("actor_discrete_cnn", "function"),
        ("actor_discrete_cnn", "xla"),
        ("sac_cnn", "eager"),
        ("sac_cnn", "xla"),
        ("sensor_continuous", "eager"),
        # The tf.scan over time inside the region, compiled: 15-55 s of XLA compilation, so `large`;
        # the compiled scan is in the default run in the next test's ("sensor_discrete", "xla").
        pytest.param("sensor_continuous", "xla", marks=pytest.mark.large),
    ],
)
def test_an_overflowing_step_leaves_the_torso_unchanged_and_halves_the_scale(case: str, mode: str) -> None:
    nets = _build(CASES[case], "mixed_float16")
    step = _sgd_step(CASES[case], nets, 1e3, tf_keras.optimizers.SGD(1e-9))  # 1e3 * 2**15 > 65504
    if mode == "function":
        step = tf.function(step)
    elif mode == "xla":
        step = tf.function(xla.compile_with_xla(step))
    regions = _regions(nets)
    in_regions = [v for region in regions for v in region.trainable_variables]
    heads = [v for v in _trainable(nets) if all(v is not r for r in in_regions)]
    regions_before, heads_before = [v.numpy() for v in in_regions], [v.numpy() for v in heads]
    gradients = step()
    assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in gradients)
    for before, variable in zip(regions_before, in_regions, strict=True):
        np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.name)
    assert all(np.any(v.numpy() != b) for v, b in zip(heads, heads_before, strict=True))  # heads trained
    # The region next to the loss overflowed and halved its scale. A region behind it (SAC's
    # encoder behind the critic's dense layers) then got zero gradients: a finite pass for it.
    halved, kept = (loss_scaling.INITIAL_SCALE / 2, 0), (loss_scaling.INITIAL_SCALE, 1)
    outcomes = [(float(r.loss_scale.scale.numpy()), int(r.loss_scale.good_steps.numpy())) for r in regions]
    assert halved in outcomes and set(outcomes) <= {halved, kept}, outcomes
    if case != "sac_cnn":
        assert set(outcomes) == {halved}


@pytest.mark.float16
@pytest.mark.parametrize(
    "case, mode", [("dqn_cnn", "function"), ("dqn_cnn", "xla"), ("sensor_discrete", "xla")]
)
def test_scaled_gradients_are_the_same_eagerly_in_a_function_and_with_xla(case: str, mode: str) -> None:
    nets = _build(CASES[case], "mixed_float16")
    variables = _trainable(nets)

    def gradients():
        with tf.GradientTape() as tape:
            loss = 1e-6 * _loss(CASES[case].forward(nets))
        return tape.gradient(loss, variables)

    compiled = tf.function(gradients) if mode == "function" else tf.function(xla.compile_with_xla(gradients))
    scale = CASES[case].torso(nets).loss_scale
    for eager, traced in zip(gradients(), compiled(), strict=True):
        eager, traced = tf.convert_to_tensor(eager).numpy(), tf.convert_to_tensor(traced).numpy()
        assert _rel(traced, eager) <= testing.tolerance(tf.float16)
    assert int(scale.good_steps.numpy()) == 2  # one backward pass each


def test_the_dynamic_scale_follows_keras_rule() -> None:
    scale = loss_scaling.DynamicLossScale(initial_scale=4.0, growth_interval=3)
    history = []
    for finite in [True, True, True, True, False, False, False, False, True]:
        scale.update(tf.constant(finite))
        history.append((float(scale.scale.numpy()), int(scale.good_steps.numpy())))
    # Doubles after 3 finite steps in a row; halves on an overflow, not below 1; the count restarts.
    assert history == [
        (4.0, 1), (4.0, 2), (8.0, 0), (8.0, 1), (4.0, 0), (2.0, 0), (1.0, 0), (1.0, 0), (1.0, 1),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="must be >= 1"):
        loss_scaling.DynamicLossScale(initial_scale=0.5)


@pytest.mark.float16
def test_the_scale_is_checkpointed_with_the_torso_but_not_a_network_variable(tmp_path) -> None:
    nets = _build(CASES["sac_cnn"], "mixed_float16")
    actor, critic = nets["actor"], nets["critic"]
    assert critic.encoder is actor.encoder and critic.encoder.loss_scale is actor.encoder.loss_scale
    scale = actor.encoder.loss_scale
    assert all(v is not scale.scale for v in actor.variables + critic.variables)
    scale.scale.assign(1024.0)
    path = tf.train.Checkpoint(actor=actor).write(str(tmp_path / "ckpt"))
    scale.scale.assign(1.0)
    tf.train.Checkpoint(actor=actor).read(path).assert_consumed()
    assert float(scale.scale.numpy()) == 1024.0
    # A target made by copy without the shared encoder (inside the policy, as the agents do) has its own.
    with mixed_precision.dtype_policy("mixed_float16"):
        target = critic.copy(shared_encoder=None, name="target")
    assert target.encoder.loss_scale is not None and target.encoder.loss_scale is not scale


# -- the agents' own train steps ------------------------------------------------------------------
def _agent(algorithm: str, time_step_spec: ts.TimeStep):
    """A TF-Agents agent of ``algorithm`` on this file's tiny networks (built in the current policy)."""
    optimizer = lambda: tf_keras.optimizers.Adam(1e-3)  # noqa: E731
    if algorithm == "ppo":
        return ppo_agent.DrACPPOAgent(
            time_step_spec, DISCRETE, optimizer=optimizer(),
            actor_net=actor_critic.EncoderActorNetwork(IMAGES, DISCRETE, "cnn", CNN, (8,)),
            value_net=actor_critic.EncoderValueNetwork(IMAGES, "cnn", CNN, (8,)),
            num_epochs=2, gradient_clipping=0.5, normalize_observations=False,
            drac_coef=0.1, augmentation=tf.image.flip_left_right,  # the torsos run twice per loss
        )  # fmt: skip
    if algorithm == "sac":
        actor = sac_networks.SacActorNetwork(IMAGES, CONTINUOUS, "cnn", CNN, (8,))
        critics = sac_networks.twin_critics(actor, CONTINUOUS, (8,))
        return sac_agent.SharedEncoderSacAgent(
            time_step_spec, CONTINUOUS, actor_network=actor, **critics,
            actor_optimizer=optimizer(), critic_optimizer=optimizer(), alpha_optimizer=optimizer(),
        )  # fmt: skip
    if algorithm == "dqn":
        q_network = q_networks.EncoderQNetwork(IMAGES, DISCRETE, "cnn", CNN, (8,))
        return dqn_agent.DqnAgent(
            time_step_spec, DISCRETE, q_network=q_network, optimizer=optimizer(), gradient_clipping=1.0
        )
    q_network = q_networks.EncoderCategoricalQNetwork(IMAGES, DISCRETE, "cnn", CNN, (8,), num_atoms=5)
    return categorical_dqn_agent.CategoricalDqnAgent(
        time_step_spec, DISCRETE, categorical_q_network=q_network, optimizer=optimizer()
    )


@pytest.mark.float16
# PPO's float16 torsos with XLA are the slowest case; its float32 XLA step: test_jit_compile.
@pytest.mark.parametrize("algorithm", [pytest.param("ppo", marks=pytest.mark.large), "sac", "dqn", "c51"])
def test_each_agent_trains_its_float16_torsos_with_xla(algorithm: str) -> None:
    tf_keras.backend.clear_session()
    tf_keras.utils.set_random_seed(0)
    rewards = tensor_spec.BoundedTensorSpec((), tf.float32, -1.0, 1.0, name="reward")
    time_step_spec = ts.time_step_spec(IMAGES, rewards)
    actions = CONTINUOUS if algorithm == "sac" else DISCRETE
    env = random_tf_environment.RandomTFEnvironment(time_step_spec, actions, batch_size=2)
    with mixed_precision.dtype_policy("mixed_float16"):  # the agent too: its target networks are copies
        agent = _agent(algorithm, time_step_spec)
    agent.initialize()
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=2, max_length=8
    )
    dynamic_step_driver.DynamicStepDriver(env, agent.collect_policy, [buffer.add_batch], num_steps=16).run()
    if algorithm == "ppo":
        experience = buffer.gather_all()
    else:
        experience = next(iter(buffer.as_dataset(sample_batch_size=4, num_steps=2)))[0]
    trained = {k: v for k, v in vars(agent).items() if isinstance(v, network.Network) and "target" not in k}
    regions = _regions(trained)
    assert len(regions) == {"ppo": 2, "sac": 4, "dqn": 1, "c51": 1}[algorithm]
    before = [[v.numpy() for v in region.trainable_variables] for region in regions]
    train = tf.function(xla.compile_with_xla(agent.train))
    for _ in range(3):
        assert np.isfinite(train(experience).loss.numpy())
    # Every region of a trained network took backward passes and moved.
    for region, old in zip(regions, before, strict=True):
        scale = region.loss_scale
        assert int(scale.good_steps.numpy()) > 0 or float(scale.scale.numpy()) < loss_scaling.INITIAL_SCALE
        assert any(np.any(v.numpy() != b) for v, b in zip(region.trainable_variables, old, strict=True))
