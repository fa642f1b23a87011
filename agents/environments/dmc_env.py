"""The DeepMind Control Suite (Tassa et al. 2018) as TF-Agents PyEnvironments, from states or pixels.

Every ``(domain, task)`` of ``dm_control.suite`` is available (``DMC_TASKS``).
Two observation modes:

- states: every entry of the suite's observation dict, flattened and
  concatenated in the suite's order, as one float32 vector (cartpole-swingup:
  ``position`` (3) then ``velocity`` (2), the 5 inputs of AttentionNeuron's
  CartPoleSwingUp);
- pixels: ``physics.render(image_size, image_size, camera_id)`` (camera 0,
  quadruped 2, as in Hansen & Wang 2021 and SAC-AE, Yarats et al. 2019), the
  last ``frame_stack`` frames concatenated on the channel axis, uint8
  ``(image_size, image_size, 3 * frame_stack)``. The first frame of an
  episode fills the whole stack.

Actions are float32 in ``[-1, 1]``, mapped affinely to the suite's bounds
(the same for all tasks but quadruped, whose bounds reach 1.1). Each agent step
repeats its action ``action_repeat`` times (rewards summed); the default is
``DEFAULT_PIXEL_ACTION_REPEAT`` for pixels (the SAC-AE / Hansen & Wang
protocol) and 1 for states.

Episodes: an episode lasts ``episode_length`` = 1000 environment steps
(``ceil(1000 / action_repeat)`` agent steps); every suite task except LQR has
exactly that time limit already. The time limit is a truncation: a LAST step
with discount 1 (TF-Agents ``ts.truncation``), so value targets bootstrap
through it. A LAST step with discount 0 (a task's own termination, e.g. LQR
reaching the origin, or a physics divergence) is a ``ts.termination``.

``get_info()["success"]`` is always False: the suite's tasks have dense or
shaped rewards and no success criterion, so the flag only exists to keep the
families uniform (use the return).

``MUJOCO_GL`` is set to ``"egl"`` (headless rendering) when unset, before
``dm_control`` is imported.
"""

from __future__ import annotations

import collections
import difflib
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from dm_control import suite  # noqa: E402
from tf_agents.environments import py_environment  # noqa: E402
from tf_agents.specs import array_spec  # noqa: E402
from tf_agents.trajectories import time_step as ts  # noqa: E402

DMC_TASKS = tuple(f"{domain}-{task}" for domain, task in suite.ALL_TASKS)
"""Every task of ``dm_control.suite`` as ``"<domain>-<task>"``."""

EPISODE_LENGTH = 1000
"""Environment steps per episode (the suite's standard 1000-step time limit)."""

DEFAULT_PIXEL_ACTION_REPEAT = {"cartpole": 8, "finger": 2, "walker": 2}
"""Action repeat of pixel agents per domain (SAC-AE, Yarats et al. 2019); every other domain: 4."""

OTHER_PIXEL_ACTION_REPEAT = 4

CAMERA_ID = {"quadruped": 2}
"""The rendering camera per domain; every other domain: camera 0."""

# Bounds wider than this are "unbounded" (LQR's +-1e10): actions pass unscaled instead of being
# stretched over the whole float range.
_UNBOUNDED = 1e6


def parse_task(name: str) -> tuple[str, str]:
    """``"walker-walk"`` -> ``("walker", "walk")``; ``ValueError`` (close matches) if not a suite task."""
    domain, _, task = name.partition("-")
    if (domain, task) not in suite.ALL_TASKS:
        close = difflib.get_close_matches(name, DMC_TASKS, n=5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(
            f"Unknown DeepMind Control Suite task {name!r} (expected '<domain>-<task>'){hint}; "
            f"valid tasks: {', '.join(DMC_TASKS)}"
        )
    return domain, task


def default_action_repeat(domain: str, pixels: bool) -> int:
    """1 for states; for pixels 8 (cartpole), 2 (finger, walker) or 4, as in SAC-AE and Hansen & Wang."""
    if not pixels:
        return 1
    return DEFAULT_PIXEL_ACTION_REPEAT.get(domain, OTHER_PIXEL_ACTION_REPEAT)


class DMCEnvironment(py_environment.PyEnvironment):
    """One DeepMind Control Suite task as an unbatched TF-Agents PyEnvironment (see the module doc).

    Args:
      name: ``"<domain>-<task>"``, one of ``DMC_TASKS``.
      seed: the task's random state (``task_kwargs={"random": seed}``): the
        initial states of all its episodes.
      pixels: rendered uint8 frames instead of the state vector.
      image_size: height and width of the frames (84 in SAC-AE, 64 in smaller runs).
      frame_stack: number of stacked frames (pixels only).
      action_repeat: environment steps per agent step; ``None`` for
        ``default_action_repeat(domain, pixels)``.
      camera_id: rendering camera; ``None`` for ``CAMERA_ID`` (0, quadruped 2).
      episode_length: environment steps per episode.

    Observation: float32 ``(D,)`` (states) or uint8
    ``(image_size, image_size, 3 * frame_stack)`` (pixels).
    """

    def __init__(
        self,
        name: str,
        seed: int | None = None,
        pixels: bool = False,
        image_size: int = 84,
        frame_stack: int = 3,
        action_repeat: int | None = None,
        camera_id: int | None = None,
        episode_length: int = EPISODE_LENGTH,
    ):
        super().__init__(handle_auto_reset=True)
        domain, task = parse_task(name)
        action_repeat = default_action_repeat(domain, pixels) if action_repeat is None else action_repeat
        for key, value in (
            ("image_size", image_size),
            ("frame_stack", frame_stack),
            ("action_repeat", action_repeat),
            ("episode_length", episode_length),
        ):
            if int(value) != value or value < 1:
                raise ValueError(f"{key} must be a positive integer; received {key}={value!r}")
        self._name = name
        self._pixels = bool(pixels)
        self._image_size = int(image_size)
        self._frame_stack = int(frame_stack)
        self._action_repeat = int(action_repeat)
        self._episode_length = int(episode_length)
        self._camera_id = CAMERA_ID.get(domain, 0) if camera_id is None else int(camera_id)
        self._env = suite.load(domain, task, task_kwargs={"random": seed})
        self._frames: collections.deque[np.ndarray] = collections.deque(maxlen=self._frame_stack)
        self._env_steps = 0

        dm_action = self._env.action_spec()
        low = np.asarray(dm_action.minimum, np.float64) * np.ones(dm_action.shape)
        high = np.asarray(dm_action.maximum, np.float64) * np.ones(dm_action.shape)
        bounded = (np.abs(low) < _UNBOUNDED) & (np.abs(high) < _UNBOUNDED)
        # a in [-1, 1] -> center + a * half_width; unbounded dimensions keep a itself.
        self._action_center = np.where(bounded, (high + low) / 2, 0.0)
        self._action_half_width = np.where(bounded, (high - low) / 2, 1.0)
        self._action_spec = array_spec.BoundedArraySpec(dm_action.shape, np.float32, -1.0, 1.0, name="action")
        if self._pixels:
            shape = (self._image_size, self._image_size, 3 * self._frame_stack)
            self._observation_spec = array_spec.BoundedArraySpec(shape, np.uint8, 0, 255, name="observation")
        else:
            size = sum(int(np.prod(spec.shape)) for spec in self._env.observation_spec().values())
            self._observation_spec = array_spec.ArraySpec((size,), np.float32, name="observation")

    @property
    def dm_env(self):
        """The wrapped ``dm_control.rl.control.Environment``."""
        return self._env

    @property
    def action_repeat(self) -> int:
        return self._action_repeat

    def observation_spec(self) -> array_spec.ArraySpec:
        return self._observation_spec

    def action_spec(self) -> array_spec.BoundedArraySpec:
        return self._action_spec

    def get_info(self) -> dict[str, np.ndarray]:
        return {"success": np.asarray(False)}

    def seed(self, seed: int) -> int:
        """Reseeds the task's random state; the next episode starts from it."""
        self._env.task.random.seed(seed)
        return seed

    def _observe(self, dm_observation: collections.OrderedDict) -> np.ndarray:
        if not self._pixels:
            return np.concatenate([np.asarray(v, np.float32).ravel() for v in dm_observation.values()])
        frame = self._env.physics.render(self._image_size, self._image_size, camera_id=self._camera_id)
        self._frames.append(frame)
        while len(self._frames) < self._frame_stack:
            self._frames.append(frame)
        return np.concatenate(self._frames, axis=-1)

    def _reset(self) -> ts.TimeStep:
        self._frames.clear()
        self._env_steps = 0
        return ts.restart(self._observe(self._env.reset().observation))

    def _step(self, action: np.ndarray) -> ts.TimeStep:
        action = np.clip(np.asarray(action, np.float64).reshape(self._action_spec.shape), -1.0, 1.0)
        action = self._action_center + action * self._action_half_width
        reward = 0.0
        for _ in range(self._action_repeat):
            dm_step = self._env.step(action)
            reward += float(dm_step.reward or 0.0)
            self._env_steps += 1
            if dm_step.last() or self._env_steps >= self._episode_length:
                break
        observation = self._observe(dm_step.observation)
        reward = np.asarray(reward, np.float32)
        if dm_step.last() and dm_step.discount == 0:
            return ts.termination(observation, reward)
        if dm_step.last() or self._env_steps >= self._episode_length:
            return ts.truncation(observation, reward, discount=np.float32(1.0))
        return ts.transition(observation, reward, discount=np.float32(1.0))

    def render(self, mode: str = "rgb_array") -> np.ndarray:
        """A 240x320 RGB frame of the current state from the observation camera."""
        return self._env.physics.render(240, 320, camera_id=self._camera_id)

    def close(self) -> None:
        self._env.close()
        self._env.physics.free()
