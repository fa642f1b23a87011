"""Token graphs that keep the quarter turn, for the native ops' spectral mixing (``rotation_spectra.h``)."""

from __future__ import annotations

import numpy as np

from sit_keras.graphs import grid_permutation, quarter_turn_orbits


def invariant_graphs(rng: np.random.Generator, channels: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """``(channels, T, T)`` random graphs over a ``side x side`` grid after a class token, each entry shared
    over its orbit of token pairs under the quarter turn (as a rotation-symmetric layer's are), and the
    quarter turn's orbits of tokens."""
    t = side * side + 1
    turn = np.concatenate([[0], 1 + grid_permutation((side, side), "rot90")])
    pair = np.arange(t * t).reshape(t, t)
    shared = pair.copy()
    for _ in range(3):  # each pair reads the entry of the smallest flat index in its orbit
        pair = pair[np.ix_(turn, turn)]
        shared = np.minimum(shared, pair)
    orbits = quarter_turn_orbits((side, side), shared, 1)
    assert orbits.shape == ((side * side) // 4, 4)
    return rng.normal(size=(channels, t * t))[:, shared], orbits
