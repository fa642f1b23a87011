"""MiniGrid as in the SiT paper, appendix F.1: fully observable 14x14 RGB, four relative moves.

Three changes to MiniGrid (LavaCrossing, Empty, ...) make a 90-degree rotation
of the map an exact symmetry of the task:

- Observation: the fully observable grid (no highlight) rendered at
  ``TILE_SIZE`` pixels per cell and downscaled to 14x14 with
  ``cv2.INTER_AREA``. MiniGrid's own tiles are not rotation symmetric (grid
  lines on the top and left edges only, horizontal lava waves, and agent
  triangles rasterised separately for each heading: rotating the state
  changes that rendering by up to 24 of 255 after the downscale), so every
  cell tile is replaced by the average of its four rotations and the agent's
  four tiles are exact quarter turns of the east-facing one. The rendering of
  a rotated state is then exactly ``np.rot90`` of the rendering.
- Actions: 0 forward, 1 backward, 2 left, 3 right, relative to the agent's
  heading; a backward or sideways move first turns the agent to face that
  way, then steps forward (one MiniGrid step). The same relative action in a
  rotated state gives the rotated next state.
- Goal: ``"default"``, ``"top_right"``, ``"bottom_left"`` or ``"random"`` (Table 4).

Rewards and termination are MiniGrid's: the goal ends the episode with
``1 - 0.9 * step_count / max_steps``, lava ends it with 0, and ``max_steps``
truncates it.

Resolution: the outer ring of every level is wall, so it is left out of the
rendering (``crop_border``): the 7x7 inner cells of a 9x9 LavaCrossing then
get exactly 2x2 pixels each, and the agent's heading shows as which half of
its 2x2 block is red (the four headings differ by at least 62 of 255 in
every cell). With the ring, 9 cells share 14 pixels and in the four inner
corners two headings differ by 1 of 255 only. ``TILE_SIZE = 14`` makes the
full rendering ``14 * n`` pixels for ``n`` cells, so the downscale averages
whole ``n x n`` blocks: with an integer factor ``cv2.INTER_AREA`` commutes
exactly with ``np.rot90`` (non-integer factors give off-by-one pixels). The
tile size does not change which headings are visible; the cells per pixel do.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Iterable
from typing import Any

import cv2
import gymnasium
import numpy as np
from minigrid.core.grid import Grid
from minigrid.core.world_object import Goal, WorldObj
from minigrid.envs import CrossingEnv, EmptyEnv, LavaGapEnv
from minigrid.minigrid_env import MiniGridEnv

OBSERVATION_SIZE = 14
"""Side of the observation in pixels (appendix F.1)."""

TILE_SIZE = 14
"""Pixels per grid cell before the downscale (see the module docstring)."""

WALL_VALUE = 100 / 255
"""MiniGrid's wall grey (100 on every channel) on the ``[0, 1]`` scale: what lies beyond the edge of an
observation whose wall ring is cropped (``SiTEncoder(border_value=WALL_VALUE)``)."""

ACTIONS = ("forward", "backward", "left", "right")
"""The relative moves, in action order."""

GOALS = ("default", "top_right", "bottom_left", "random")
"""Goal variants (SiT paper, Table 4)."""

# Quarter turns in MiniGrid's direction order (0 east, 1 south, 2 west, 3 north, i.e. clockwise on the
# image) taken before stepping forward: forward, backward, left, right.
_TURNS = (0, 2, 3, 1)
_AGENT_COLOR = np.array([255.0, 0.0, 0.0])
_MAX_LEVEL_TRIES = 1000


def minigrid_ids() -> tuple[str, ...]:
    """The registered ``MiniGrid-*`` Gymnasium ids."""
    return tuple(sorted(env_id for env_id in gymnasium.registry if env_id.startswith("MiniGrid-")))


def task_id(task: str) -> str:
    """The Gymnasium id of a task: ``"LavaCrossingS9N1"`` -> ``"MiniGrid-LavaCrossingS9N1-v0"``.

    Raises:
      ValueError: if no such MiniGrid id is registered (the message lists them).
    """
    env_id = task.strip()
    if not env_id.startswith("MiniGrid-"):
        env_id = "MiniGrid-" + env_id
    if not re.search(r"-v\d+$", env_id):
        env_id += "-v0"
    valid = minigrid_ids()
    if env_id not in valid:
        close = difflib.get_close_matches(env_id, valid, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"Unknown MiniGrid task {task!r}{hint}; valid tasks: {', '.join(valid)}")
    return env_id


# --- rendering ------------------------------------------------------------------------------------


def _rotation_average(tile: np.ndarray) -> np.ndarray:
    """The mean of the four quarter turns of a uint8 tile, exactly invariant (integer sums)."""
    tile = tile.astype(np.int64)
    total = sum(np.rot90(tile, k) for k in range(4))
    return ((total + 2) // 4).astype(np.uint8)


class SymmetricRenderer:
    """Renders a MiniGrid state to a small RGB image whose rotations are exact.

    ``render(rot(state)) == np.rot90(render(state))`` for every quarter turn
    ``rot`` of the grid (``rotate_state``): each object's tile is the average of
    MiniGrid's tile over its four rotations, and the agent's tile for heading
    ``d`` is the east-facing tile turned ``d`` quarter turns clockwise. Tiles are
    cached by object encoding and heading.

    Args:
      tile_size: pixels per cell of the full-resolution rendering.
      size: side of the downscaled image.
      crop_border: leave out the outer ring of cells (walls in every MiniGrid level).
    """

    def __init__(self, tile_size: int = TILE_SIZE, size: int = OBSERVATION_SIZE, crop_border: bool = True):
        self.tile_size = tile_size
        self.size = size
        self.crop_border = crop_border
        self._tiles: dict[tuple[Any, int | None], np.ndarray] = {}
        self._coverage = self._agent_coverage()

    def _agent_coverage(self) -> np.ndarray:
        # The fraction of each pixel that MiniGrid's east-facing agent triangle covers, read off MiniGrid's
        # own (supersampled) rendering: red 255 drawn over a black floor.
        floor = Grid.render_tile(None, agent_dir=None, tile_size=self.tile_size)[..., 0]
        agent = Grid.render_tile(None, agent_dir=0, tile_size=self.tile_size)[..., 0]
        return np.clip((agent - floor) / (255.0 - floor), 0.0, 1.0)[..., None]

    def tile(self, obj: WorldObj | None, agent_dir: int | None = None) -> np.ndarray:
        """The ``(tile_size, tile_size, 3)`` uint8 tile of a cell, with the agent on it if ``agent_dir``."""
        key = (obj.encode() if obj is not None else None, agent_dir)
        cached = self._tiles.get(key)
        if cached is not None:
            return cached
        if agent_dir is None:
            raw = Grid.render_tile(obj, agent_dir=None, tile_size=self.tile_size)
            tile = _rotation_average(np.round(raw).astype(np.uint8))
        else:
            base = self.tile(obj).astype(np.float64)
            east = np.round((1.0 - self._coverage) * base + self._coverage * _AGENT_COLOR).astype(np.uint8)
            # Headings turn clockwise on the image (east, south, west, north); np.rot90 with k < 0 too.
            tile = np.ascontiguousarray(np.rot90(east, -agent_dir))
        self._tiles[key] = tile
        return tile

    def full_resolution(self, grid: Grid, agent_pos: Iterable[int], agent_dir: int) -> np.ndarray:
        """The image before the downscale: ``tile_size`` pixels per cell (inner cells if ``crop_border``)."""
        x0, y0 = (int(v) for v in agent_pos)
        tiles = [self.tile(obj) for obj in grid.grid]  # row-major: cell (i, j) at j * width + i
        tiles[y0 * grid.width + x0] = self.tile(grid.get(x0, y0), int(agent_dir))
        t = self.tile_size
        image = np.stack(tiles).reshape(grid.height, grid.width, t, t, 3)
        if self.crop_border:
            image = image[1:-1, 1:-1]
        rows, cols = image.shape[:2]
        return image.transpose(0, 2, 1, 3, 4).reshape(rows * t, cols * t, 3)

    def render(self, grid: Grid, agent_pos: Iterable[int], agent_dir: int) -> np.ndarray:
        """The ``(size, size, 3)`` uint8 observation."""
        image = self.full_resolution(grid, agent_pos, agent_dir)
        return cv2.resize(image, (self.size, self.size), interpolation=cv2.INTER_AREA)


def rotate_state(
    grid: Grid, agent_pos: Iterable[int], agent_dir: int, k: int = 1
) -> tuple[Grid, tuple[int, int], int]:
    """Turns a MiniGrid state ``k`` quarter turns counter-clockwise on the image (like ``np.rot90``).

    Cell ``(x, y)`` of a grid of width ``W`` moves to ``(y, W - 1 - x)``; the
    heading turns with it (east becomes north). Returns the new grid (sharing
    the cell objects), agent position and heading.
    """
    x, y = (int(v) for v in agent_pos)
    for _ in range(k % 4):
        x, y = y, grid.width - 1 - x
        grid = grid.rotate_left()
        agent_dir = (agent_dir - 1) % 4
    return grid, (x, y), agent_dir


# --- goal variants --------------------------------------------------------------------------------


def _passable(obj: WorldObj | None) -> bool:
    return obj is None or (obj.can_overlap() and obj.type != "lava")


def reachable_cells(grid: Grid, start: Iterable[int]) -> set[tuple[int, int]]:
    """Cells the agent can walk to from ``start`` without stepping on lava or through walls (BFS)."""
    start = tuple(int(v) for v in start)
    seen = {start}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if 0 <= nx < grid.width and 0 <= ny < grid.height and (nx, ny) not in seen:
                if _passable(grid.get(nx, ny)):
                    seen.add((nx, ny))
                    queue.append((nx, ny))
    return seen


def _goal_cells(grid: Grid) -> list[tuple[int, int]]:
    return [(i, j) for j in range(grid.height) for i in range(grid.width) if isinstance(grid.get(i, j), Goal)]


class SiTMiniGrid(gymnasium.Wrapper):
    """A MiniGrid task with the observation, actions and goals of SiT appendix F.1 (see the module doc).

    Observation: ``Box(0, 255, (14, 14, 3), uint8)``; actions: ``Discrete(4)``
    (``ACTIONS``). ``info["is_success"]`` is True on the step that reaches the
    goal.

    Goals other than ``"default"`` (LavaCrossing/SimpleCrossing, LavaGap and
    Empty tasks only) are moved after MiniGrid generates the level: ``"top_right"``
    and ``"bottom_left"`` to that inner corner, ``"random"`` to a uniformly
    drawn empty cell that the agent can reach without crossing lava. A level
    whose corner is not free, or not reachable (with several rivers the
    openings need not lead to every room), is discarded and the next level of
    the same random stream is generated.

    Args:
      env_id: a registered MiniGrid id, e.g. ``"MiniGrid-LavaCrossingS9N1-v0"``.
      goal: one of ``GOALS``.
      crop_border: leave the outer wall ring out of the observation (see the module doc).
      **kwargs: passed to ``gymnasium.make`` (e.g. ``max_steps``).
    """

    def __init__(self, env_id: str, goal: str = "default", crop_border: bool = True, **kwargs: Any):
        base = gymnasium.make(env_id, disable_env_checker=True, **kwargs).unwrapped
        if not isinstance(base, MiniGridEnv):
            raise ValueError(f"{env_id!r} is not a MiniGrid environment")
        if goal not in GOALS:
            raise ValueError(f"Unknown goal {goal!r}; valid goals: {', '.join(GOALS)}")
        if goal != "default" and not isinstance(base, (CrossingEnv, EmptyEnv, LavaGapEnv)):
            raise ValueError(
                f"goal={goal!r} is only defined for the LavaCrossing / SimpleCrossing, LavaGap and Empty "
                f"tasks; {env_id!r} only has goal='default'"
            )
        super().__init__(base)
        self.goal = goal
        self.env_id = env_id
        self.renderer = SymmetricRenderer(crop_border=crop_border)
        self.observation_space = gymnasium.spaces.Box(
            0, 255, (OBSERVATION_SIZE, OBSERVATION_SIZE, 3), dtype=np.uint8
        )
        self.action_space = gymnasium.spaces.Discrete(len(ACTIONS))

    @property
    def minigrid(self) -> MiniGridEnv:
        """The underlying MiniGrid environment (its grid, agent position and heading are the state)."""
        return self.env

    def observation(self) -> np.ndarray:
        """The 14x14 RGB observation of the current state."""
        env = self.minigrid
        return self.renderer.render(env.grid, env.agent_pos, env.agent_dir)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        env = self.minigrid
        for attempt in range(_MAX_LEVEL_TRIES):
            env.reset(seed=seed if attempt == 0 else None, options=options)
            if self._place_goal():
                self._check_border()
                return self.observation(), {"is_success": False}
        raise RuntimeError(f"No level with a reachable {self.goal!r} goal in {_MAX_LEVEL_TRIES} tries")

    def _check_border(self) -> None:
        # The rendering leaves the outer ring out; it must hold nothing but walls.
        grid = self.minigrid.grid
        ring = [(i, j) for j in (0, grid.height - 1) for i in range(grid.width)]
        ring += [(i, j) for i in (0, grid.width - 1) for j in range(1, grid.height - 1)]
        if self.renderer.crop_border and any(getattr(grid.get(*c), "type", None) != "wall" for c in ring):
            raise ValueError(
                f"{self.env_id}: the outer ring of the level is not all wall; use crop_border=False"
            )

    def _place_goal(self) -> bool:
        """Moves the goal for the variant; False if this level cannot have it."""
        if self.goal == "default":
            return True
        env = self.minigrid
        grid = env.grid
        for i, j in _goal_cells(grid):
            grid.set(i, j, None)
        agent = tuple(int(v) for v in env.agent_pos)
        reachable = reachable_cells(grid, agent)
        if self.goal == "random":
            candidates = sorted(c for c in reachable if c != agent and grid.get(*c) is None)
            if not candidates:
                return False
            target = candidates[int(env.np_random.integers(len(candidates)))]
        else:
            target = (grid.width - 2, 1) if self.goal == "top_right" else (1, grid.height - 2)
            if target == agent or grid.get(*target) is not None or target not in reachable:
                return False
        env.put_obj(Goal(), *target)
        if isinstance(env, CrossingEnv):
            env.goal_position = target
        return True

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not 0 <= action < len(ACTIONS):
            raise ValueError(
                f"Expected an action in [0, {len(ACTIONS) - 1}] ({', '.join(ACTIONS)}); got {action}"
            )
        env = self.minigrid
        env.agent_dir = (env.agent_dir + _TURNS[action]) % 4
        _, reward, terminated, truncated, _ = env.step(env.actions.forward)
        success = bool(terminated) and isinstance(env.grid.get(*env.agent_pos), Goal)
        return self.observation(), float(reward), bool(terminated), bool(truncated), {"is_success": success}
