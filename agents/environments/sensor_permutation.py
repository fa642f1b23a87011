"""Shuffled, duplicated and noisy sensor readings: the test set-ups of AttentionNeuron (Tang & Ha 2021).

A vector observation ``o`` (``N`` sensor readings) becomes the *extended
reading* (AttentionNeuron Table 2)

- ``[o, o]`` with ``duplicate_sensors=True`` ("10 obs": 5 -> 10 channels);
- followed by ``noise_sensors`` extra channels of white noise
  ``N(0, noise_std^2)``, ``noise_std`` = 0.1 as in the paper ("5 obs + 5
  noise"), drawn afresh at every step;

and then the agent sees the extended reading in a shuffled order:
``observation[j] = extended[permutation[j]]`` (the same convention as
``transforms.shuffle_patches``). The permutation covers every channel,
duplicates and noise included, and is

- ``sensor_permutation=None``: the identity (unshuffled);
- ``"once"``: drawn at the start of every episode, fixed during it
  (Table 2, "shuffled");
- ``"every:<t>"``: drawn at the start of every episode and again every ``t``
  steps: the observation at step ``s`` of an episode (``s = 0`` is the FIRST
  step) uses the episode's permutation number ``s // t`` (Table 6, "reshuffle
  every t steps").

Randomness: ``SeedSequence(seed)`` spawns two independent generators, one
for the permutations and one for the noise, so that a shuffled and an
unshuffled environment with the same seed and the same underlying states
see exactly the same extended readings, the former permuted. The same seed
gives the same permutation stream.

The current permutation (indices into the extended reading, shape ``(M,)``)
is ``SensorPermutation.permutation`` and ``get_info()["sensor_permutation"]``
(``(num_envs, M)`` once batched); it is the one applied to the observation
of the last time step.
"""

from __future__ import annotations

import numpy as np
from tf_agents.environments import py_environment, wrappers
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

NOISE_STD = 0.1
"""Standard deviation of the noise channels (AttentionNeuron Table 2: white noise, sigma = 0.1)."""
TABLE6_RESHUFFLE_STEPS = (25, 50, 100, 200, 500)
"""AttentionNeuron Table 6's intervals: the readings reshuffled every t steps ("every:<t>")."""


def parse_mode(mode: str | None) -> int | None:
    """``None`` -> ``None`` (no shuffling); ``"once"`` -> 0 (once per episode); ``"every:<t>"`` -> ``t``."""
    if mode is None or mode == "once":
        return None if mode is None else 0
    kind, sep, period = mode.partition(":")
    if kind == "every" and sep and period.isdigit() and int(period) >= 1:
        return int(period)
    raise ValueError(
        f"sensor_permutation must be None, 'once' or 'every:<t>' with an integer t >= 1; received {mode!r}"
    )


class SensorPermutation(wrappers.PyEnvironmentBaseWrapper):
    """Duplicates, adds noise channels to and shuffles the vector observation of an unbatched environment.

    See the module doc for the exact transformation.

    Args:
      env: an unbatched PyEnvironment with a rank-1 observation ``(N,)``.
      sensor_permutation: ``None``, ``"once"`` or ``"every:<t>"``.
      noise_sensors: number ``k >= 0`` of extra noise channels.
      duplicate_sensors: append a copy of the ``N`` readings.
      noise_std: standard deviation of the noise channels.
      seed: seed of the permutation and noise streams.

    Observation: ``(M,)`` with ``M = N * (2 if duplicate_sensors else 1) + k``,
    the dtype of ``env``'s observation, unbounded.
    """

    def __init__(
        self,
        env: py_environment.PyEnvironment,
        sensor_permutation: str | None = None,
        noise_sensors: int = 0,
        duplicate_sensors: bool = False,
        noise_std: float = NOISE_STD,
        seed: int | None = None,
    ):
        super().__init__(env)
        spec = env.observation_spec()
        if env.batched:
            raise ValueError("SensorPermutation wraps one unbatched environment; received a batched one")
        if not isinstance(spec, array_spec.ArraySpec) or len(spec.shape) != 1:
            raise ValueError(
                "Sensor permutations, noise and duplicate sensors need a vector observation of shape (N,); "
                f"received observation spec {spec}"
            )
        if int(noise_sensors) != noise_sensors or noise_sensors < 0:
            raise ValueError(
                f"noise_sensors must be an integer >= 0; received noise_sensors={noise_sensors!r}"
            )
        if not noise_std >= 0:
            raise ValueError(f"noise_std must be >= 0; received noise_std={noise_std!r}")
        self._period = parse_mode(sensor_permutation)
        self._shuffle = sensor_permutation is not None
        self._duplicate = bool(duplicate_sensors)
        self._noise_sensors = int(noise_sensors)
        self._noise_std = float(noise_std)
        self._num_sensors = int(spec.shape[0])
        self._size = self._num_sensors * (2 if self._duplicate else 1) + self._noise_sensors
        self._dtype = spec.dtype
        permutation_seed, noise_seed = np.random.SeedSequence(seed).spawn(2)
        self._permutation_rng = np.random.default_rng(permutation_seed)
        self._noise_rng = np.random.default_rng(noise_seed)
        self._permutation = np.arange(self._size)
        self._episode_step = 0
        self._observation_spec = array_spec.ArraySpec((self._size,), self._dtype, name="observation")

    @property
    def permutation(self) -> np.ndarray:
        """The permutation applied to the last observation: ``observation[j] = extended[permutation[j]]``."""
        return self._permutation.copy()

    @property
    def num_sensors(self) -> int:
        """``M``, the number of channels the agent sees."""
        return self._size

    def observation_spec(self) -> array_spec.ArraySpec:
        return self._observation_spec

    def get_info(self) -> dict[str, np.ndarray]:
        return {**self._env.get_info(), "sensor_permutation": self.permutation}

    def extend(self, reading: np.ndarray) -> np.ndarray:
        """The extended reading of ``reading`` (duplicate and fresh noise channels), unshuffled."""
        parts = [reading, reading] if self._duplicate else [reading]
        if self._noise_sensors:
            parts.append(self._noise_rng.normal(0.0, self._noise_std, self._noise_sensors))
        return np.concatenate(parts).astype(self._dtype, copy=False)

    def _transform(self, time_step: ts.TimeStep) -> ts.TimeStep:
        if time_step.is_first():
            self._episode_step = 0
        else:
            self._episode_step += 1
        if self._shuffle and (
            self._episode_step == 0 or (self._period and self._episode_step % self._period == 0)
        ):
            self._permutation = self._permutation_rng.permutation(self._size)
        extended = self.extend(np.asarray(time_step.observation))
        return time_step._replace(observation=extended[self._permutation])

    def _reset(self) -> ts.TimeStep:
        return self._transform(self._env.reset())

    def _step(self, action: np.ndarray) -> ts.TimeStep:
        return self._transform(self._env.step(action))
