"""Tests of the TF-Agents environments (``sit_keras.agents.environments``).

What this file proves:

- ``load`` returns batched PyEnvironments that pass TF-Agents'
  ``validate_py_environment`` for every family, with one and several
  sub-environments and with an observation transform;
- auto-reset: after a sub-environment's LAST step the next step is FIRST
  (reward 0, discount 1) for it alone; termination has discount 0,
  truncation discount 1; Procgen's gym3 episode boundaries map the same way;
- seeding: the same seed gives the same first observations, sub-environment
  ``i`` is seeded with ``seed + i``;
- bad names, options and transforms raise ``ValueError`` listing the valid ones;
- MiniGrid (SiT appendix F.1): the four relative moves, exact rotation
  symmetry of the observation (rendering a rotated state is ``np.rot90`` of
  the rendering) and of the dynamics (relative actions commute with
  rotations), headings visible at 14x14, goal variants on free reachable
  cells (checked by an independent BFS), ``get_info()["success"]``;
- the observation transforms agree exactly with ``sit_keras.testing``;
- Procgen's normalised score uses the easy-mode constants of all 16 games.
"""

from __future__ import annotations

import doctest
import time
from collections import deque
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from minigrid.core.grid import Grid
from minigrid.core.world_object import Goal, Lava
from tf_agents.environments import utils as env_utils
from tf_agents.trajectories import time_step as ts

from sit_keras import testing
from sit_keras.agents import environments, evaluate
from sit_keras.agents.environments import (
    gymnasium_env,
    loader,
    minigrid_env,
    procgen_env,
    procgen_scores,
    transforms,
)

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))
LAVA_TASKS = ("LavaCrossingS9N1", "LavaCrossingS9N2", "LavaCrossingS9N3")
# MiniGrid heading -> unit step (x right, y down): east, south, west, north.
HEADINGS = ((1, 0), (0, 1), (-1, 0), (0, -1))
ROOT = Path(__file__).resolve().parents[1]


def _run(env, actions):
    """Steps a batched env through ``actions`` and returns the stacked time-step fields."""
    steps = [env.step(np.asarray(a)) for a in actions]
    return (
        np.stack([s.step_type for s in steps]),
        np.stack([s.reward for s in steps]),
        np.stack([s.discount for s in steps]),
    )


# --- every family ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("gymnasium:CartPole-v1", {}),
        ("gymnasium:Pendulum-v1", {"max_episode_steps": 20}),
        ("minigrid:LavaCrossingS9N1,LavaCrossingS9N2", {}),
        ("minigrid:Empty-Random-6x6", {"goal": "random"}),
        ("procgen:coinrun", {}),
    ],
)
def test_validate_py_environment(name, kwargs, num_envs):
    env = environments.load(name, num_envs=num_envs, seed=3, **kwargs)
    assert env.batched and env.batch_size == num_envs
    env_utils.validate_py_environment(env, episodes=2)
    info = env.get_info()
    assert info["success"].shape == (num_envs,) and info["success"].dtype == bool
    env.close()


@pytest.mark.parametrize("transform", ["rot90", "flip_v", "shuffle_patches:7"])
def test_validate_transformed_environment(transform):
    env = environments.load("minigrid:LavaCrossingS9N1", num_envs=2, seed=0, transform=transform)
    env_utils.validate_py_environment(env, episodes=2)
    assert env.get_info()["success"].shape == (2,)


@pytest.mark.parametrize(
    "name, shape, num_actions",
    [("minigrid:LavaCrossingS9N1", (14, 14, 3), 4), ("procgen:maze", (64, 64, 3), 15)],
)
def test_image_and_action_specs(name, shape, num_actions):
    env = environments.load(name, num_envs=2)
    obs_spec, action_spec = env.observation_spec(), env.action_spec()
    assert obs_spec.shape == shape and obs_spec.dtype == np.uint8
    assert action_spec.shape == () and action_spec.dtype == np.int64
    assert (action_spec.minimum, action_spec.maximum) == (0, num_actions - 1)
    step = env.reset()
    assert step.observation.shape == (2, *shape) and step.observation.dtype == np.uint8
    assert step.reward.dtype == np.float32 and step.discount.dtype == np.float32
    env.close()


def test_gymnasium_specs_follow_spaces():
    env = environments.load("gymnasium:Pendulum-v1", num_envs=2)
    space = gymnasium.make("Pendulum-v1").action_space
    spec = env.action_spec()
    assert spec.shape == space.shape and spec.dtype == space.dtype
    np.testing.assert_array_equal(spec.minimum, space.low)
    np.testing.assert_array_equal(spec.maximum, space.high)
    assert env.observation_spec().dtype == np.float32


# --- auto-reset, termination and truncation -----------------------------------------------------------------


def test_gymnasium_termination_then_first():
    # Always pushing right topples CartPole: terminated, discount 0.
    env = environments.load("gymnasium:CartPole-v1", num_envs=1, seed=0)
    env.reset()
    types, rewards, discounts = _run(env, [[1]] * 40)
    end = int(np.argmax(types[:, 0] == LAST))
    assert types[end, 0] == LAST and discounts[end, 0] == 0.0 and rewards[end, 0] == 1.0
    assert np.all(types[:end, 0] == MID)
    assert types[end + 1, 0] == FIRST and rewards[end + 1, 0] == 0.0 and discounts[end + 1, 0] == 1.0
    assert types[end + 2, 0] == MID


def test_gymnasium_truncation_keeps_discount_and_resets_each_env_alone():
    env = environments.load("gymnasium:CartPole-v1", num_envs=2, seed=0, max_episode_steps=5)
    env.reset()
    # Env 0 balances (alternating pushes) until the time limit; env 1 always pushes and falls later.
    types, rewards, discounts = _run(env, [[i % 2, 1] for i in range(7)])
    np.testing.assert_array_equal(types[:, 0], [MID, MID, MID, MID, LAST, FIRST, MID])
    assert discounts[4, 0] == 1.0  # truncated, not terminated
    assert rewards[5, 0] == 0.0 and discounts[5, 0] == 1.0
    np.testing.assert_array_equal(types[:, 1], [MID, MID, MID, MID, LAST, FIRST, MID])


@pytest.mark.parametrize("name", ["gymnasium:CartPole-v1", "minigrid:LavaCrossingS9N1"])
def test_seed_only_applies_to_the_first_episode(name):
    kwargs = {"max_episode_steps": 1} if name.startswith("gymnasium") else {"max_steps": 1}
    env = environments.load(name, num_envs=1, seed=2, **kwargs)
    firsts = [env.reset().observation]
    for _ in range(3):
        assert env.step(np.array([0])).is_last()
        firsts.append(env.step(np.array([0])).observation)
    assert len({f.tobytes() for f in firsts}) == len(firsts)


def test_minigrid_sub_environments_draw_their_levels_from_the_listed_streams():
    tasks = "LavaCrossingS9N1,LavaCrossingS9N2"
    env = environments.load(f"minigrid:{tasks}", num_envs=4, seed=1, max_steps=1)
    observations = [env.reset().observation]
    assert env.step(np.zeros(4, np.int64)).is_last().all()
    observations.append(env.step(np.zeros(4, np.int64)).observation)  # every env's second level
    for i, (task, seed) in enumerate(loader.minigrid_level_streams(tasks, 4, 1)):
        alone = minigrid_env.SiTMiniGrid(task, max_steps=1)
        np.testing.assert_array_equal(observations[0][i], alone.reset(seed=seed)[0])
        np.testing.assert_array_equal(observations[1][i], alone.reset()[0])


def test_runs_whose_seeds_differ_by_an_even_number_share_level_streams():
    # The Table 4 protocol: 16 environments alternating N1 and N2 (docs/lavacrossing.md).
    streams = {
        seed: set(loader.minigrid_level_streams("LavaCrossingS9N1,LavaCrossingS9N2", 16, seed))
        for seed in (0, 1, 2, 3, 16)
    }
    assert len(streams[0] & streams[2]) == 14 and len(streams[1] & streams[3]) == 14
    assert not streams[1] & (streams[0] | streams[2])
    assert not streams[16] & (streams[0] | streams[1])  # seeds 0, 1 and 16: three disjoint families


def test_gymnasium_first_step_ignores_the_action():
    envs = [
        environments.load("gymnasium:CartPole-v1", num_envs=1, seed=4, max_episode_steps=2) for _ in range(2)
    ]
    observations = []
    for env, action in zip(envs, (0, 1), strict=True):
        env.reset()
        env.step(np.array([0]))
        assert env.step(np.array([0])).is_last()
        observations.append(env.step(np.array([action])).observation)  # FIRST: action ignored
    np.testing.assert_array_equal(observations[0], observations[1])


def _lava_walk(env: minigrid_env.SiTMiniGrid) -> list[int]:
    """Relative actions that walk the agent of a fresh LavaCrossing level straight into lava."""
    grid, (x, y) = env.minigrid.grid, env.minigrid.agent_pos
    # (action, clockwise quarter turns): forward, backward, left, right.
    for action, turn in ((0, 0), (1, 2), (2, 3), (3, 1)):
        dx, dy = HEADINGS[(env.minigrid.agent_dir + turn) % 4]
        cx, cy, steps = x + dx, y + dy, 1
        while grid.get(cx, cy) is None:
            cx, cy, steps = cx + dx, cy + dy, steps + 1
        if isinstance(grid.get(cx, cy), Lava):
            return [action] + [0] * (steps - 1)  # the first move turns the agent, then straight on
    raise AssertionError("no lava in a straight line from the start")


def test_minigrid_lava_terminates_and_time_limit_truncates():
    env = environments.load("minigrid:LavaCrossingS9N1", num_envs=1, seed=5)
    env.reset()
    actions = _lava_walk(env.envs[0].gym)
    types, rewards, discounts = _run(env, [[a] for a in actions] + [[0]])
    assert types[len(actions) - 1, 0] == LAST and discounts[len(actions) - 1, 0] == 0.0
    assert rewards[len(actions) - 1, 0] == 0.0 and types[-1, 0] == FIRST
    assert not env.get_info()["success"][0]

    env = environments.load("minigrid:Empty-6x6", num_envs=1, seed=0, max_steps=3)
    env.reset()
    types, rewards, discounts = _run(env, [[2], [0], [0], [0]])  # turn north into the wall and stay there
    np.testing.assert_array_equal(types[:, 0], [MID, MID, LAST, FIRST])
    assert discounts[2, 0] == 1.0 and rewards[2, 0] == 0.0


def test_procgen_episode_boundaries():
    # Random Leaper agents drown or cross within a few dozen steps; Leaper pays 10 only for crossing.
    env = environments.load("procgen:leaper", num_envs=8, seed=0)
    first = env.reset()
    assert np.all(first.step_type == FIRST)
    rng = np.random.default_rng(0)
    previous_last = np.zeros(8, dtype=bool)
    lasts = successes = 0
    for _ in range(300):
        step = env.step(rng.integers(0, 15, 8))
        last = step.step_type == LAST
        success = env.get_info()["success"]
        # Right after a LAST comes a FIRST (reward 0, discount 1) for that env only.
        np.testing.assert_array_equal(step.step_type == FIRST, previous_last)
        assert np.all(step.reward[previous_last] == 0.0) and np.all(step.discount[previous_last] == 1.0)
        assert np.all(step.discount[last] == 0.0) and np.all(step.discount[~last] == 1.0)
        np.testing.assert_array_equal(success, last & (step.reward > 0))
        lasts += int(last.sum())
        successes += int(success.sum())
        previous_last = last
    assert lasts >= 10 and 0 < successes < lasts
    env.close()


class _ScriptedGym3:
    """Stands in for ``ProcgenGym3Env``: the reward of act ``t`` is ``t``, observations show ``t``.

    ``first`` after act ``t`` is ``ENDS[t]``: env 0 ends its episode at act 3, env 1 at act 2 and again
    at act 3 (a one-step episode). Env 0 completes its levels, env 1 does not.
    """

    ENDS = {2: [False, True], 3: [True, True]}

    def __init__(self, num, rand_seed, **options):
        self.num, self.t, self.actions = num, 0, []
        self.first = np.ones(num, dtype=bool)
        self.reward = np.zeros(num, dtype=np.float32)

    def observe(self):
        return self.reward, {"rgb": np.full((self.num, 64, 64, 3), self.t, np.uint8)}, self.first

    def act(self, action):
        self.actions.append(action)
        self.t += 1
        self.first = np.array(self.ENDS.get(self.t, [False] * self.num))
        self.reward = np.full(self.num, self.t, dtype=np.float32)

    def get_info(self):
        return [{"prev_level_complete": int(i == 0)} for i in range(self.num)]

    def close(self):
        self.closed = True


def test_procgen_maps_gym3_boundaries_exactly(monkeypatch):
    monkeypatch.setattr(procgen_env, "_import_procgen", lambda: _ScriptedGym3)
    env = procgen_env.ProcgenEnvironment("leaper", num_envs=2)
    steps = [env.reset()]
    infos = [env.get_info()["success"]]
    for _ in range(5):
        steps.append(env.step(np.array([3, 14])))
        infos.append(env.get_info()["success"])
    types = np.stack([s.step_type for s in steps])
    np.testing.assert_array_equal(
        types, [[FIRST, FIRST], [MID, MID], [MID, LAST], [LAST, FIRST], [FIRST, MID], [MID, MID]]
    )
    rewards = np.stack([s.reward for s in steps])
    np.testing.assert_array_equal(rewards, [[0, 0], [1, 1], [2, 2], [3, 0], [0, 4], [5, 5]])
    discounts = np.stack([s.discount for s in steps])
    np.testing.assert_array_equal(discounts, [[1, 1], [1, 1], [1, 0], [0, 1], [1, 1], [1, 1]])
    np.testing.assert_array_equal(np.stack(infos), [[0, 0], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0]])
    # Every step's observation is gym3's latest frame; actions reach gym3 as int32, even at FIRST steps.
    np.testing.assert_array_equal([s.observation[:, 0, 0, 0] for s in steps], [[t, t] for t in range(6)])
    backend = env._env
    assert all(a.dtype == np.int32 and a.tolist() == [3, 14] for a in backend.actions)


def test_procgen_options():
    env = procgen_env.ProcgenEnvironment("maze", num_envs=2, split="test")
    assert env.options["num_levels"] == 0
    env = procgen_env.ProcgenEnvironment("maze", num_envs=2, num_levels=10, start_level=5)
    assert (env.options["num_levels"], env.options["start_level"]) == (10, 5)
    assert env.options["distribution_mode"] == "easy"
    with pytest.raises(
        ValueError, match=r"full level distribution.*add num_levels=0 \(sit-eval: --env_kwarg"
    ):
        procgen_env.ProcgenEnvironment("maze", split="test", num_levels=200)
    # docs/evaluation.md's test-split example on the shipped configs' training keywords (ppo_drac.gin).
    shipped = {"num_levels": 200, "start_level": 0, "distribution_mode": "easy"}
    given = evaluate.parse_env_kwargs(["split=test", "num_levels=0"])
    env = procgen_env.ProcgenEnvironment("maze", num_envs=2, **{**shipped, **given})
    assert (env.options["num_levels"], env.options["start_level"]) == (0, 0)
    with pytest.raises(ValueError, match="valid splits: train, test"):
        procgen_env.ProcgenEnvironment("maze", split="validation")
    with pytest.raises(ValueError, match="easy, hard"):
        procgen_env.ProcgenEnvironment("maze", distribution_mode="medium")


def test_procgen_games_are_the_sixteen_games():
    procgen_env._import_procgen()
    from procgen.env import ENV_NAMES

    assert procgen_env.PROCGEN_GAMES == tuple(sorted(ENV_NAMES)) and len(ENV_NAMES) == 16
    assert set(procgen_scores.PROCGEN_EASY_SCORE_RANGES) == set(ENV_NAMES)


# --- seeding --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["gymnasium:CartPole-v1", "minigrid:LavaCrossingS9N2", "minigrid:Empty-Random-6x6", "procgen:maze"],
)
def test_same_seed_same_first_observations(name):
    a = environments.load(name, num_envs=3, seed=11).reset().observation
    b = environments.load(name, num_envs=3, seed=11).reset().observation
    c = environments.load(name, num_envs=3, seed=12).reset().observation
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("name", ["gymnasium:CartPole-v1", "minigrid:LavaCrossingS9N3"])
def test_sub_environment_i_is_seeded_with_seed_plus_i(name):
    batch = environments.load(name, num_envs=3, seed=20).reset().observation
    for i in range(3):
        alone = environments.load(name, num_envs=1, seed=20 + i).reset().observation
        np.testing.assert_array_equal(batch[i], alone[0])


def test_procgen_second_reset_is_fresh_and_reproducible():
    runs = []
    for _ in range(2):
        env = environments.load("procgen:maze", num_envs=4, seed=1)
        runs.append([env.reset().observation, env.reset().observation])
        env.close()
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][0], runs[0][1])


# --- errors ---------------------------------------------------------------------------------------


def test_bad_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="procgen, minigrid, gymnasium, dmc, atari"):
        environments.load("mujoco:walker")
    with pytest.raises(ValueError, match="procgen, minigrid, gymnasium"):
        environments.load("coinrun")
    with pytest.raises(ValueError, match="bigfish, bossfight, caveflyer.*starpilot"):
        environments.load("procgen:coinrunner")
    with pytest.raises(ValueError, match="MiniGrid-LavaCrossingS9N1-v0.*MiniGrid-LavaCrossingS9N3-v0"):
        environments.load("minigrid:LavaCrossingS9N9")
    with pytest.raises(ValueError, match="CartPole-v1"):
        environments.load("gymnasium:CartPole-v9")
    with pytest.raises(ValueError, match="num_envs must be at least 1; received num_envs=0"):
        environments.load("gymnasium:CartPole-v1", num_envs=0)


def test_minigrid_names_are_normalised():
    assert minigrid_env.task_id("LavaCrossingS9N1") == "MiniGrid-LavaCrossingS9N1-v0"
    assert minigrid_env.task_id("Empty-Random-6x6") == "MiniGrid-Empty-Random-6x6-v0"
    assert minigrid_env.task_id("MiniGrid-Empty-6x6-v0") == "MiniGrid-Empty-6x6-v0"
    env = environments.load("minigrid:LavaCrossingS9N1,LavaCrossingS9N2", num_envs=5)
    assert [sub.gym.env_id for sub in env.envs] == [
        f"MiniGrid-LavaCrossingS9N{1 + i % 2}-v0" for i in range(5)
    ]


def test_bad_options_raise():
    with pytest.raises(
        ValueError, match="needs image observations of shape \\(H, W, C\\); received .*\\(4,\\)"
    ):
        environments.load("gymnasium:CartPole-v1", transform="rot90")
    with pytest.raises(ValueError, match="valid: rot90, rot180, rot270, flip_h, flip_v"):
        environments.load("minigrid:Empty-6x6", transform="rot45")
    with pytest.raises(ValueError, match="must divide the image height and width"):
        environments.load("minigrid:Empty-6x6", transform="shuffle_patches:3")
    with pytest.raises(ValueError, match="valid goals: default, top_right, bottom_left, random"):
        environments.load("minigrid:LavaCrossingS9N1", goal="center")
    with pytest.raises(ValueError, match="only has goal='default'"):
        environments.load("minigrid:DoorKey-5x5", goal="random")
    with pytest.raises(ValueError, match="Expected an action in \\[0, 3\\]"):
        minigrid_env.SiTMiniGrid("MiniGrid-Empty-6x6-v0").step(4)


# --- MiniGrid, appendix F.1 -----------------------------------------------------------------------


@pytest.mark.parametrize("heading", range(4))
def test_relative_actions(heading):
    env = minigrid_env.SiTMiniGrid("MiniGrid-Empty-8x8-v0")
    env.reset(seed=0)
    base = env.minigrid
    hx, hy = HEADINGS[heading]
    # forward, backward, left, right in image coordinates (y points down, so "left" of east is north).
    expected = [(hx, hy), (-hx, -hy), (hy, -hx), (-hy, hx)]
    for action, (dx, dy) in enumerate(expected):
        base.agent_pos, base.agent_dir, base.step_count = (3, 3), heading, 0
        env.step(action)
        assert tuple(base.agent_pos) == (3 + dx, 3 + dy)
        assert HEADINGS[base.agent_dir] == (dx, dy)  # the agent now faces where it went
        assert base.step_count == 1  # one MiniGrid step per action


def _random_states(task: str, goal: str, count: int, seed: int):
    """States of ``task`` after a few random relative moves (the episode may have ended)."""
    rng = np.random.default_rng(seed)
    env = minigrid_env.SiTMiniGrid(minigrid_env.task_id(task), goal=goal)
    for _ in range(count):
        env.reset(seed=int(rng.integers(2**31)))
        for _ in range(int(rng.integers(0, 6))):
            if env.step(int(rng.integers(4)))[2]:
                break
        yield env


@pytest.mark.parametrize(
    "task, goal",
    [("LavaCrossingS9N1", "default"), ("LavaCrossingS9N3", "random"), ("Empty-Random-6x6", "top_right")],
)
def test_rendering_of_rotated_state_is_rotated_rendering(task, goal):
    for env in _random_states(task, goal, count=15, seed=1):
        base = env.minigrid
        observation = env.observation()
        for k in (1, 2, 3):
            grid, pos, heading = minigrid_env.rotate_state(base.grid, base.agent_pos, base.agent_dir, k)
            rotated = env.renderer.render(grid, pos, heading)
            np.testing.assert_array_equal(rotated, np.rot90(observation, k))
            np.testing.assert_array_equal(rotated[None], testing.rot90(observation[None], k).numpy())


def test_wall_value_is_the_wall_ring_that_crop_border_leaves_out():
    """WALL_VALUE (SiTEncoder border_value in the configs lavacrossing_*_wall.gin) is the ring's colour:
    the uncropped observation's outer 2-pixel frame, on the [0, 1] scale."""
    env = next(_random_states("LavaCrossingS9N2", "default", count=1, seed=3))
    base = env.minigrid
    full = minigrid_env.SymmetricRenderer(tile_size=14, size=18, crop_border=False)
    image = full.render(base.grid, base.agent_pos, base.agent_dir).astype(np.float64) / 255
    ring = np.ones((18, 18), bool)
    ring[2:-2, 2:-2] = False
    np.testing.assert_array_equal(image[ring], minigrid_env.WALL_VALUE)
    inner = full.render(base.grid, base.agent_pos, base.agent_dir)[2:-2, 2:-2]
    np.testing.assert_array_equal(inner, env.observation())
    for name in ("siet_rotation_pooled_no_triangles_wall", "sit_grid_readout_wall"):
        config = (ROOT / "configs" / "minigrid" / f"lavacrossing_{name}.gin").read_text()
        assert f"'border_value': {minigrid_env.WALL_VALUE!r}," in config


def test_rotate_state_is_a_group_action():
    env = next(_random_states("LavaCrossingS9N2", "default", count=1, seed=2))
    base = env.minigrid
    state = (base.grid, tuple(base.agent_pos), base.agent_dir)
    once = minigrid_env.rotate_state(*state, 1)
    assert once[1:] != state[1:] or not np.array_equal(once[0].encode(), state[0].encode())
    four = minigrid_env.rotate_state(*once, 3)
    np.testing.assert_array_equal(four[0].encode(), state[0].encode())
    assert four[1:] == state[1:]


@pytest.mark.parametrize("task", ["LavaCrossingS9N2", "Empty-Random-6x6"])
def test_relative_actions_commute_with_rotation(task):
    """``step(rot(s), a) == rot(step(s, a))`` for every relative action ``a`` and quarter turn."""
    twin = minigrid_env.SiTMiniGrid(minigrid_env.task_id(task))
    twin.reset(seed=0)
    checked_ends = 0
    for env in _random_states(task, "default", count=8, seed=3):
        base = env.minigrid
        state = (base.grid, tuple(base.agent_pos), base.agent_dir, base.step_count)
        for k in (1, 2, 3):
            for action in range(4):
                base.grid, base.agent_pos, base.agent_dir, base.step_count = state
                grid, pos, heading = minigrid_env.rotate_state(*state[:3], k)
                twin.minigrid.grid, twin.minigrid.agent_pos, twin.minigrid.agent_dir = grid, pos, heading
                twin.minigrid.step_count = state[3]
                obs, reward, terminated, truncated, info = env.step(action)
                obs_r, reward_r, terminated_r, truncated_r, info_r = twin.step(action)
                expected = minigrid_env.rotate_state(base.grid, base.agent_pos, base.agent_dir, k)
                assert (tuple(twin.minigrid.agent_pos), twin.minigrid.agent_dir) == expected[1:]
                np.testing.assert_array_equal(twin.minigrid.grid.encode(), expected[0].encode())
                np.testing.assert_array_equal(obs_r, np.rot90(obs, k))
                assert (reward_r, terminated_r, truncated_r, info_r) == (reward, terminated, truncated, info)
                checked_ends += int(terminated)
        base.grid, base.agent_pos, base.agent_dir, base.step_count = state
    if task.startswith("Lava"):
        assert checked_ends > 0  # some moves fall into lava or reach the goal


def test_headings_are_visible_at_14x14():
    renderer = minigrid_env.SymmetricRenderer()
    grid = Grid(9, 9)
    grid.wall_rect(0, 0, 9, 9)
    for x in range(1, 8):
        for y in range(1, 8):
            views = [renderer.render(grid, (x, y), heading).astype(int) for heading in range(4)]
            for a in range(4):
                for b in range(a + 1, 4):
                    assert np.abs(views[a] - views[b]).max() >= 50, (x, y, a, b)


def _bfs(grid: Grid, start) -> set:
    """Cells reachable from ``start`` through empty cells and the goal (written apart from the module's)."""
    seen, queue = {tuple(start)}, deque([tuple(start)])
    while queue:
        x, y = queue.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            cell = grid.get(nx, ny)
            if (nx, ny) not in seen and (cell is None or isinstance(cell, Goal)):
                seen.add((nx, ny))
                queue.append((nx, ny))
    return seen


@pytest.mark.parametrize("goal", ["default", "top_right", "bottom_left", "random"])
@pytest.mark.parametrize("task", [*LAVA_TASKS, "LavaGapS5", "LavaGapS7", "Empty-Random-6x6", "Empty-6x6"])
def test_goal_variants_are_free_and_reachable(task, goal):
    env = minigrid_env.SiTMiniGrid(minigrid_env.task_id(task), goal=goal)
    positions = set()
    for seed in range(40):
        env.reset(seed=seed)
        grid, agent = env.minigrid.grid, tuple(env.minigrid.agent_pos)
        goals = [
            (i, j) for j in range(grid.height) for i in range(grid.width) if isinstance(grid.get(i, j), Goal)
        ]
        assert len(goals) == 1
        target = goals[0]
        assert target != agent and target in _bfs(grid, agent)
        corner = {"top_right": (grid.width - 2, 1), "bottom_left": (1, grid.height - 2)}
        corner["default"] = (grid.width - 2, grid.height - 2)
        if goal in corner:
            assert target == corner[goal]
        positions.add(target)
    if goal == "random":
        assert len(positions) >= 5


def test_random_goal_needs_the_reachability_check():
    # With two or three rivers the openings need not lead to every room: some free cells are unreachable.
    env = minigrid_env.SiTMiniGrid("MiniGrid-LavaCrossingS9N3-v0")
    unreachable = 0
    for seed in range(20):
        env.reset(seed=seed)
        grid, agent = env.minigrid.grid, env.minigrid.agent_pos
        free = {(i, j) for j in range(grid.height) for i in range(grid.width) if grid.get(i, j) is None}
        unreachable += len(free - _bfs(grid, agent))
    assert unreachable > 0


def test_success_on_a_scripted_episode():
    env = environments.load("minigrid:Empty-6x6", num_envs=2, seed=0)
    env.reset()
    # The agent starts at (1, 1) facing east, the goal is at (4, 4): three forward, turn right, two forward.
    plan = [0, 0, 0, 3, 0, 0]
    for t, action in enumerate(plan):
        step = env.step(np.array([action, 2 if t == 0 else 0]))  # env 1 turns north into the wall
        success = env.get_info()["success"]
        assert not success[1]
        if t < len(plan) - 1:
            assert step.step_type[0] == MID and not success[0]
    assert step.step_type[0] == LAST and success[0]
    max_steps = env.envs[0].gym.minigrid.max_steps
    np.testing.assert_allclose(step.reward[0], 1 - 0.9 * len(plan) / max_steps, rtol=1e-6)
    step = env.step(np.array([0, 0]))
    assert step.step_type[0] == FIRST and not env.get_info()["success"][0]


# --- transforms -----------------------------------------------------------------------------------


@given(
    batch=st.integers(1, 3),
    height=st.sampled_from([2, 4, 6]),
    width=st.sampled_from([2, 4, 8]),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_transforms_agree_with_sit_keras_testing(batch, height, width, channels, seed):
    images = np.random.default_rng(seed).integers(0, 256, (batch, height, width, channels), dtype=np.uint8)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(transforms.rot90(images, k), testing.rot90(images, k).numpy())
    np.testing.assert_array_equal(transforms.flip_h(images), testing.flip_h(images).numpy())
    np.testing.assert_array_equal(transforms.flip_v(images), testing.flip_v(images).numpy())
    # A patch shuffle is a permutation of the patch grid: testing.permute_grid on patch vectors.
    patch = 2
    rows, cols = height // patch, width // patch
    permutation = transforms.patch_permutation(rows * cols, seed)
    as_grid = images.reshape(batch, rows, patch, cols, patch, channels).transpose(0, 1, 3, 2, 4, 5)
    as_grid = as_grid.reshape(batch, rows, cols, patch * patch * channels)
    expected = testing.permute_grid(tf.constant(as_grid), permutation).numpy()
    expected = expected.reshape(batch, rows, cols, patch, patch, channels).transpose(0, 1, 3, 2, 4, 5)
    np.testing.assert_array_equal(
        transforms.shuffle_patches(images, patch, permutation), expected.reshape(images.shape)
    )


class _Strip(gymnasium.Env):
    """A tiny non-square image environment: a 6x4 strip whose lit column is the step count."""

    observation_space = gymnasium.spaces.Box(0, 255, (6, 4, 3), dtype=np.uint8)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def _observation(self):
        image = np.zeros((6, 4, 3), np.uint8)
        image[self.t % 6, self.t % 4] = (255, int(self.np_random.integers(256)), 7)
        return image

    def step(self, action):
        self.t += 1
        return self._observation(), float(action), self.t >= 5, False, {}


@pytest.mark.parametrize("transform", ["rot90", "rot180", "rot270", "flip_h", "flip_v", "shuffle_patches:2"])
def test_transformed_observation_on_non_square_images(transform):
    def make():
        return gymnasium_env.batch_environments(
            [gymnasium_env.GymnasiumEnvironment(_Strip(), seed=i) for i in range(2)]
        )

    plain, wrapped = make(), transforms.TransformedObservation(make(), transform, seed=9)
    fn, shape = transforms.parse_transform(transform, (6, 4, 3), seed=9)
    assert wrapped.observation_spec().shape == shape
    assert shape == ((4, 6, 3) if transform in ("rot90", "rot270") else (6, 4, 3))
    env_utils.validate_py_environment(wrapped, episodes=2)
    plain, wrapped = make(), transforms.TransformedObservation(make(), transform, seed=9)
    np.testing.assert_array_equal(wrapped.reset().observation, fn(plain.reset().observation))
    for _ in range(7):
        a, b = plain.step(np.array([1, 0])), wrapped.step(np.array([1, 0]))
        np.testing.assert_array_equal(b.observation, fn(a.observation))
        np.testing.assert_array_equal(b.reward, a.reward)
        np.testing.assert_array_equal(b.step_type, a.step_type)


@pytest.mark.parametrize(
    "transform, reference",
    [
        ("rot90", lambda x: testing.rot90(x, 1)),
        ("rot270", lambda x: testing.rot90(x, 3)),
        ("flip_h", testing.flip_h),
        ("shuffle_patches:7", None),
    ],
)
def test_load_with_transform_sees_the_transformed_task(transform, reference):
    plain = environments.load("minigrid:LavaCrossingS9N1", num_envs=2, seed=6)
    seen = environments.load("minigrid:LavaCrossingS9N1", num_envs=2, seed=6, transform=transform)
    if reference is None:
        permutation = transforms.patch_permutation(4, seed=6)  # a 2x2 grid of 7x7 patches
        reference = lambda x: transforms.shuffle_patches(np.asarray(x), 7, permutation)  # noqa: E731
    steps = [(plain.reset(), seen.reset())]
    rng = np.random.default_rng(0)
    steps += [(plain.step(a), seen.step(a)) for a in rng.integers(0, 4, (12, 2))]
    for a, b in steps:
        np.testing.assert_array_equal(b.observation, np.asarray(reference(a.observation)))
        np.testing.assert_array_equal(b.reward, a.reward)
        np.testing.assert_array_equal(b.discount, a.discount)


# --- Procgen scores -------------------------------------------------------------------------------


def test_normalized_score():
    assert procgen_scores.normalized_score("coinrun", 5.0) == 0.0
    assert procgen_scores.normalized_score("coinrun", 10.0) == 1.0
    assert procgen_scores.normalized_score("coinrun", 7.5) == 0.5
    assert procgen_scores.normalized_score("fruitbot", -1.5) == 0.0
    assert procgen_scores.normalized_score("starpilot", 64.0) == 1.0
    np.testing.assert_allclose(
        procgen_scores.normalized_score("bigfish", np.array([1.0, 20.5, 40.0])), [0, 0.5, 1]
    )
    assert all(lo < hi for lo, hi in procgen_scores.PROCGEN_EASY_SCORE_RANGES.values())
    assert len(procgen_scores.PROCGEN_EASY_SCORE_RANGES) == 16
    with pytest.raises(ValueError, match="valid games: bigfish"):
        procgen_scores.normalized_score("pong", 1.0)


def test_docstring_examples():
    assert doctest.testmod(procgen_scores).failed == 0


# --- speed (large) --------------------------------------------------------------------------------


@pytest.mark.large
def test_minigrid_speed():
    env = environments.load("minigrid:LavaCrossingS9N1", num_envs=1)
    env.reset()
    actions = np.random.default_rng(0).integers(0, 4, (3000, 1))
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    assert len(actions) / (time.perf_counter() - start) >= 1000


@pytest.mark.large
def test_procgen_speed():
    env = environments.load("procgen:coinrun", num_envs=64)
    env.reset()
    actions = np.random.default_rng(0).integers(0, 15, (300, 64))
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    assert actions.size / (time.perf_counter() - start) >= 10000
