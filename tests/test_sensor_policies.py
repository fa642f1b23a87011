"""Permutation-invariant sensor policies: the AttentionNeuron actor / critic and their PPO training.

What this file proves, from the networks (float64, perturbed weights), not
from statistics:

- a greedy TF-Agents policy on ``SensorActorNetwork`` takes exactly the same
  actions over a whole episode when the sensors are handed in any fixed
  shuffled order from its first step (tanh and softmax attention, discrete
  and continuous actions); the distribution parameters and the critic's
  values match too, and the per-sensor state is the permuted one;
- reshuffling mid-episode with the state moved along keeps every output;
- duplicating every sensor (10 = 5 twice, with its state) leaves the outputs
  unchanged with softmax attention, and with tanh attention once ``m_t`` is
  scaled by ``D / N`` (the paper's footnote 3, ``count_scaling``); without
  that scaling tanh's sum doubles and the outputs change;
- any ``N`` at call time, and padded sensors with ``sensor_mask`` give the
  unpadded outputs; a ``(B, T, N)`` call equals ``T`` single steps, and
  ``step_type`` FIRST resets the state;
- all of the above with the code's memory too (``memory_units``: an LSTM
  after the pooled code, whose state a permutation does not move), which
  is reset at FIRST, carries information across steps and has its own
  checked setting;
- given ``previous_actions`` (the executed actions of recorded steps) replace
  the network's own previous mode at every step but FIRST;
- ``previous_action_noise`` (the paper's cloning noise on ``a_{t-1}``)
  changes training calls only, with the stated spread, and keeps the
  invariance;
- each PPO learner run reads the iteration just collected (the prefetching
  datasets wait for it), split into whole environment sequences for
  recurrent networks; PPO trains these networks on cartpole-swingup
  (2 short iterations) and evaluates them, writes a ``policy_network.json`` that
  rebuilds the actor with its trained weights, and the saved greedy policy
  acts as the rebuilt network;
- bad inputs and settings raise a ``ValueError`` naming the expected shape.
"""

from __future__ import annotations

import os
from typing import Any

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.policies import actor_policy, greedy_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras import testing
from sit_keras.agents import evaluate, train
from sit_keras.agents.algorithms import ppo
from sit_keras.agents.networks import policy_network
from sit_keras.agents.networks.sensor_networks import SensorActorNetwork, SensorValueNetwork
from sit_keras.agents.training import harness

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
SENSORS = 5
SMALL = {"output_dim": 12, "num_queries": 6, "hidden_size": 4, "projection_dim": 8}
ATTENTION = pytest.mark.parametrize("attention", ["tanh", "softmax"])
CONTINUOUS = tensor_spec.BoundedTensorSpec((2,), DTYPE, -1.0, 1.0)
DISCRETE = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
ACTIONS = pytest.mark.parametrize("action_spec", [CONTINUOUS, DISCRETE], ids=["continuous", "discrete"])
MEMORY = pytest.mark.parametrize("memory", [0, 12], ids=["no_memory", "memory"])


@pytest.fixture
def float64():
    tf_keras.utils.set_random_seed(0)
    tf_keras.backend.set_floatx(DTYPE)
    yield
    tf_keras.backend.set_floatx("float32")


def _perturbed(net, seed: int = 0, scale: float = 0.6):
    net.create_variables()
    rng = np.random.default_rng(seed)
    for v in net.trainable_variables:  # away from the initialisation
        v.assign(v + rng.normal(0.0, scale, v.shape).astype(v.dtype.as_numpy_dtype))
    return net


def _actor(attention: str = "tanh", action_spec=CONTINUOUS, memory: int = 0, **kwargs: Any):
    """A perturbed ``SensorActorNetwork`` with ``memory`` units of the code's memory (0: none)."""
    spec = tf.TensorSpec((SENSORS,), DTYPE)
    encoder_kwargs = {**SMALL, "attention": attention, "memory_units": memory}
    return _perturbed(SensorActorNetwork(spec, action_spec, encoder_kwargs, (10,), **kwargs))


def _critic(attention: str = "tanh", memory: int = 0, **kwargs: Any) -> SensorValueNetwork:
    spec = tf.TensorSpec((SENSORS,), DTYPE)
    encoder_kwargs = {**SMALL, "attention": attention, "memory_units": memory}
    return _perturbed(SensorValueNetwork(spec, encoder_kwargs, **kwargs), 1)


def _observations(batch: int, steps: int, count: int = SENSORS, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, steps, count))


def _parameters(out) -> tf.Tensor:
    """A value tensor as is; every parameter of an action distribution, per example."""
    if isinstance(out, tf.Tensor):
        return out
    if out.dtype.is_integer:
        return out.logits_parameter()
    return tf.concat([out.mean(), out.stddev()], axis=-1)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-30))


def _with_parameters(output_and_state):
    return _parameters(output_and_state[0]), output_and_state[1]


def _step_types(batch: int, steps: int) -> np.ndarray:
    types = np.full((batch, steps), ts.StepType.MID, np.int32)
    types[:, 0] = ts.StepType.FIRST
    return types


def _run(net, observations: np.ndarray, step_types: np.ndarray, state=None, **call_kwargs):
    """Single steps with the state carried (one traced step); the per-step outputs and the final state."""
    batch, steps, count = observations.shape

    @tf.function
    def step(obs, step_type, state):
        out, new_state = net.call(obs, step_type, state, **call_kwargs)
        return _parameters(out), new_state

    state = net.initial_state(batch, count) if state is None else state
    outputs = []
    for t in range(steps):
        out, state = step(tf.constant(observations[:, t]), tf.constant(step_types[:, t]), state)
        outputs.append(out.numpy())
    return np.stack(outputs, axis=1), state


# -- permutation invariance ----------------------------------------------------------------
@ATTENTION
@ACTIONS
@MEMORY
def test_greedy_policy_acts_identically_on_shuffled_sensors_for_a_whole_episode(
    float64, attention, action_spec, memory
):
    net = _actor(attention, action_spec, memory)
    observation_spec = tf.TensorSpec((SENSORS,), DTYPE)
    policy = greedy_policy.GreedyPolicy(
        actor_policy.ActorPolicy(ts.time_step_spec(observation_spec), action_spec, net, clip=False)
    )
    batch, steps = 3, 12
    observations = _observations(batch, steps)
    order = np.random.default_rng(2).permutation(SENSORS)
    assert not np.array_equal(order, np.arange(SENSORS))
    runs, act = [], tf.function(policy.action)
    for obs in (observations, observations[:, :, order]):
        state, actions = policy.get_initial_state(batch), []
        for t in range(steps):
            step = ts.TimeStep(
                tf.constant(_step_types(batch, steps)[:, t]), tf.zeros(batch), tf.ones(batch),
                tf.constant(obs[:, t]),
            )  # fmt: skip
            action_step = act(step, state)
            state = action_step.state
            actions.append(action_step.action.numpy())
        runs.append((np.stack(actions, 1), state))
    (actions, state), (shuffled_actions, shuffled_state) = runs
    if action_spec.dtype.is_integer:
        np.testing.assert_array_equal(shuffled_actions, actions)
        assert len(np.unique(actions)) > 1  # the test would be empty for a constant policy
    else:
        assert _rel(shuffled_actions, actions) <= TOL
        assert np.std(actions) > 1e-2
    # The memories moved with their sensors; the previous action and the code's memory did not move.
    for name in ("hidden", "cell"):
        assert _rel(shuffled_state[name], tf.gather(state[name], order, axis=1)) <= TOL
    unmoved = ["previous_action", *(["memory_hidden", "memory_cell"] if memory else [])]
    assert set(state) == {"hidden", "cell", *unmoved}
    for name in unmoved:
        assert _rel(shuffled_state[name], state[name]) <= TOL


@ATTENTION
@ACTIONS
@MEMORY
def test_distribution_and_value_are_invariant_under_every_sensor_order(
    float64, attention, action_spec, memory
):
    actor, critic = _actor(attention, action_spec, memory), _critic(attention, memory)
    observations, types = _observations(2, 6), _step_types(2, 6)
    reference = [_run(net, observations, types)[0] for net in (actor, critic)]
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(SENSORS)
        for net, ref in zip((actor, critic), reference, strict=True):
            shuffled, _ = _run(net, observations[:, :, order], types)
            assert _rel(shuffled, ref) <= TOL
    assert _rel(reference[0][:, 0], reference[0][:, 1]) > 1e-3  # outputs do change over time


@ATTENTION
@MEMORY
def test_reshuffling_mid_episode_with_the_state_moved_along_keeps_every_output(float64, attention, memory):
    actor = _actor(attention, memory=memory)
    batch, steps = 2, 8
    observations, types = _observations(batch, steps), _step_types(batch, steps)
    reference, _ = _run(actor, observations, types)
    rng, order, state, outputs = np.random.default_rng(5), np.arange(SENSORS), actor.initial_state(batch), []
    step = tf.function(lambda obs, step_type, state: _with_parameters(actor.call(obs, step_type, state)))
    for t in range(steps):
        if t in (2, 5):
            new = rng.permutation(SENSORS)
            state = {**state, "hidden": tf.gather(state["hidden"], new, axis=1),
                     "cell": tf.gather(state["cell"], new, axis=1)}  # fmt: skip
            order = order[new]
        parameters, state = step(observations[:, t, order], types[:, t], state)
        outputs.append(parameters)
    assert _rel(np.stack(outputs, 1), reference) <= TOL


# -- duplicated sensors (Table 2, "10 obs") ---------------------------------------------------
@pytest.mark.parametrize(
    "attention, count_scaling, invariant",
    [("softmax", True, True), ("softmax", False, True), ("tanh", True, True), ("tanh", False, False)],
)
@MEMORY
def test_duplicating_every_sensor(float64, attention, count_scaling, invariant, memory):
    """softmax is a weighted mean over the sensors; tanh is a sum, invariant only once scaled by D / N."""
    actor = _actor(attention, count_scaling=count_scaling, memory=memory)
    critic = _critic(attention, count_scaling=count_scaling, memory=memory)
    observations, types = _observations(3, 6), _step_types(3, 6)
    doubled = np.concatenate([observations, observations], axis=-1)  # 10 = 5 twice
    for net in (actor, critic):
        five, state5 = _run(net, observations, types)
        ten, state10 = _run(net, doubled, types)
        error = _rel(ten, five)
        assert error <= TOL if invariant else error > 1e-3, (type(net).__name__, error)
        assert state10["hidden"].shape[1] == 2 * SENSORS
        for name in ("hidden", "cell"):  # each copy keeps the memory of its original
            pair = np.asarray(state10[name])
            assert _rel(pair[:, :SENSORS], pair[:, SENSORS:]) <= TOL
            if invariant:
                assert _rel(pair[:, :SENSORS], state5[name]) <= TOL


# -- any N, masks, sequences, resets ------------------------------------------------------------
@ATTENTION
@MEMORY
def test_padded_sensors_with_a_mask_give_the_unpadded_outputs(float64, attention, memory):
    actor = _actor(attention, memory=memory)
    batch, steps, size = 2, 5, 9
    slots = np.array([0, 2, 3, 6, 8])
    observations, types = _observations(batch, steps), _step_types(batch, steps)
    padded = np.full((batch, steps, size), np.nan)
    padded[:, :, slots] = observations
    mask = np.zeros((batch, size), bool)
    mask[:, slots] = True
    reference, state = _run(actor, observations, types)
    masked, padded_state = _run(actor, padded, types, sensor_mask=tf.constant(mask))
    assert _rel(masked, reference) <= TOL
    assert _rel(np.asarray(padded_state["hidden"])[:, slots], state["hidden"]) <= TOL


@ATTENTION
@MEMORY
def test_a_sequence_call_equals_single_steps_and_first_resets(float64, attention, memory):
    actor, critic = _actor(attention, memory=memory), _critic(attention, memory)
    batch, steps = 3, 7
    observations, types = _observations(batch, steps), _step_types(batch, steps)
    types[1, 4] = ts.StepType.FIRST  # a new episode in the middle of environment 1
    types[0, 3] = ts.StepType.LAST
    for net in (actor, critic):
        stepped, state = _run(net, observations, types)
        sequence, sequence_state = _with_parameters(
            net(tf.constant(observations), step_type=tf.constant(types))
        )
        assert sequence.shape[:2] == (batch, steps)
        assert _rel(sequence, stepped) <= TOL
        for name, value in state.items():
            assert _rel(sequence_state[name], value) <= TOL
        restarted, _ = _run(net, observations[1:2, 4:], types[1:2, 4:])
        assert _rel(stepped[1:2, 4:], restarted) <= TOL


def test_previous_action_is_the_mode_and_the_state_spec_is_explicit(float64):
    actor = _actor("tanh", DISCRETE)
    assert set(actor.state_spec) == {"hidden", "cell", "previous_action"}
    assert actor.state_spec["hidden"].shape == (SENSORS, SMALL["hidden_size"])
    assert actor.state_spec["previous_action"].shape == (3,)  # one-hot over 3 actions
    distribution, state = actor.call(_observations(4, 1)[:, 0], tf.zeros(4, tf.int32), ())
    mode = distribution.mode().numpy()
    np.testing.assert_array_equal(np.argmax(state["previous_action"], -1), mode)
    np.testing.assert_array_equal(np.sum(state["previous_action"], -1), np.ones(4))
    # The action reaches the next step: a different previous action changes the distribution.
    step = _observations(4, 1, seed=3)[:, 0]
    other = {**state, "previous_action": tf.roll(state["previous_action"], 1, axis=-1)}
    base = _parameters(actor.call(step, tf.ones(4, tf.int32), state)[0])
    assert _rel(_parameters(actor.call(step, tf.ones(4, tf.int32), other)[0]), base) > 1e-6


@ACTIONS
def test_given_previous_actions_replace_the_carried_one_at_every_step_but_first(float64, action_spec):
    """``call(..., previous_actions=)``: training on recorded steps feeds the executed ``a_{t-1}``."""
    actor = _actor("tanh", action_spec)
    batch, steps = 3, 6
    observations, types = _observations(batch, steps), _step_types(batch, steps)
    types[2, 3] = ts.StepType.FIRST
    width = actor.state_spec["previous_action"].shape[0]
    given = np.random.default_rng(5).normal(size=(batch, steps, width))
    expected, state = [], actor.initial_state(batch, SENSORS)
    for t in range(steps):
        state = {**state, "previous_action": tf.constant(given[:, t])}
        out, state = actor.call(tf.constant(observations[:, t]), tf.constant(types[:, t]), state)
        expected.append(_parameters(out).numpy())
    expected = np.stack(expected, axis=1)
    call = actor.call(tf.constant(observations), tf.constant(types), (), previous_actions=tf.constant(given))
    assert _rel(_parameters(call[0]), expected) <= TOL
    # They reach the outputs, except at FIRST steps, which start from a zero previous action.
    other = given.copy()
    other[:, :, 0] += 1.0
    changed = _parameters(
        actor.call(tf.constant(observations), tf.constant(types), (), previous_actions=tf.constant(other))[0]
    ).numpy()
    np.testing.assert_allclose(changed[:, 0], expected[:, 0], rtol=TOL, atol=0)
    np.testing.assert_allclose(changed[2, 3], expected[2, 3], rtol=TOL, atol=0)
    assert _rel(changed[:, 1:3], expected[:, 1:3]) > 1e-6
    # Without them the network feeds its own mode, as when it acts.
    own = _parameters(actor.call(tf.constant(observations), tf.constant(types), ())[0])
    assert _rel(own, expected) > 1e-6
    with pytest.raises(ValueError, match=rf"previous_actions of shape \(B, T, A\) = \(3, 6, {width}\)"):
        actor.call(
            tf.constant(observations),
            tf.constant(types),
            (),
            previous_actions=tf.constant(given[..., :1] if width > 1 else given[:, :2]),
        )


def test_the_codes_memory_is_state_that_reaches_the_outputs_and_round_trips(float64):
    """``memory_units``: an LSTM on the pooled code, in the state spec, read by the next step."""
    actor, critic = _actor("tanh", memory=3), _critic("tanh", memory=3)
    for net in (actor, critic):
        assert net.state_spec["memory_hidden"].shape == net.state_spec["memory_cell"].shape == (3,)
        assert {"memory_hidden", "memory_cell"} <= set(net.initial_state(2, 7))
    plain = _actor("tanh")
    assert not {"memory_hidden", "memory_cell"} & set(plain.state_spec)
    observations = _observations(4, 1)[:, 0]
    _, state = actor.call(observations, tf.zeros(4, tf.int32), ())
    assert _rel(state["memory_hidden"], np.zeros((4, 3))) > 1e-3  # the first step wrote to it
    step = _observations(4, 1, seed=3)[:, 0]
    other = {**state, "memory_cell": state["memory_cell"] + 1.0}
    base = _parameters(actor.call(step, tf.ones(4, tf.int32), state)[0])
    assert _rel(_parameters(actor.call(step, tf.ones(4, tf.int32), other)[0]), base) > 1e-6
    # The torso's config carries the memory; the twin with the same weights gives the same step.
    torso = actor._torso
    twin = type(torso).from_config(torso.get_config())
    assert twin.memory_units == 3 and twin.get_config() == torso.get_config()
    twin.build(None)
    twin.set_weights(torso.get_weights())
    args = (step, state["previous_action"], state["hidden"], state["cell"])
    memory = [state["memory_hidden"], state["memory_cell"]]
    for ours, theirs in zip(twin(*args, memory=memory), torso(*args, memory=memory), strict=True):
        assert _rel(tf.nest.flatten(ours), tf.nest.flatten(theirs)) == 0.0
    with pytest.raises(ValueError, match=r"has a memory of 3 units: pass memory=\[h, c\]"):
        torso(*args)
    spec = tf.TensorSpec((SENSORS,), tf.float32)
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(ValueError, match=r"encoder_kwargs\['memory_units'\] must be an integer >= 0"):
            SensorValueNetwork(spec, {"memory_units": bad})


def test_previous_action_noise_is_added_in_training_calls_only(float64):
    """Tang & Ha A.4.2's N(0, sigma) on a_{t-1}: training calls see it, acting calls never do."""
    noisy = _actor("tanh", previous_action_noise=0.03)
    clean = SensorActorNetwork(
        tf.TensorSpec((SENSORS,), DTYPE), CONTINUOUS, {**SMALL, "attention": "tanh"}, (10,)
    )
    clean.create_variables()
    clean.set_weights(noisy.get_weights())
    observations = tf.constant(_observations(3, 6))
    types = tf.constant(_step_types(3, 6))

    def parameters(net, obs=observations, training=False):
        return _parameters(net(obs, step_type=types, training=training)[0])

    assert _rel(parameters(noisy), parameters(clean)) == 0.0
    assert _rel(parameters(noisy, training=True), parameters(clean, training=True)) > 1e-6
    # The noise has the stated spread and is one draw per example: the sensors' order still does not matter.
    noise = noisy._noisy(tf.zeros([20000, 2], DTYPE), True).numpy()
    assert abs(noise.std() - 0.03) < 0.001 and abs(noise.mean()) < 0.001
    order = np.random.default_rng(2).permutation(SENSORS)
    tf.random.set_seed(7)
    ordered = parameters(noisy, training=True)
    tf.random.set_seed(7)
    shuffled = parameters(noisy, tf.gather(observations, order, axis=-1), training=True)
    assert _rel(shuffled, ordered) <= TOL
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"previous_action_noise must be a finite number >= 0"):
            SensorActorNetwork(tf.TensorSpec((SENSORS,), DTYPE), CONTINUOUS, SMALL, previous_action_noise=bad)


@MEMORY
def test_gradients_reach_every_weight_through_a_sequence(float64, memory):
    actor, critic = _actor("softmax", memory=memory), _critic(memory=memory)
    observations = tf.constant(_observations(2, 4))
    types = tf.constant(_step_types(2, 4))
    with tf.GradientTape(persistent=True) as tape:
        distribution, _ = actor(observations, step_type=types, training=True)
        actor_loss = -tf.reduce_sum(distribution.log_prob(tf.zeros([2, 4, 2], DTYPE)))
        values, _ = critic(observations, step_type=types, training=True)
        critic_loss = tf.reduce_sum(tf.square(values))
    for net, loss in ((actor, actor_loss), (critic, critic_loss)):
        gradients = tape.gradient(loss, net.trainable_variables)
        assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in gradients), net.name


def test_xla_matches_eager_and_the_torso_config_round_trips(float64):
    actor = _actor("tanh")
    observations, mask = (
        tf.constant(_observations(2, 1, count=7)[:, 0]),
        tf.constant([[True] * 6 + [False]] * 2),
    )

    def act(obs, sensor_mask):
        distribution, state = actor.call(
            obs, tf.ones([2], tf.int32), actor.initial_state(2, 7), sensor_mask=sensor_mask
        )
        return _parameters(distribution), state["hidden"]

    for eager, compiled in zip(
        act(observations, mask), tf.function(act, jit_compile=True)(observations, mask), strict=True
    ):
        assert _rel(compiled, eager) <= TOL
    torso = actor._torso
    twin = type(torso).from_config(torso.get_config())
    assert twin.get_config() == torso.get_config()
    twin.build(None)
    twin.set_weights(torso.get_weights())
    state = actor.initial_state(2, 7)
    args = (observations, state["previous_action"], state["hidden"], state["cell"])
    assert _rel(twin(*args)[0], torso(*args)[0]) == 0.0


# -- errors ---------------------------------------------------------------------------------------
def test_bad_inputs_and_settings_raise_clear_errors():
    spec = tf.TensorSpec((SENSORS,), tf.float32)
    actor = SensorActorNetwork(spec, tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0), SMALL)
    actor.create_variables()
    with pytest.raises(ValueError, match=r"observations of shape \(B, N\) or \(B, T, N\).*Received"):
        actor.call(tf.zeros([2, 3, 4, 5]))
    with pytest.raises(ValueError, match=r"sensor_mask of the observations' shape \(2, 5\).*\(2, 4\)"):
        actor.call(tf.zeros([2, 5]), sensor_mask=tf.ones([2, 4], tf.bool))
    with pytest.raises(ValueError, match=r"step_type of shape \(2, 3\).*Received: step_type.shape=\(2,\)"):
        actor.call(tf.zeros([2, 3, 5]), tf.zeros([2], tf.int32))
    with pytest.raises(ValueError, match=r"vector observations of shape \(D,\).*\(8, 8, 3\)"):
        SensorActorNetwork(tf.TensorSpec((8, 8, 3), tf.uint8), actor._action_spec)
    with pytest.raises(ValueError, match=r"may not set \['num_features'\]"):
        SensorValueNetwork(spec, {"num_features": 3})


# -- PPO training -------------------------------------------------------------------------------------
class _StubAgent:
    """What ``ppo.IterationData`` uses of a PPO agent: the data spec and GAE (here: a doubling)."""

    collect_data_spec = {"x": tf.TensorSpec((), tf.float32)}

    @staticmethod
    def preprocess_sequence(trajectories):
        return {**trajectories, "advantage": 2.0 * trajectories["x"]}


@pytest.mark.parametrize("num_minibatches", [None, 2], ids=["feed_forward", "recurrent"])
def test_each_learner_run_reads_the_iteration_just_collected(num_minibatches):
    """PPOLearner's prefetching datasets read this iteration's data, not the last one's (or nothing)."""
    from tf_agents.replay_buffers import tf_uniform_replay_buffer

    num_envs, steps, epochs = 4, 3, 2
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        _StubAgent.collect_data_spec, batch_size=num_envs, max_length=steps + 1
    )
    data = ppo.IterationData(_StubAgent(), buffer, num_envs, steps, num_minibatches)
    # As PPOLearner reads them: endless, the elements of a run cached and repeated for the epochs.
    streams = [
        iter(
            tf.data.Dataset.counter().flat_map(
                lambda _, f=f: f().take(data.num_samples).cache().repeat(epochs)
            )
        )
        for f in (data.experience_dataset, data.normalization_dataset)
    ]
    try:
        for iteration in range(3):
            collected = 100.0 * iteration + 10.0 * np.arange(num_envs)[:, None] + np.arange(steps + 1)
            for t in range(steps + 1):
                buffer.add_batch({"x": tf.constant(collected[:, t], tf.float32)})
            data.put()
            assert int(buffer.num_frames()) == 0
            for stream, with_advantage in zip(streams, (True, False), strict=True):
                elements = [next(stream)[0] for _ in range(data.num_samples * epochs)]
                x = np.concatenate([e["x"].numpy() for e in elements[: data.num_samples]])
                # Every environment's sequence once per epoch, without the bootstrap step.
                assert sorted(map(tuple, x)) == sorted(map(tuple, collected[:, :-1])), iteration
                assert ("advantage" in elements[0]) == with_advantage
                if with_advantage:
                    np.testing.assert_array_equal(elements[0]["advantage"], 2.0 * elements[0]["x"])
                for a, b in zip(elements[: data.num_samples], elements[data.num_samples :], strict=True):
                    np.testing.assert_array_equal(a["x"], b["x"])  # the same split in every epoch
    finally:
        data.close()


def _dmc_available() -> bool:
    from sit_keras.agents import environments

    return "dmc" in environments.ENVIRONMENT_FAMILIES


PI_CONFIG = "configs/dmc/cartpole_swingup_pi.gin"
# 4 environments x 24 steps, 2 iterations, from the cartpole-swingup config; one evaluation episode
# at the end (the recurrent policy on the evaluation environments).
SHORT_BINDINGS = [
    "train_eval.num_envs = 4",
    "ppo.collect_steps_per_env = 24",
    "ppo.num_minibatches = 2",
    "ppo.num_epochs = 2",
    "train_eval.total_env_steps = 192",
    "train_eval.encoder_kwargs = {'output_dim': 16, 'num_queries': 8}",
    "ppo.fc_layer_params = (16,)",
    "train_eval.checkpoint_interval = 96",
    "train_eval.policy_save_interval = 192",
    "train_eval.num_eval_episodes = 1",
    "train_eval.progress = False",
]


@pytest.fixture(scope="module")
def trained_pi(tmp_path_factory):
    root_dir = str(tmp_path_factory.mktemp("pi_ppo"))
    env = "dmc:cartpole-swingup" if _dmc_available() else "gymnasium:Pendulum-v1"
    gin.clear_config()
    train.parse_gin([PI_CONFIG], [*SHORT_BINDINGS, f"train_eval.env_name = '{env}'"])
    results = train.train_eval(root_dir)
    gin.clear_config()
    return root_dir, env, results


def test_pi_ppo_trains_on_whole_sequences_and_describes_its_actor(trained_pi):
    root_dir, env, results = trained_pi
    assert results["env_steps"] == 192
    # 2 iterations x 2 epochs x 2 minibatches of 2 environments' sequences.
    assert results["train_step"] == 8
    (evaluation,) = results["evaluations"]
    assert evaluation["env_steps"] == 192 and evaluation["num_episodes"] == 1
    description = policy_network.read_description(root_dir)
    assert description.network_class == "SensorActorNetwork"
    assert description.env_name == env
    assert description.network_kwargs == {
        "encoder_kwargs": {"output_dim": 16, "num_queries": 8},
        "fc_layer_params": [16],
    }
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    assert all(np.any(v.numpy() != 0) for v in net.trainable_variables if "kernel" in v.name)
    # The rebuilt actor is the saved greedy policy: the same actions over a few steps.
    policy = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    from sit_keras.agents.environments import load

    environment = load(env, num_envs=2, seed=7)
    time_step = environment.reset()
    policy_state, net_state = policy.get_initial_state(2), ()
    for _ in range(5):
        action_step = policy.action(time_step, policy_state)
        distribution, net_state = net.call(
            tf.constant(time_step.observation), tf.constant(time_step.step_type), net_state
        )
        np.testing.assert_allclose(action_step.action, distribution.mode().numpy(), rtol=1e-5, atol=1e-6)
        policy_state = action_step.state
        time_step = environment.step(action_step.action)
    environment.close()


def test_recurrent_minibatches_must_divide_the_environments(tmp_path):
    gin.clear_config()
    with pytest.raises(harness.SettingsError, match="num_envs = 4 must be a multiple of num_minibatches = 3"):
        train.train_eval(
            str(tmp_path), env_name="gymnasium:Pendulum-v1", num_envs=4, encoder="attention_neuron",
            collect_steps_per_env=6, num_minibatches=3, drac_coef=0.0, progress=False,
        )  # fmt: skip


def test_dmc_configs_parse():
    for path, encoder in [(PI_CONFIG, "attention_neuron"), ("configs/dmc/cartpole_swingup_mlp.gin", "mlp")]:
        gin.clear_config()
        train.parse_gin([path], [])
        assert gin.query_parameter("train_eval.encoder") == encoder
        assert gin.query_parameter("train_eval.env_name") == "dmc:cartpole-swingup"
    gin.clear_config()
