"""Atari 2600 games (ALE v5 via Gymnasium) with the standard DQN preprocessing, as TF-Agents PyEnvironments.

The preprocessing of Mnih et al. (2015) with the ALE v5 recommendations of
Machado et al. (2018), written out here (Gymnasium's ``AtariPreprocessing``
restarts the whole game after a life-loss terminal, which is not the
protocol):

- the emulator runs with ``frameskip=1``; one agent step repeats its action
  for ``frame_skip`` (4) frames, sums their rewards and max-pools the last two
  greyscale frames (sprites that flicker between frames stay visible);
- frames are the ALE's greyscale screen resized to 84x84 (``cv2.INTER_AREA``);
  the observation is the last ``frame_stack`` (4) of them on the channel axis,
  newest last: uint8 ``(84, 84, frame_stack)``; a new episode fills the stack
  with its first frame;
- sticky actions: the ALE repeats the previous action instead of the new one
  with probability ``sticky_action_probability`` per frame (0.25 in ALE v5;
  0 reproduces the deterministic older protocol);
- no-op starts: a new game starts with a uniform number in ``[1, noop_max]``
  of NOOP frames (drawn from the environment's seeded generator);
- ``terminal_on_life_loss`` (training only, off for evaluation): losing a life
  ends the episode as a termination (discount 0), and the next episode
  continues the same game from where it is (no reset, no no-ops), as in
  Mnih et al. and Dopamine; only a game over resets the emulator;
- a game lasts at most ``max_episode_frames`` = 108,000 frames (30 minutes at
  60 Hz, counting no-op and skipped frames); reaching it is a truncation (a
  LAST step with discount 1); a game over is a termination (discount 0).

The Atari 100k protocol (Kaiser et al. 2020, used by data-efficient Rainbow
and the SiT paper's Table 3): ``ATARI_100K_AGENT_STEPS`` = 100,000 agent
steps of training, i.e. ``ATARI_100K_FRAMES`` = 400,000 frames at frame skip
4; evaluation runs separate environments (``terminal_on_life_loss=False``,
whole games) and reports the mean undiscounted game return.

``get_info()`` has ``"success"`` (always False: Atari games score points and
have no success criterion), ``"game_over"`` (True on the LAST step of a whole
game, so that life-loss episodes can be summed into game returns) and
``"lives"`` (the ALE's life counter after the step).
"""

from __future__ import annotations

import collections
import difflib

import ale_py
import cv2
import gymnasium
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from sit_keras import quiet

gymnasium.register_envs(ale_py)

ATARI_GAMES = tuple(
    sorted(
        k[len("ALE/") : -len("-v5")] for k in gymnasium.registry if k.startswith("ALE/") and k.endswith("-v5")
    )
)
"""The ALE v5 games registered in Gymnasium (ROMs bundled with ale-py): ``"Pong"``, ``"Breakout"``, ..."""

ATARI_100K_AGENT_STEPS = 100_000
"""Training budget of the Atari 100k benchmark, in agent steps."""

ATARI_100K_FRAMES = 400_000
"""The same budget in emulator frames (frame skip 4)."""

IMAGE_SIZE = 84


def game_id(game: str) -> str:
    """``"Pong"`` (or ``"pong"``, ``"space_invaders"``) -> ``"ALE/Pong-v5"``; ValueError listing the games."""
    canonical = {name.lower(): name for name in ATARI_GAMES}
    name = canonical.get(game.replace("_", "").lower())
    if name is None:
        close = difflib.get_close_matches(game, ATARI_GAMES, n=5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(f"Unknown Atari game {game!r}{hint}; ALE v5 games: {', '.join(ATARI_GAMES)}")
    return f"ALE/{name}-v5"


class AtariEnvironment(py_environment.PyEnvironment):
    """One Atari game with the standard preprocessing, as an unbatched TF-Agents PyEnvironment.

    See the module doc for the protocol.

    Args:
      game: one of ``ATARI_GAMES`` (case and underscores ignored).
      seed: ``reset(seed=seed)`` on the first game only (the ALE's sticky
        actions and the no-op counts); later games continue its random stream.
      frame_skip: emulator frames per agent step.
      frame_stack: frames per observation.
      sticky_action_probability: the ALE's ``repeat_action_probability``.
      terminal_on_life_loss: end the episode (discount 0) at every life lost;
        for training only.
      noop_max: at most this many no-op frames at the start of a game (0: none).
      max_episode_frames: frames per game before truncation.
      full_action_space: the 18 actions instead of the game's minimal set.

    Observation: uint8 ``(84, 84, frame_stack)``; action: int64 scalar.
    """

    def __init__(
        self,
        game: str,
        seed: int | None = None,
        frame_skip: int = 4,
        frame_stack: int = 4,
        sticky_action_probability: float = 0.25,
        terminal_on_life_loss: bool = False,
        noop_max: int = 30,
        max_episode_frames: int = 108_000,
        full_action_space: bool = False,
    ):
        super().__init__(handle_auto_reset=True)
        for key, value, minimum in (
            ("frame_skip", frame_skip, 1),
            ("frame_stack", frame_stack, 1),
            ("noop_max", noop_max, 0),
            ("max_episode_frames", max_episode_frames, 1),
        ):
            if int(value) != value or value < minimum:
                raise ValueError(f"{key} must be an integer >= {minimum}; received {key}={value!r}")
        if not 0.0 <= sticky_action_probability <= 1.0:
            raise ValueError(
                f"sticky_action_probability must be in [0, 1]; received {sticky_action_probability!r}"
            )
        with quiet.filtered_stderr():  # ALE's "A.L.E: ... [Powered by Stella]" banner
            self._env = gymnasium.make(
                game_id(game),
                obs_type="grayscale",
                frameskip=1,
                repeat_action_probability=float(sticky_action_probability),
                full_action_space=bool(full_action_space),
                max_num_frames_per_episode=int(max_episode_frames),
                disable_env_checker=True,
            )
        if noop_max > 0 and self._env.unwrapped.get_action_meanings()[0] != "NOOP":
            raise ValueError(f"{game}: action 0 is not NOOP, so no-op starts are impossible; use noop_max=0")
        self._ale = self._env.unwrapped.ale
        self._seed = seed
        self._frame_skip = int(frame_skip)
        self._frame_stack = int(frame_stack)
        self._terminal_on_life_loss = bool(terminal_on_life_loss)
        self._noop_max = int(noop_max)
        screen_shape = self._env.observation_space.shape
        # The last two raw frames of an agent step; their maximum is the pooled frame.
        self._screens = [np.zeros(screen_shape, np.uint8), np.zeros(screen_shape, np.uint8)]
        self._frames: collections.deque[np.ndarray] = collections.deque(maxlen=self._frame_stack)
        self._game_over = True  # the first reset starts a game
        self._ended_game = False  # the last step ended a whole game (get_info()["game_over"])
        self._lives = 0
        self._num_actions = int(self._env.action_space.n)
        self._observation_spec = array_spec.BoundedArraySpec(
            (IMAGE_SIZE, IMAGE_SIZE, self._frame_stack), np.uint8, 0, 255, name="observation"
        )
        self._action_spec = array_spec.BoundedArraySpec((), np.int64, 0, self._num_actions - 1, name="action")

    @property
    def gym(self) -> gymnasium.Env:
        """The wrapped Gymnasium ALE environment (``frameskip=1``, greyscale)."""
        return self._env

    @property
    def action_meanings(self) -> list[str]:
        return self._env.unwrapped.get_action_meanings()

    def observation_spec(self) -> array_spec.BoundedArraySpec:
        return self._observation_spec

    def action_spec(self) -> array_spec.BoundedArraySpec:
        return self._action_spec

    def get_info(self) -> dict[str, np.ndarray]:
        return {
            "success": np.asarray(False),
            "game_over": np.asarray(self._ended_game),
            "lives": np.asarray(self._lives, dtype=np.int64),
        }

    def seed(self, seed: int) -> int:
        """Seeds the next game, which starts at the next reset."""
        self._seed = seed
        self._game_over = True
        return seed

    def _frame(self) -> np.ndarray:
        pooled = np.maximum(self._screens[0], self._screens[1])
        return cv2.resize(pooled, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_AREA)

    def _stacked(self, frame: np.ndarray) -> np.ndarray:
        self._frames.append(frame)
        while len(self._frames) < self._frame_stack:
            self._frames.append(frame)
        return np.stack(self._frames, axis=-1)

    def _reset(self) -> ts.TimeStep:
        if self._game_over:
            screen, _ = self._env.reset(seed=self._seed)
            self._seed = None
            noops = (
                int(self._env.unwrapped.np_random.integers(1, self._noop_max + 1)) if self._noop_max else 0
            )
            for _ in range(noops):
                screen, _, terminated, truncated, _ = self._env.step(0)
                if terminated or truncated:
                    screen, _ = self._env.reset()
            self._screens[0][...] = screen
            self._screens[1][...] = screen
            self._game_over = False
        # else: a life-loss episode ended; the game goes on from its current frame.
        self._ended_game = False
        self._lives = int(self._ale.lives())
        self._frames.clear()
        return ts.restart(self._stacked(self._frame()))

    def _step(self, action: np.ndarray) -> ts.TimeStep:
        action = int(action)
        reward = 0.0
        terminated = truncated = life_lost = False
        for t in range(self._frame_skip):
            screen, frame_reward, terminated, truncated, _ = self._env.step(action)
            reward += float(frame_reward)
            lives = int(self._ale.lives())
            life_lost = self._terminal_on_life_loss and lives < self._lives
            self._lives = lives
            ending = terminated or truncated or life_lost
            if t >= self._frame_skip - 2 or ending:
                self._screens[0], self._screens[1] = self._screens[1], self._screens[0]
                self._screens[1][...] = screen
            if ending:
                break
        self._game_over = self._ended_game = terminated or truncated
        observation = self._stacked(self._frame())
        reward = np.asarray(reward, np.float32)
        if terminated or life_lost:
            return ts.termination(observation, reward)
        if truncated:
            return ts.truncation(observation, reward, discount=np.float32(1.0))
        return ts.transition(observation, reward, discount=np.float32(1.0))

    def render(self, mode: str = "rgb_array") -> np.ndarray:
        """The current RGB screen (210x160)."""
        return self._ale.getScreenRGB()

    def close(self) -> None:
        self._env.close()
