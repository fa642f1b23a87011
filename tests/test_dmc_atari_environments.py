"""Tests of the DeepMind Control Suite and Atari families of ``sit_keras.agents.environments.load``.

What this file proves, on the real simulators:

- ``"dmc:<domain>-<task>"`` (states and pixels) passes TF-Agents'
  ``validate_py_environment`` batched; the state vector is the suite's
  observation dict flattened in its order; actions in ``[-1, 1]`` reach the
  suite scaled to its bounds; an episode is 1000 environment steps
  (``/ action_repeat`` agent steps) ending in a truncation (discount 1), then
  a FIRST step; action repeat sums the rewards of the repeated steps; pixel
  observations are uint8 frame stacks whose newest frame is the render of
  the current state; unknown tasks raise ``ValueError`` with close matches;
- ``"atari:<Game>"`` (ALE v5 through Gymnasium) passes the same validation
  for Pong and Breakout; observations are uint8 ``(84, 84, 4)`` stacks that
  shift by one frame per step; a life loss ends a training episode only with
  ``terminal_on_life_loss=True`` (discount 0) and the next reset continues
  the game; sticky actions change the dynamics; the same seed gives the same
  run; unknown games raise ``ValueError`` listing the games.
"""

from __future__ import annotations

import numpy as np
import pytest
from tf_agents.environments import utils as env_utils
from tf_agents.trajectories import time_step as ts

from sit_keras.agents import environments
from sit_keras.agents.environments import dmc_env

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))


def _flat(dm_observation) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float32).ravel() for v in dm_observation.values()])


# --- DeepMind Control Suite -------------------------------------------------------------------------------


@pytest.mark.parametrize("num_envs", [1, 2])
@pytest.mark.parametrize("name", ["dmc:cartpole-swingup", "dmc:walker-walk"])
def test_dmc_state_validates(name, num_envs):
    env = environments.load(name, num_envs=num_envs, seed=1, episode_length=30)
    assert env.batched and env.batch_size == num_envs
    env_utils.validate_py_environment(env, episodes=2 * num_envs)
    spec = env.action_spec()
    assert spec.dtype == np.float32 and np.all(spec.minimum == -1.0) and np.all(spec.maximum == 1.0)
    info = env.get_info()
    assert info["success"].shape == (num_envs,) and not info["success"].any()
    env.close()


@pytest.mark.parametrize("name, size", [("cartpole-swingup", 5), ("walker-walk", 24), ("cheetah-run", 17)])
def test_dmc_state_is_the_suite_observation_flattened_in_order(name, size):
    from dm_control import suite

    env = environments.load(f"dmc:{name}", num_envs=2, seed=7)
    assert env.observation_spec().shape == (size,) and env.observation_spec().dtype == np.float32
    first = env.reset().observation
    for i in range(2):
        reference = suite.load(*name.split("-"), task_kwargs={"random": 7 + i})
        np.testing.assert_array_equal(first[i], _flat(reference.reset().observation))
    # Same actions -> same states as the raw suite (action repeat 1 for states).
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 2, *env.action_spec().shape)).astype(np.float32)
    reference = suite.load(*name.split("-"), task_kwargs={"random": 8})
    reference.reset()
    for action in actions:
        step = env.step(action)
        expected = reference.step(action[1])
        np.testing.assert_array_equal(step.observation[1], _flat(expected.observation))
        np.testing.assert_allclose(step.reward[1], expected.reward, rtol=1e-6)
    env.close()


def test_dmc_unknown_task_lists_close_matches():
    with pytest.raises(ValueError, match=r"closest: walker-walk.*valid tasks: acrobot-swingup"):
        environments.load("dmc:walker-wlak")
    with pytest.raises(ValueError, match="Unknown DeepMind Control Suite task 'cartpole'"):
        environments.load("dmc:cartpole")
    with pytest.raises(ValueError, match="action_repeat must be a positive integer"):
        environments.load("dmc:cartpole-swingup", action_repeat=0)
    assert len(dmc_env.DMC_TASKS) == len(set(dmc_env.DMC_TASKS)) >= 50


@pytest.mark.parametrize("action_repeat, agent_steps", [(1, 1000), (8, 125), (3, 334)])
def test_dmc_episode_is_1000_env_steps_and_a_truncation(action_repeat, agent_steps):
    env = environments.load("dmc:cartpole-swingup", num_envs=1, seed=0, action_repeat=action_repeat)
    env.reset()
    types, discounts = [], []
    for _ in range(agent_steps + 2):
        step = env.step(np.zeros((1, 1), np.float32))
        types.append(int(step.step_type[0]))
        discounts.append(float(step.discount[0]))
    assert types[: agent_steps - 1] == [MID] * (agent_steps - 1)
    assert types[agent_steps - 1 :] == [LAST, FIRST, MID]
    assert discounts[agent_steps - 1] == 1.0  # the time limit is a truncation
    env.close()


def test_dmc_action_repeat_sums_rewards_and_scales_actions():
    from dm_control import suite

    env = environments.load("dmc:quadruped-walk", num_envs=1, seed=3, action_repeat=2)
    reference = suite.load("quadruped", "walk", task_kwargs={"random": 3})
    env.reset()
    reference.reset()
    low, high = reference.action_spec().minimum, reference.action_spec().maximum
    assert np.any(high != 1.0)  # quadruped's bounds are not [-1, 1]
    rng = np.random.default_rng(1)
    for _ in range(3):
        action = rng.uniform(-1, 1, (1, 12)).astype(np.float32)
        step = env.step(action)
        scaled = low + (action[0].astype(np.float64) + 1) / 2 * (high - low)
        rewards = [reference.step(scaled).reward for _ in range(2)]
        np.testing.assert_allclose(step.reward[0], sum(rewards), rtol=1e-5)
    np.testing.assert_allclose(
        step.observation[0], _flat(reference.task.get_observation(reference.physics)), rtol=1e-6
    )
    env.close()


def test_dmc_pixels_tiny_run():
    env = environments.load(
        "dmc:cartpole-swingup", num_envs=2, seed=0, pixels=True, image_size=64, episode_length=24
    )
    assert env.observation_spec().shape == (64, 64, 9) and env.observation_spec().dtype == np.uint8
    assert env.envs[0].action_repeat == 8  # the cartpole default of pixel agents
    first = env.reset().observation
    assert first.shape == (2, 64, 64, 9) and first.dtype == np.uint8
    # The first frame fills the stack.
    np.testing.assert_array_equal(first[..., 0:3], first[..., 6:9])
    step = env.step(np.ones((2, 1), np.float32))
    np.testing.assert_array_equal(step.observation[..., 0:6], first[..., 3:9])  # the stack shifts
    for i in range(2):
        dm = env.envs[i].dm_env
        np.testing.assert_array_equal(step.observation[i, ..., 6:9], dm.physics.render(64, 64, camera_id=0))
    assert not np.array_equal(step.observation[..., 6:9], first[..., 6:9])
    assert np.all(env.step(np.ones((2, 1), np.float32)).step_type == MID)
    step = env.step(np.ones((2, 1), np.float32))
    assert np.all(step.step_type == LAST) and np.all(step.discount == 1.0)  # 3 steps x 8 = 24
    env.close()


def test_dmc_pixels_validates():
    env = environments.load(
        "dmc:cartpole-swingup",
        num_envs=2,
        seed=0,
        pixels=True,
        image_size=64,
        frame_stack=2,
        episode_length=16,
    )
    env_utils.validate_py_environment(env, episodes=2)
    env.close()


def test_dmc_default_pixel_settings():
    assert dmc_env.default_action_repeat("walker", pixels=True) == 2
    assert dmc_env.default_action_repeat("cartpole", pixels=True) == 8
    assert dmc_env.default_action_repeat("cheetah", pixels=True) == 4
    assert dmc_env.default_action_repeat("cartpole", pixels=False) == 1


# --- Atari ------------------------------------------------------------------------------------------------


def _atari(game="Pong", num_envs=1, **kwargs):
    return environments.load(f"atari:{game}", num_envs=num_envs, seed=kwargs.pop("seed", 0), **kwargs)


@pytest.mark.parametrize("game, num_actions", [("Pong", 6), ("Breakout", 4)])
def test_atari_validates(game, num_actions):
    env = _atari(game, num_envs=2, max_episode_frames=300)
    assert env.observation_spec().shape == (84, 84, 4) and env.observation_spec().dtype == np.uint8
    spec = env.action_spec()
    assert (
        spec.shape == () and spec.dtype == np.int64 and (spec.minimum, spec.maximum) == (0, num_actions - 1)
    )
    env_utils.validate_py_environment(env, episodes=4)
    info = env.get_info()
    assert info["success"].shape == (2,) and not info["success"].any()
    env.close()


def test_atari_frames_are_max_pooled_resized_greyscale_and_stacked():
    import cv2
    import gymnasium

    env = _atari("Pong", seed=5, sticky_action_probability=0.0, noop_max=0)
    reference = gymnasium.make(
        "ALE/Pong-v5", obs_type="grayscale", frameskip=1, repeat_action_probability=0.0
    )
    screen, _ = reference.reset(seed=5)
    first = env.reset().observation[0]
    assert first.shape == (84, 84, 4) and first.dtype == np.uint8
    expected = cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)
    for c in range(4):  # the first frame fills the stack
        np.testing.assert_array_equal(first[..., c], expected)
    previous = first
    for action in (2, 3, 3, 1, 0, 2):
        step = env.step(np.array([action]))
        screens = [reference.step(action)[0] for _ in range(4)]
        expected = cv2.resize(np.maximum(screens[2], screens[3]), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(step.observation[0, ..., 3], expected)
        np.testing.assert_array_equal(step.observation[0, ..., :3], previous[..., 1:])
        previous = step.observation[0]
    env.close()


def _until_last(env, action, limit=2000):
    for n in range(1, limit + 1):
        step = env.step(np.array([action]))
        if step.is_last()[0]:
            return n, step
    raise AssertionError(f"no LAST step within {limit} steps")


def test_atari_life_loss_is_terminal_only_when_asked():
    # Always FIRE in Breakout: the ball is served and the unmoving paddle soon misses it.
    env = _atari("Breakout", seed=1, terminal_on_life_loss=True, sticky_action_probability=0.0)
    env.reset()
    lives = int(env.get_info()["lives"][0])
    ale = env.envs[0].gym.unwrapped.ale
    n, step = _until_last(env, 1)
    info = env.get_info()
    assert step.discount[0] == 0.0 and int(info["lives"][0]) == lives - 1 and not info["game_over"][0]
    frame = ale.getEpisodeFrameNumber()
    first = env.step(np.array([1]))
    assert first.is_first()[0] and first.reward[0] == 0.0
    np.testing.assert_array_equal(first.observation[0, ..., 0], step.observation[0, ..., 3])
    assert ale.getEpisodeFrameNumber() == frame  # the game goes on: no reset, no no-ops
    env.close()

    # The same play without the flag: the life is lost in a MID step at the same agent step.
    env = _atari("Breakout", seed=1, terminal_on_life_loss=False, sticky_action_probability=0.0)
    env.reset()
    steps = [env.step(np.array([1])) for _ in range(n)]
    assert not any(s.is_last()[0] for s in steps) and int(env.get_info()["lives"][0]) == lives - 1
    env.close()


def test_atari_time_limit_is_a_truncation_and_ends_the_game():
    env = _atari("Pong", noop_max=0, max_episode_frames=200)
    env.reset()
    n, step = _until_last(env, 0)
    assert n == 50 and step.discount[0] == 1.0 and env.get_info()["game_over"][0]
    assert env.step(np.array([0])).is_first()[0]
    assert env.envs[0].gym.unwrapped.ale.getEpisodeFrameNumber() == 0  # a new game
    env.close()


def _observations(seed, probability, actions):
    env = _atari("Pong", seed=seed, noop_max=0, sticky_action_probability=probability)
    observations = [env.reset().observation] + [env.step(np.array([a])).observation for a in actions]
    env.close()
    return np.stack(observations)


def test_atari_sticky_actions_and_seeding():
    actions = np.random.default_rng(0).integers(0, 6, 60)
    deterministic = _observations(0, 0.0, actions)
    np.testing.assert_array_equal(deterministic, _observations(1, 0.0, actions))  # no randomness left
    sticky = _observations(0, 0.25, actions)
    np.testing.assert_array_equal(sticky, _observations(0, 0.25, actions))  # same seed, same run
    assert not np.array_equal(sticky, deterministic)
    assert not np.array_equal(sticky, _observations(1, 0.25, actions))


def test_atari_names_and_options():
    from sit_keras.agents.environments import atari_env

    assert atari_env.game_id("space_invaders") == "ALE/SpaceInvaders-v5" == atari_env.game_id("SpaceInvaders")
    assert atari_env.ATARI_100K_FRAMES == 4 * atari_env.ATARI_100K_AGENT_STEPS
    with pytest.raises(
        ValueError, match=r"Unknown Atari game 'Pongg'; closest: Pong.*ALE v5 games: .*Breakout"
    ):
        environments.load("atari:Pongg")
    with pytest.raises(ValueError, match="sticky_action_probability must be in"):
        environments.load("atari:Pong", sticky_action_probability=1.5)
    env = _atari("Pong", full_action_space=True, frame_stack=2)
    assert env.action_spec().maximum == 17 and env.observation_spec().shape == (84, 84, 2)
    env.close()
