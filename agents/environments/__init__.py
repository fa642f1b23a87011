"""Environments for training and evaluating SiT agents with TF-Agents.

``load("procgen:<game>" | "minigrid:<task>" | "gymnasium:<id>", num_envs, seed, transform)``
returns a batched ``PyEnvironment`` with per-environment auto-reset and a
``get_info()["success"]`` flag; see ``loader.load``. The MiniGrid family
follows appendix F.1 of the SiT paper (``minigrid_env``), Procgen uses the
vectorised gym3 backend (``procgen_env``) and ``procgen_scores`` normalises
its returns.

Only ``loader``, ``transforms`` and ``procgen_scores`` are imported here;
MiniGrid and Procgen are imported when a family is first loaded.
"""

from sit_keras.agents.environments.loader import ENVIRONMENT_FAMILIES, load
from sit_keras.agents.environments.procgen_scores import PROCGEN_EASY_SCORE_RANGES, normalized_score
from sit_keras.agents.environments.transforms import TRANSFORMS, TransformedObservation

__all__ = [
    "ENVIRONMENT_FAMILIES",
    "PROCGEN_EASY_SCORE_RANGES",
    "TRANSFORMS",
    "TransformedObservation",
    "load",
    "normalized_score",
]
