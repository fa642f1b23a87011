"""Min-max normalised Procgen scores, as reported in the SiT paper (appendix F.2, Table 1).

``(R - R_min) / (R_max - R_min)`` with the easy-mode constants of Cobbe et
al. (2020), "Leveraging Procedural Generation to Benchmark Reinforcement
Learning", arXiv:1912.01588, Appendix C "Normalization Constants" (the table
is also reproduced in openai/procgen issue #79). R_min is the score of a
policy trained with masked-out observations; R_max is the maximal achievable
score (for StarPilot and FruitBot, the score of a very long PPO run).
"""

from __future__ import annotations

import numpy as np

PROCGEN_EASY_SCORE_RANGES: dict[str, tuple[float, float]] = {
    "bigfish": (1.0, 40.0),
    "bossfight": (0.5, 13.0),
    "caveflyer": (3.5, 12.0),
    "chaser": (0.5, 13.0),
    "climber": (2.0, 12.6),
    "coinrun": (5.0, 10.0),
    "dodgeball": (1.5, 19.0),
    "fruitbot": (-1.5, 32.4),
    "heist": (3.5, 10.0),
    "jumper": (3.0, 10.0),
    "leaper": (3.0, 10.0),
    "maze": (5.0, 10.0),
    "miner": (1.5, 13.0),
    "ninja": (3.5, 10.0),
    "plunder": (4.5, 30.0),
    "starpilot": (2.5, 64.0),
}
"""``game -> (R_min, R_max)`` for the easy distribution mode, all 16 games."""


def normalized_score(game: str, episode_return: float | np.ndarray) -> float | np.ndarray:
    """``(R - R_min) / (R_max - R_min)`` of an episode return (or an array of them) in ``game``.

    >>> normalized_score("coinrun", 7.5)
    0.5
    """
    if game not in PROCGEN_EASY_SCORE_RANGES:
        raise ValueError(
            f"Unknown Procgen game {game!r}; valid games: {', '.join(sorted(PROCGEN_EASY_SCORE_RANGES))}"
        )
    r_min, r_max = PROCGEN_EASY_SCORE_RANGES[game]
    score = (np.asarray(episode_return, dtype=np.float64) - r_min) / (r_max - r_min)
    return float(score) if score.ndim == 0 else score
