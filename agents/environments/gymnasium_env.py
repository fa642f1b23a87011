"""A TF-Agents PyEnvironment for one Gymnasium environment, and the batch of several.

tf-agents 0.19 only wraps the old ``gym`` API (``step`` returns 4 values and
one ``done`` flag). Gymnasium separates the two ways an episode ends, and so
does this bridge:

- ``terminated`` (the MDP reached a terminal state): a LAST step with
  discount 0, nothing to bootstrap from;
- ``truncated`` without ``terminated`` (a time limit): a LAST step with
  discount 1, so that value targets may still bootstrap from it.

After a LAST step the next ``step()`` ignores its action and starts a new
episode (``handle_auto_reset=True``): a FIRST step with reward 0, discount 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from tf_agents.environments import batched_py_environment, py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


def space_to_spec(space: gymnasium.Space, name: str) -> array_spec.BoundedArraySpec:
    """The TF-Agents spec of a Box or Discrete space.

    ``Box`` keeps its shape, dtype and bounds; ``Discrete(n, start)`` becomes an
    ``int64`` scalar in ``[start, start + n - 1]``.
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        start = int(space.start)
        return array_spec.BoundedArraySpec((), np.int64, start, start + int(space.n) - 1, name=name)
    if isinstance(space, gymnasium.spaces.Box):
        return array_spec.BoundedArraySpec(space.shape, space.dtype, space.low, space.high, name=name)
    raise ValueError(f"Only Box and Discrete spaces are supported for the {name}; received {space}")


class GymnasiumEnvironment(py_environment.PyEnvironment):
    """One Gymnasium environment as an unbatched TF-Agents PyEnvironment.

    Args:
      env: a Gymnasium environment with a Box observation space and a Box or
        Discrete action space.
      seed: passed as ``reset(seed=seed)`` on the first reset only; later
        episodes continue the environment's own random stream.

    ``get_info()`` returns ``{"success": bool}`` for the last step:
    ``info["is_success"]`` of the Gymnasium step (False when absent, and on
    FIRST steps).
    """

    def __init__(self, env: gymnasium.Env, seed: int | None = None):
        super().__init__(handle_auto_reset=True)
        if not isinstance(env.observation_space, gymnasium.spaces.Box):
            raise ValueError(f"Expected a Box observation space; received {env.observation_space}")
        self._env = env
        self._seed = seed
        self._first_reset = True
        self._observation_spec = space_to_spec(env.observation_space, "observation")
        self._action_spec = space_to_spec(env.action_space, "action")
        self._discrete = isinstance(env.action_space, gymnasium.spaces.Discrete)
        self._success = False

    @property
    def gym(self) -> gymnasium.Env:
        """The wrapped Gymnasium environment."""
        return self._env

    def observation_spec(self) -> array_spec.BoundedArraySpec:
        return self._observation_spec

    def action_spec(self) -> array_spec.BoundedArraySpec:
        return self._action_spec

    def get_info(self) -> dict[str, np.ndarray]:
        return {"success": np.asarray(self._success, dtype=bool)}

    def seed(self, seed: int) -> int:
        """Sets the seed of the next reset (Gymnasium seeds through ``reset``)."""
        self._seed = seed
        self._first_reset = True
        return seed

    def _observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=self._observation_spec.dtype)

    def _reset(self) -> ts.TimeStep:
        seed = self._seed if self._first_reset else None
        self._first_reset = False
        observation, info = self._env.reset(seed=seed)
        self._success = False
        return ts.restart(self._observation(observation))

    def _step(self, action: np.ndarray) -> ts.TimeStep:
        if self._discrete:
            action = int(action)
        else:
            action = np.asarray(action, dtype=self._action_spec.dtype).reshape(self._action_spec.shape)
        observation, reward, terminated, truncated, info = self._env.step(action)
        observation = self._observation(observation)
        reward = np.asarray(reward, dtype=np.float32)
        self._success = bool(info.get("is_success", False))
        if terminated:
            return ts.termination(observation, reward)
        if truncated:
            return ts.truncation(observation, reward, discount=np.float32(1.0))
        return ts.transition(observation, reward, discount=np.float32(1.0))

    def render(self, mode: str = "rgb_array") -> np.ndarray | None:
        return self._env.render()

    def close(self) -> None:
        self._env.close()


def batch_environments(envs: Sequence[py_environment.PyEnvironment]) -> py_environment.PyEnvironment:
    """TF-Agents' ``BatchedPyEnvironment`` over ``envs``, stepped serially in this thread.

    Every sub-environment resets on its own after its LAST step; ``get_info()``
    stacks the sub-environments' infos into arrays of shape ``(len(envs),)``.
    """
    return batched_py_environment.BatchedPyEnvironment(list(envs), multithreading=False)
