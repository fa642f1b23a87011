"""``load(name, ...)``: every environment family as one batched TF-Agents PyEnvironment."""

from __future__ import annotations

import difflib
from typing import Any

from tf_agents.environments import py_environment

from sit_keras.agents.environments import transforms

ENVIRONMENT_FAMILIES = ("procgen", "minigrid", "gymnasium")
"""Prefixes of environment names: ``"<family>:<game, task or id>"``."""


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

    Args:
      name: ``"<family>:<what>"``, family in ``ENVIRONMENT_FAMILIES``.
      num_envs: batch size, at least 1.
      seed: sub-environment ``i`` is seeded with ``seed + i`` on its first
        reset (Procgen: the one ``rand_seed`` of the vectorised backend).
      transform: ``None``, one of ``transforms.TRANSFORMS`` or
        ``"shuffle_patches:<p>"`` (permutation drawn from ``seed``), applied
        to every image observation.
      **kwargs: family-specific options, see above.

    Raises:
      ValueError: unknown family, game, task or id (the message lists the
        valid ones), ``num_envs < 1``, or a transform of a non-image
        observation.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1; received num_envs={num_envs}")
    family, sep, what = name.partition(":")
    if not sep or family not in ENVIRONMENT_FAMILIES:
        raise ValueError(
            f"Unknown environment {name!r}: expected '<family>:<name>' with a family in "
            f"{', '.join(ENVIRONMENT_FAMILIES)} (e.g. 'procgen:coinrun', 'minigrid:LavaCrossingS9N1', "
            f"'gymnasium:CartPole-v1')"
        )
    if family == "procgen":
        env = _load_procgen(what, num_envs, seed, **kwargs)
    elif family == "minigrid":
        env = _load_minigrid(what, num_envs, seed, **kwargs)
    else:
        env = _load_gymnasium(what, num_envs, seed, **kwargs)
    if transform is not None:
        env = transforms.TransformedObservation(env, transform, seed=seed)
    return env


def _load_procgen(game: str, num_envs: int, seed: int, **kwargs: Any) -> py_environment.PyEnvironment:
    from sit_keras.agents.environments.procgen_env import ProcgenEnvironment

    return ProcgenEnvironment(game, num_envs=num_envs, seed=seed, **kwargs)


def _load_minigrid(tasks: str, num_envs: int, seed: int, **kwargs: Any) -> py_environment.PyEnvironment:
    from sit_keras.agents.environments import gymnasium_env, minigrid_env

    env_ids = [minigrid_env.task_id(task) for task in tasks.split(",")]
    envs = [
        gymnasium_env.GymnasiumEnvironment(
            minigrid_env.SiTMiniGrid(env_ids[i % len(env_ids)], **kwargs), seed=seed + i
        )
        for i in range(num_envs)
    ]
    return gymnasium_env.batch_environments(envs)


def _load_gymnasium(env_id: str, num_envs: int, seed: int, **kwargs: Any) -> py_environment.PyEnvironment:
    import gymnasium

    from sit_keras.agents.environments import gymnasium_env

    if env_id not in gymnasium.registry:
        valid = sorted(gymnasium.registry)
        close = difflib.get_close_matches(env_id, valid, n=5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(f"Unknown Gymnasium id {env_id!r}{hint}; registered ids: {', '.join(valid)}")
    envs = [
        gymnasium_env.GymnasiumEnvironment(gymnasium.make(env_id, **kwargs), seed=seed + i)
        for i in range(num_envs)
    ]
    return gymnasium_env.batch_environments(envs)
