"""Whether a run's environments and stored observations can fit in memory, checked before anything starts.

``train_eval.num_envs = 100000`` would otherwise grow to many gigabytes
while the environments are created, and a replay buffer allocates its whole
capacity at once. The estimate is a lower bound, so that a run that would
fit is never refused:

- the environments: ``num_envs`` times one sub-environment's memory,
  ``ENV_BYTES`` (measured by ``benchmarks/env_memory.py``, the smallest of
  its repeats; ``benchmarks/reference/env_memory.json``);
- the observations the algorithm keeps (a PPO rollout, a replay buffer, BC's
  recorded rounds: each module's ``stored_observations``), at the size of
  one observation in its dtype (read from one probe environment).

The network's activations and TensorFlow's own memory come on top. It is
compared with the memory the machine has available (``MemAvailable``, and a
cgroup's limit when it is lower).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf

# One more sub-environment's resident memory in bytes per family: the smallest measured, rounded down.
ENV_BYTES = {
    "procgen": 580_000,
    "minigrid": 14_000,
    "gymnasium": 3_400,
    "dmc": 12_400_000,
    "atari": 900_000,
}


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The memory a run needs at least: its environments and its stored observations."""

    num_envs: int
    env_bytes: int
    stored_observations: int
    observation_bytes: int

    @property
    def total(self) -> int:
        return self.num_envs * self.env_bytes + self.stored_observations * self.observation_bytes


def observation_bytes(observation_spec) -> int:
    """Bytes of one observation (every array of the spec's nest, in its dtype)."""
    return sum(
        int(np.prod(spec.shape)) * tf.as_dtype(spec.dtype).size for spec in tf.nest.flatten(observation_spec)
    )


def _read(path: str) -> str | None:
    """A small system file's stripped text, or ``None`` where it does not exist (not Linux, no cgroup)."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def available_bytes() -> int | None:
    """The memory a new allocation can get: ``MemAvailable``, or a cgroup's remaining limit if lower."""
    candidates = []
    meminfo = _read("/proc/meminfo") or ""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            candidates.append(int(line.split()[1]) * 1024)
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and limit.isdigit() and used and used.isdigit():  # "max": no cgroup v2 limit
        candidates.append(int(limit) - int(used))
    return min(candidates) if candidates else None


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} bytes"


def check(
    env_name: str,
    num_envs: int,
    stored_observations: int,
    stored_by: str,
    probe: Callable[[], object],
    available: int | None = None,
) -> Estimate:
    """Raises ``ValueError`` (one sentence with the estimate) when the run cannot fit; else the estimate.

    Args:
      env_name: ``"<family>:<name>"``; the family gives one environment's memory.
      num_envs: ``train_eval.num_envs``.
      stored_observations: observations the algorithm keeps at once.
      stored_by: what keeps them, for the message (e.g. ``"ppo.collect_steps_per_env"``).
      probe: returns the observation spec (e.g. of one environment).
      available: bytes available (default: ``available_bytes()``; None: no check).
    """
    available = available_bytes() if available is None else available
    estimate = Estimate(
        num_envs, ENV_BYTES.get(env_name.split(":", 1)[0], 0), stored_observations, observation_bytes(probe())
    )
    if available is not None and estimate.total > available:
        raise ValueError(
            f"train_eval.num_envs = {num_envs} needs at least {_size(estimate.total)} of memory "
            f"({num_envs} environments of {_size(estimate.env_bytes)} and {stored_observations} stored "
            f"observations of {_size(estimate.observation_bytes)}), more than the {_size(available)} "
            f"available: lower train_eval.num_envs or {stored_by}."
        )
    return estimate
