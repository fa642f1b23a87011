"""Environments for training and evaluating SiT agents with TF-Agents.

``load("procgen:<game>" | "minigrid:<task>" | "gymnasium:<id>" | "dmc:<domain>-<task>" | "atari:<Game>",
num_envs, seed, transform, **kwargs)`` returns a batched ``PyEnvironment`` with per-environment
auto-reset and a ``get_info()["success"]`` flag; see ``loader.load``. The MiniGrid family
follows appendix F.1 of the SiT paper (``minigrid_env``), Procgen uses the
vectorised gym3 backend (``procgen_env``) and ``procgen_scores`` normalises
its returns. ``dmc_env`` serves the DeepMind Control Suite from states or
pixels (SiT appendix F.3), ``atari_env`` the ALE v5 games with the DQN
preprocessing and the Atari 100k protocol (F.4), and ``sensor_permutation``
shuffles, duplicates and adds noise to vector observations (AttentionNeuron
Tables 2 and 6).

Only ``loader``, ``transforms``, ``procgen_scores`` and ``sensor_permutation``
are imported here; MiniGrid, Procgen, dm_control and the ALE are imported
when a family is first loaded.
"""

from sit_keras.agents.environments.loader import ENVIRONMENT_FAMILIES, SENSOR_KEYWORDS, load
from sit_keras.agents.environments.procgen_scores import PROCGEN_EASY_SCORE_RANGES, normalized_score
from sit_keras.agents.environments.sensor_permutation import NOISE_STD, SensorPermutation
from sit_keras.agents.environments.transforms import TRANSFORMS, TransformedObservation

__all__ = [
    "ENVIRONMENT_FAMILIES",
    "NOISE_STD",
    "PROCGEN_EASY_SCORE_RANGES",
    "SENSOR_KEYWORDS",
    "TRANSFORMS",
    "SensorPermutation",
    "TransformedObservation",
    "load",
    "normalized_score",
]
