"""CartPoleSwingUpHarder (AttentionNeuron paper, section 4.1): the paper's dynamics, initial states,
reward and observation, through ``load("gymnasium:CartPoleSwingUpHarder-v0")`` and its sensor keywords."""

from __future__ import annotations

import math
import sys

import gymnasium
import numpy as np
import pytest

from sit_keras.agents.environments import cartpole_swingup, load

ENV_NAME = f"gymnasium:{cartpole_swingup.ENV_ID}"


def paper_step(state, action: float) -> tuple[float, float, float, float]:
    """One step of the paper's environment (DeepPILCO's equations, Euler, dt 0.01), written out here."""
    g, m_c, m_p, length, force_mag, dt, b = 9.82, 0.5, 0.5, 0.6, 10.0, 0.01, 0.1
    total, m_p_l = m_c + m_p, m_p * length
    x, x_dot, theta, theta_dot = state
    force = float(np.clip(action, -1.0, 1.0)) * force_mag
    s, c = math.sin(theta), math.cos(theta)
    x_acc = (-2 * m_p_l * theta_dot**2 * s + 3 * m_p * g * s * c + 4 * force - 4 * b * x_dot) / (
        4 * total - 3 * m_p * c**2
    )
    theta_acc = (-3 * m_p_l * theta_dot**2 * s * c + 6 * total * g * s + 6 * (force - b * x_dot) * c) / (
        4 * length * total - 3 * m_p_l * c**2
    )
    return x + x_dot * dt, x_dot + x_acc * dt, theta + theta_dot * dt, theta_dot + theta_acc * dt


def test_a_step_follows_the_paper_s_equations_observation_and_reward():
    cartpole_swingup.register()
    env = gymnasium.make(cartpole_swingup.ENV_ID)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        state = (rng.uniform(-2, 2), rng.uniform(-5, 5), rng.uniform(-math.pi, math.pi), rng.uniform(-5, 5))
        env.unwrapped.state = state
        action = rng.uniform(-1.5, 1.5)  # beyond [-1, 1] is clipped, as in the paper
        observation, reward, terminated, truncated, _ = env.step(np.array([action], np.float32))
        x, x_dot, theta, theta_dot = paper_step(state, np.float32(action))
        np.testing.assert_allclose(
            observation, [x, x_dot, math.cos(theta), math.sin(theta), theta_dot], rtol=1e-5, atol=1e-5
        )
        assert observation.dtype == np.float32 and observation.shape == (5,)
        expected_reward = (math.cos(theta) + 1) / 2 * math.cos(x / 2.4 * math.pi / 2)
        assert reward == pytest.approx(expected_reward, abs=1e-9)
        assert not terminated and not truncated


def test_initial_states_are_the_harder_version_s_uniform_ranges():
    """x in [-2.4, 2.4], velocities in [-10, 10], the pole in the lower half; seeded resets repeat."""
    cartpole_swingup.register()
    env = gymnasium.make(cartpole_swingup.ENV_ID)
    first = [env.reset(seed=3)[0]]
    states = []
    for _ in range(2000):
        env.reset()
        states.append(np.asarray(env.unwrapped.state, dtype=np.float64))
    states = np.array(states)
    offsets = states - [0.0, 0.0, math.pi, 0.0]
    bounds = np.array([2.4, 10.0, math.pi / 2, 10.0])
    assert np.all(np.abs(offsets) <= bounds + 1e-6)
    # Uniform over the whole range, not a narrow Gaussian around the hanging pole.
    assert np.all(np.abs(offsets).max(axis=0) > 0.97 * bounds)
    assert np.all(np.abs(offsets.mean(axis=0)) < 0.1 * bounds)
    np.testing.assert_array_equal(env.reset(seed=3)[0], first[0])


def test_leaving_the_track_terminates_and_the_time_limit_truncates():
    env = load(ENV_NAME, num_envs=1, seed=0)
    env.reset()
    gym_env = env.envs[0].gym.unwrapped
    gym_env.state = (2.39, 5.0, math.pi, 0.0)
    step = env.step(np.ones((1, 1), np.float32))
    assert step.is_last()[0] and step.discount[0] == 0.0  # off the track: nothing to bootstrap
    env.step(np.zeros((1, 1), np.float32))  # the next episode's FIRST step
    gym_env.state = (0.0, 0.0, 0.0, 0.0)  # upright and at rest: stays exactly there with no force
    steps = 1
    while not (step := env.step(np.zeros((1, 1), np.float32))).is_last()[0]:
        steps += 1
    assert steps == cartpole_swingup.MAX_STEPS
    assert step.reward[0] == 1.0
    assert step.discount[0] == 1.0  # a truncation: value targets bootstrap through it


def test_the_paper_s_sensor_columns_load():
    """Table 2's columns: 5 readings, duplicated to 10, and 5 noise channels added."""
    plain = load(ENV_NAME, num_envs=2, seed=1)
    duplicated = load(ENV_NAME, num_envs=2, seed=1, duplicate_sensors=True)
    noisy = load(ENV_NAME, num_envs=2, seed=1, noise_sensors=5)
    assert plain.observation_spec().shape == (5,)
    assert duplicated.observation_spec().shape == noisy.observation_spec().shape == (10,)
    observation = plain.reset().observation
    np.testing.assert_array_equal(duplicated.reset().observation, np.concatenate([observation] * 2, axis=1))
    np.testing.assert_array_equal(noisy.reset().observation[:, :5], observation)


def test_without_its_package_the_environment_is_one_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium_cartpole_swingup", None)
    monkeypatch.setitem(sys.modules, "gymnasium_cartpole_swingup.cartpole_swingup", None)
    with pytest.raises(ValueError, match=r"needs the package gymnasium-cartpole-swingup==0\.1\.8"):
        load(ENV_NAME)
