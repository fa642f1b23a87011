"""Tests of the sensor permutation, duplication and noise channels (``sensor_permutation``, AttentionNeuron).

What this file proves, on real DMC and Gymnasium environments through ``load``:

- the wrapped environments pass ``validate_py_environment`` batched;
- exactness: with the same seed and actions, the shuffled observation is
  exactly the unshuffled extended reading permuted by the reported
  permutation (``get_info()["sensor_permutation"]``), the extended reading
  is ``[o, o, noise]`` of the raw observation ``o``;
- timing: ``"once"`` keeps one order per episode and draws a new one at the
  next FIRST step; ``"every:<t>"`` changes it exactly at steps ``t, 2t, ...``
  of an episode and keeps it within each period;
- seeding: the same seed gives the same permutation stream, sub-environment
  ``i`` follows seed ``seed + i``, different seeds differ;
- noise channels are fresh N(0, 0.1^2) draws at every step;
- bad modes and non-vector observations raise ``ValueError``.
"""

from __future__ import annotations

import numpy as np
import pytest
from tf_agents.environments import utils as env_utils

from sit_keras.agents import environments
from sit_keras.agents.environments import sensor_permutation

CARTPOLE = "dmc:cartpole-swingup"


def _rollout(env, num_steps, seed=0):
    """Observations (T+1, B, M), permutations (T+1, B, M), step types (T+1, B) under fixed random actions."""
    spec = env.action_spec()
    rng = np.random.default_rng(seed)
    steps = [env.reset()]
    permutations = [env.get_info()["sensor_permutation"]] if "sensor_permutation" in env.get_info() else []
    for _ in range(num_steps):
        action = rng.uniform(-1, 1, (env.batch_size, *spec.shape)).astype(spec.dtype)
        steps.append(env.step(action))
        if permutations:
            permutations.append(env.get_info()["sensor_permutation"])
    observations = np.stack([s.observation for s in steps])
    types = np.stack([s.step_type for s in steps])
    return observations, (np.stack(permutations) if permutations else None), types


@pytest.mark.parametrize(
    "name, kwargs",
    [
        (CARTPOLE, {"sensor_permutation": "every:3", "noise_sensors": 5, "duplicate_sensors": True}),
        ("gymnasium:Pendulum-v1", {"sensor_permutation": "once", "max_episode_steps": 10}),
    ],
)
def test_validates(name, kwargs):
    if name.startswith("dmc"):
        kwargs = {**kwargs, "episode_length": 10}
    env = environments.load(name, num_envs=2, seed=3, **kwargs)
    env_utils.validate_py_environment(env, episodes=4)
    info = env.get_info()
    assert info["success"].shape == (2,)
    assert info["sensor_permutation"].shape == (2, env.observation_spec().shape[0])
    env.close()


@pytest.mark.parametrize("mode", ["once", "every:4"])
def test_shuffled_is_exactly_the_permuted_unshuffled_reading(mode):
    options = {"noise_sensors": 3, "duplicate_sensors": True, "episode_length": 12}
    raw_env = environments.load(CARTPOLE, num_envs=2, seed=5, episode_length=12)
    plain_env = environments.load(CARTPOLE, num_envs=2, seed=5, **options)
    shuffled_env = environments.load(CARTPOLE, num_envs=2, seed=5, sensor_permutation=mode, **options)
    assert shuffled_env.observation_spec().shape == plain_env.observation_spec().shape == (13,)
    raw, _, raw_types = _rollout(raw_env, 30)
    plain, identity, _ = _rollout(plain_env, 30)
    shuffled, permutations, types = _rollout(shuffled_env, 30)
    np.testing.assert_array_equal(types, raw_types)
    np.testing.assert_array_equal(identity, np.broadcast_to(np.arange(13), identity.shape))
    # The extended reading: [o, o, noise].
    np.testing.assert_array_equal(plain[..., :5], raw)
    np.testing.assert_array_equal(plain[..., 5:10], raw)
    # observation[j] = extended[permutation[j]], exactly.
    np.testing.assert_array_equal(shuffled, np.take_along_axis(plain, permutations, axis=-1))
    for p in permutations.reshape(-1, 13):
        np.testing.assert_array_equal(np.sort(p), np.arange(13))
    assert np.any(permutations != np.arange(13))
    np.testing.assert_array_equal(shuffled_env.envs[1].permutation, permutations[-1, 1])
    for env in (raw_env, plain_env, shuffled_env):
        env.close()


def _changes(permutations):
    """Boolean (T,): whether the permutation of step s differs from that of step s - 1 (s >= 1)."""
    return np.any(permutations[1:] != permutations[:-1], axis=-1)


def test_once_keeps_the_order_for_the_episode():
    env = environments.load(CARTPOLE, seed=0, sensor_permutation="once", noise_sensors=5, episode_length=6)
    _, permutations, types = _rollout(env, 20)
    first = types[1:, 0] == 0
    np.testing.assert_array_equal(_changes(permutations[:, 0]), first)
    assert first.sum() == 2  # two new episodes, two new orders
    env.close()


@pytest.mark.parametrize("period", [1, 3])
def test_every_t_reshuffles_exactly_every_t_steps(period):
    env = environments.load(
        CARTPOLE, seed=1, sensor_permutation=f"every:{period}", noise_sensors=5, episode_length=7
    )
    _, permutations, types = _rollout(env, 24)
    episode_step = []
    for step_type in types[:, 0]:
        episode_step.append(0 if step_type == 0 else episode_step[-1] + 1)
    episode_step = np.asarray(episode_step)
    expected = (episode_step[1:] == 0) | (episode_step[1:] % period == 0)
    np.testing.assert_array_equal(_changes(permutations[:, 0]), expected)
    env.close()


def test_seeded_permutation_stream():
    def stream(seed, num_envs=1, env_index=0):
        env = environments.load(CARTPOLE, num_envs=num_envs, seed=seed, sensor_permutation="every:2")
        permutations = _rollout(env, 9)[1][:, env_index]
        env.close()
        return permutations

    np.testing.assert_array_equal(stream(4), stream(4))
    np.testing.assert_array_equal(stream(4, num_envs=2, env_index=1), stream(5))  # sub-env i: seed + i
    assert not np.array_equal(stream(4), stream(6))


def test_noise_channels_are_fresh_gaussian_draws():
    env = environments.load("gymnasium:Pendulum-v1", seed=2, noise_sensors=8, max_episode_steps=50)
    observations, _, _ = _rollout(env, 120)
    noise = observations[:, 0, 3:]
    assert noise.shape == (121, 8)
    assert abs(noise.mean()) < 0.02 and 0.09 < noise.std() < 0.11
    assert sensor_permutation.NOISE_STD == 0.1
    assert len(np.unique(noise)) == noise.size  # fresh at every step and channel
    env.close()


def test_duplicate_sensors_5_to_10():
    env = environments.load(CARTPOLE, seed=0, duplicate_sensors=True)
    assert env.observation_spec().shape == (10,) and env.observation_spec().dtype == np.float32
    observations, identity, _ = _rollout(env, 5)
    np.testing.assert_array_equal(observations[..., :5], observations[..., 5:])
    np.testing.assert_array_equal(identity[-1, 0], np.arange(10))
    env.close()


def test_bad_options_raise():
    for mode in ("sometimes", "every:0", "every:x", "every"):
        with pytest.raises(ValueError, match="sensor_permutation must be None, 'once' or 'every:<t>'"):
            environments.load(CARTPOLE, sensor_permutation=mode)
    with pytest.raises(ValueError, match="noise_sensors must be an integer >= 0"):
        environments.load(CARTPOLE, noise_sensors=-1)
    with pytest.raises(ValueError, match=r"need a vector observation of shape \(N,\)"):
        environments.load(CARTPOLE, pixels=True, image_size=64, sensor_permutation="once")
    with pytest.raises(ValueError, match="need a vector observation"):
        environments.load("procgen:coinrun", sensor_permutation="once")
