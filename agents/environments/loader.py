"""``load(name, ...)``: every environment family as one batched TF-Agents PyEnvironment."""

from __future__ import annotations

import difflib
from typing import Any

from tf_agents.environments import py_environment

from sit_keras.agents.environments import transforms

ENVIRONMENT_FAMILIES = ("procgen", "minigrid", "gymnasium", "dmc", "atari")
"""Prefixes of environment names: ``"<family>:<game, task or id>"``."""

SENSOR_KEYWORDS = ("sensor_permutation", "noise_sensors", "noise_std", "duplicate_sensors")
"""The ``load`` keywords of ``sensor_permutation.SensorPermutation`` (vector observations only)."""


def load(
    name: str,
    num_envs: int = 1,
    seed: int = 0,
    transform: str | None = None,
    **kwargs: Any,
) -> py_environment.PyEnvironment:
    """A batched PyEnvironment (``batch_size == num_envs``) for ``name``.

    Every sub-environment resets on its own with TF-Agents semantics: after
    its LAST step, the next ``step()`` ignores its action and returns a FIRST
    step (reward 0, discount 1). ``get_info()`` returns arrays of shape
    ``(num_envs,)`` for the last step, among them ``"success"``.

    Names:

    - ``"procgen:<game>"``: one of the 16 Procgen games, 64x64 RGB, 15
      actions; keywords ``num_levels`` (200), ``start_level`` (0),
      ``distribution_mode`` ("easy"), ``split`` ("train" or "test"). See
      ``procgen_env`` for its one-step offset after each episode.
    - ``"minigrid:<task>"``: a MiniGrid task as in SiT appendix F.1 (14x14
      RGB, 4 relative moves), e.g. ``"LavaCrossingS9N1"`` (``MiniGrid-`` and
      ``-v0`` are added); ``"minigrid:A,B"`` runs task ``i % 2`` in
      sub-environment ``i``. Keywords: ``goal`` (``minigrid_env.GOALS``),
      ``crop_border``, others go to ``gymnasium.make``.
    - ``"gymnasium:<id>"``: a registered Gymnasium id with a Box observation
      and a Discrete or Box action space; keywords go to ``gymnasium.make``.
      This project registers ``"CartPoleSwingUpHarder-v0"``, the
      AttentionNeuron paper's cart-pole (``cartpole_swingup``).
    - ``"dmc:<domain>-<task>"``: any task of ``dm_control.suite``
      (``dmc_env.DMC_TASKS``, e.g. ``"dmc:walker-walk"``); actions float32 in
      ``[-1, 1]``; episodes of 1000 environment steps ending in a truncation
      (discount 1); ``success`` always False. Keywords (``dmc_env.DMCEnvironment``):
      ``pixels`` (False: float32 state vector, the suite's observations
      flattened in order; True: uint8 ``(image_size, image_size,
      3 * frame_stack)`` renders, ``MUJOCO_GL=egl`` unless set),
      ``image_size`` (84), ``frame_stack`` (3), ``action_repeat`` (None:
      1 for states; for pixels cartpole 8, finger and walker 2, others 4 as in
      SAC-AE / Hansen & Wang), ``camera_id`` (None: 0, quadruped 2),
      ``episode_length`` (1000 environment steps).
    - ``"atari:<Game>"``: an ALE v5 game (``atari_env.ATARI_GAMES``, e.g.
      ``"atari:Pong"``, case and underscores ignored) with the DQN
      preprocessing: uint8 ``(84, 84, frame_stack)`` greyscale frames, the
      last two of each skip max-pooled; int64 actions; ``success`` always
      False, plus infos ``game_over`` and ``lives``. Keywords
      (``atari_env.AtariEnvironment``): ``frame_skip`` (4), ``frame_stack``
      (4), ``sticky_action_probability`` (0.25), ``terminal_on_life_loss``
      (False; True for training only: a life lost is a termination and the
      game continues in the next episode), ``noop_max`` (30),
      ``max_episode_frames`` (108_000, a truncation), ``full_action_space``
      (False). Atari 100k = 100k agent steps = 400k frames.

    Sensor keywords, for every family with a vector observation (``dmc``
    states, ``gymnasium``; AttentionNeuron Tables 2 and 6), applied to each
    sub-environment by ``sensor_permutation.SensorPermutation`` (seeded with
    ``seed + i``):

    - ``sensor_permutation``: ``None`` (default), ``"once"`` (a new random
      order of the channels every episode) or ``"every:<t>"`` (also reshuffled
      every ``t`` steps); ``get_info()["sensor_permutation"]`` (shape
      ``(num_envs, M)``) is the order of the last observation:
      ``observation[j] = extended[permutation[j]]``;
    - ``duplicate_sensors`` (False): append a copy of the ``N`` readings;
    - ``noise_sensors`` (0): append this many channels of Gaussian noise with
      standard deviation ``noise_std`` (0.1, as in the paper).

    Args:
      name: ``"<family>:<what>"``, family in ``ENVIRONMENT_FAMILIES``.
      num_envs: batch size, at least 1.
      seed: sub-environment ``i`` is seeded with ``seed + i`` on its first
        reset (Procgen: the one ``rand_seed`` of the vectorised backend;
        DMC: the task's random state).
      transform: ``None``, one of ``transforms.TRANSFORMS`` or
        ``"shuffle_patches:<p>"`` (permutation drawn from ``seed``), applied
        to every image observation.
      **kwargs: family-specific options and sensor keywords, see above.

    Raises:
      ValueError: unknown family, game, task or id (the message lists the
        valid ones), ``num_envs < 1``, a transform of a non-image
        observation, or sensor keywords for a non-vector observation.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1; received num_envs={num_envs}")
    family, sep, what = name.partition(":")
    if not sep or family not in ENVIRONMENT_FAMILIES:
        raise ValueError(
            f"Unknown environment {name!r}: expected '<family>:<name>' with a family in "
            f"{', '.join(ENVIRONMENT_FAMILIES)} (e.g. 'procgen:coinrun', 'minigrid:LavaCrossingS9N1', "
            f"'gymnasium:CartPole-v1', 'dmc:walker-walk', 'atari:Pong')"
        )
    sensor_kwargs = {key: kwargs.pop(key) for key in SENSOR_KEYWORDS if key in kwargs}
    if family == "procgen":
        if sensor_kwargs:
            raise ValueError(
                f"Sensor keywords {sorted(sensor_kwargs)} need a vector observation; {name} has images"
            )
        env = _load_procgen(what, num_envs, seed, **kwargs)
    else:
        load_family = {
            "minigrid": _minigrid_envs,
            "gymnasium": _gymnasium_envs,
            "dmc": _dmc_envs,
            "atari": _atari_envs,
        }[family]
        envs = load_family(what, num_envs, seed, **kwargs)
        if sensor_kwargs:
            from sit_keras.agents.environments.sensor_permutation import SensorPermutation

            envs = [SensorPermutation(env, seed=seed + i, **sensor_kwargs) for i, env in enumerate(envs)]
        from sit_keras.agents.environments import gymnasium_env

        env = gymnasium_env.batch_environments(envs)
    if transform is not None:
        env = transforms.TransformedObservation(env, transform, seed=seed)
    return env


def _load_procgen(game: str, num_envs: int, seed: int, **kwargs: Any) -> py_environment.PyEnvironment:
    from sit_keras.agents.environments.procgen_env import ProcgenEnvironment

    return ProcgenEnvironment(game, num_envs=num_envs, seed=seed, **kwargs)


def minigrid_level_streams(tasks: str, num_envs: int, seed: int) -> list[tuple[str, int]]:
    """``(task id, seed)`` of each sub-environment of ``load("minigrid:<tasks>", num_envs, seed)``.

    Sub-environment ``i`` runs task ``i % len(tasks)`` and draws all its levels
    from one generator seeded ``seed + i`` at its first reset, so two runs whose
    ``seed`` differs by an even number ``d < num_envs`` on two tasks share
    ``num_envs - d`` of these streams, and runs whose seeds differ by an odd
    number share none (docs/lavacrossing.md, "What the seeds share").
    """
    from sit_keras.agents.environments import minigrid_env

    env_ids = [minigrid_env.task_id(task) for task in tasks.split(",")]
    return [(env_ids[i % len(env_ids)], seed + i) for i in range(num_envs)]


def _minigrid_envs(tasks: str, num_envs: int, seed: int, **kwargs: Any) -> list[py_environment.PyEnvironment]:
    from sit_keras.agents.environments import gymnasium_env, minigrid_env

    return [
        gymnasium_env.GymnasiumEnvironment(minigrid_env.SiTMiniGrid(env_id, **kwargs), seed=env_seed)
        for env_id, env_seed in minigrid_level_streams(tasks, num_envs, seed)
    ]


def _gymnasium_envs(
    env_id: str, num_envs: int, seed: int, **kwargs: Any
) -> list[py_environment.PyEnvironment]:
    import gymnasium

    from sit_keras.agents.environments import cartpole_swingup, gymnasium_env

    cartpole_swingup.register()  # this project's ids (the AttentionNeuron paper's cart-pole)
    if env_id not in gymnasium.registry:
        valid = sorted(gymnasium.registry)
        close = difflib.get_close_matches(env_id, valid, n=5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(f"Unknown Gymnasium id {env_id!r}{hint}; registered ids: {', '.join(valid)}")
    try:
        return [
            gymnasium_env.GymnasiumEnvironment(gymnasium.make(env_id, **kwargs), seed=seed + i)
            for i in range(num_envs)
        ]
    except ModuleNotFoundError as error:  # an optional package of one of this project's ids
        if env_id == cartpole_swingup.ENV_ID:
            raise ValueError(str(error)) from error
        raise


def _dmc_envs(task: str, num_envs: int, seed: int, **kwargs: Any) -> list[py_environment.PyEnvironment]:
    from sit_keras.agents.environments import dmc_env

    dmc_env.parse_task(task)  # the ValueError for an unknown task before anything is built
    return [dmc_env.DMCEnvironment(task, seed=seed + i, **kwargs) for i in range(num_envs)]


def _atari_envs(game: str, num_envs: int, seed: int, **kwargs: Any) -> list[py_environment.PyEnvironment]:
    from sit_keras.agents.environments import atari_env

    atari_env.game_id(game)  # the ValueError for an unknown game before anything is built
    return [atari_env.AtariEnvironment(game, seed=seed + i, **kwargs) for i in range(num_envs)]
