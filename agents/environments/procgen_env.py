"""Procgen (Cobbe et al. 2020) as one batched TF-Agents PyEnvironment over the vectorised gym3 backend.

One ``procgen.ProcgenGym3Env`` steps all ``num_envs`` games in C++; this
class only translates gym3's episode boundaries to TF-Agents time steps.

gym3 resets inside ``act``: when ``first[i]`` is set after an ``act``, that
action ended env i's episode, ``rew[i]`` is its last reward and the
observation already shows the next episode. TF-Agents wants a LAST step and
then a FIRST step, so for env i this class emits

1. the LAST step: the final reward, discount 0, and the new episode's first
   frame as observation (gym3 never shows the terminal frame);
2. on the next ``step()``, a FIRST step (reward 0, discount 1). The vectorised
   env cannot skip one game, so env i also takes that step's action: the new
   episode's first action is chosen without the agent seeing anything, its
   reward is dropped, and the FIRST observation is the frame after it. In
   TF-Agents terms every episode after the first starts one gym3 step late
   (an episode that ends within that one step is lost entirely).

Procgen's own time limits end episodes like any other ending (discount 0):
gym3 does not tell them apart. ``get_info()["success"]`` is gym3's
``prev_level_complete`` on LAST steps (False otherwise).
"""

from __future__ import annotations

import warnings

import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.environments.procgen_scores import PROCGEN_EASY_SCORE_RANGES

PROCGEN_GAMES = tuple(sorted(PROCGEN_EASY_SCORE_RANGES))
"""The 16 Procgen games."""

DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")
SPLITS = ("train", "test")
NUM_ACTIONS = 15
IMAGE_SHAPE = (64, 64, 3)


def _import_procgen():
    """``procgen.ProcgenGym3Env``, imported on first use (procgen pulls in the old gym package)."""
    # procgen/__init__.py reads its version.txt without closing it: a ResourceWarning at import time.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        from procgen import ProcgenGym3Env
    return ProcgenGym3Env


class ProcgenEnvironment(py_environment.PyEnvironment):
    """``num_envs`` copies of one Procgen game, batched, with TF-Agents auto-reset (see the module doc).

    Args:
      game: one of ``PROCGEN_GAMES``.
      num_envs: batch size.
      seed: gym3's ``rand_seed``; the vectorised backend derives every
        game's level sequence from it (no per-environment seeds).
      num_levels: levels of the training set, ``start_level`` ..
        ``start_level + num_levels - 1`` (default 200, Cobbe et al.).
      start_level: first training level (default 0).
      distribution_mode: one of ``DISTRIBUTION_MODES`` (default ``"easy"``).
      split: ``"train"`` (the fixed levels above) or ``"test"`` (the full
        level distribution, ``num_levels=0``, as Cobbe et al. test).

    Observations are ``uint8 (64, 64, 3)``, actions ``int64`` in ``[0, 14]``.
    A second ``reset()`` rebuilds the games with a seed drawn from
    ``(seed, number of resets)``: fresh but reproducible episodes.
    """

    def __init__(
        self,
        game: str,
        num_envs: int = 1,
        seed: int = 0,
        num_levels: int | None = None,
        start_level: int | None = None,
        distribution_mode: str = "easy",
        split: str = "train",
    ):
        super().__init__(handle_auto_reset=False)
        if game not in PROCGEN_GAMES:
            raise ValueError(f"Unknown Procgen game {game!r}; valid games: {', '.join(PROCGEN_GAMES)}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1; received num_envs={num_envs}")
        if distribution_mode not in DISTRIBUTION_MODES:
            raise ValueError(
                f"Unknown distribution_mode {distribution_mode!r}; valid: {', '.join(DISTRIBUTION_MODES)}"
            )
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        if split == "test":
            if num_levels not in (None, 0):
                raise ValueError(
                    f"split='test' uses the full level distribution, so it takes no num_levels; received "
                    f"num_levels={num_levels}: add num_levels=0 (sit-eval: --env_kwarg num_levels=0)"
                )
            num_levels, start_level = 0, 0
        self._game = game
        self._num_envs = int(num_envs)
        self._seed = int(seed)
        self._options = {
            "env_name": game,
            "num_levels": 200 if num_levels is None else int(num_levels),
            "start_level": 0 if start_level is None else int(start_level),
            "distribution_mode": distribution_mode,
        }
        self._env = None
        self._resets = 0
        self._starting = np.zeros(self._num_envs, dtype=bool)  # previous emitted step was LAST
        self._success = np.zeros(self._num_envs, dtype=bool)
        self._observation_spec = array_spec.BoundedArraySpec(
            IMAGE_SHAPE, np.uint8, 0, 255, name="observation"
        )
        self._action_spec = array_spec.BoundedArraySpec((), np.int64, 0, NUM_ACTIONS - 1, name="action")

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def game(self) -> str:
        return self._game

    @property
    def options(self) -> dict:
        """The level options passed to ``ProcgenGym3Env`` (without the seed)."""
        return dict(self._options)

    def observation_spec(self) -> array_spec.BoundedArraySpec:
        return self._observation_spec

    def action_spec(self) -> array_spec.BoundedArraySpec:
        return self._action_spec

    def get_info(self) -> dict[str, np.ndarray]:
        return {"success": self._success.copy()}

    def _rand_seed(self) -> int:
        if self._resets == 0:
            return self._seed
        return int(np.random.SeedSequence([self._seed, self._resets]).generate_state(1)[0] % 2**31)

    def _reset(self) -> ts.TimeStep:
        ProcgenGym3Env = _import_procgen()
        if self._env is not None:
            self._env.close()
        self._env = ProcgenGym3Env(num=self._num_envs, rand_seed=self._rand_seed(), **self._options)
        self._resets += 1
        _, observation, _ = self._env.observe()
        self._starting[:] = False
        self._success[:] = False
        return ts.restart(observation["rgb"], batch_size=self._num_envs)

    def _step(self, action: np.ndarray) -> ts.TimeStep:
        action = np.asarray(action).reshape(self._num_envs)
        self._env.act(action.astype(np.int32))
        reward, observation, first = self._env.observe()
        starting = self._starting
        ending = first & ~starting
        success = np.zeros(self._num_envs, dtype=bool)
        if ending.any():
            complete = np.array([info["prev_level_complete"] for info in self._env.get_info()], dtype=bool)
            success = ending & complete
        step_type = np.where(starting, ts.StepType.FIRST, np.where(ending, ts.StepType.LAST, ts.StepType.MID))
        self._starting = ending
        self._success = success
        return ts.TimeStep(
            step_type=step_type.astype(np.int32),
            reward=np.where(starting, 0.0, reward).astype(np.float32),
            discount=np.where(ending, 0.0, 1.0).astype(np.float32),
            observation=observation["rgb"],
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
