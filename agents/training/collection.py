"""Collection pieces on top of TF-Agents' ``PyDriver`` and py metrics.

PPO needs exactly ``T`` steps from each of the batched environments per
iteration, but ``PyDriver`` counts non-boundary steps summed over the batch,
so the number of batched steps it takes varies with the number of episode
ends. ``FixedLengthDriver`` takes exactly ``num_batched_steps``.

Success is not part of a TF-Agents trajectory: the environments report it in
``get_info()``. ``EpisodeSuccessMetric`` is both a trajectory observer (it
sees which episodes end) and an info observer (it reads their success flag),
in the order ``PyDriver`` calls them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from tf_agents.drivers import py_driver
from tf_agents.metrics import py_metric, py_metrics
from tf_agents.trajectories import trajectory as trajectory_lib

from sit_keras import native
from sit_keras.agents.environments import normalized_score


class FixedLengthDriver(py_driver.PyDriver):
    """A ``PyDriver`` that takes exactly ``num_batched_steps`` steps of its batched environment per run."""

    def __init__(self, env, policy, observers, num_batched_steps: int, info_observers=()):
        if num_batched_steps < 1:
            raise ValueError(f"num_batched_steps must be >= 1. Received: {num_batched_steps}")
        if not env.batched:
            raise ValueError("FixedLengthDriver needs a batched environment (see environments.load).")
        super().__init__(
            env, policy, observers, info_observers=list(info_observers), max_steps=num_batched_steps
        )
        self.num_batched_steps = int(num_batched_steps)
        # Seconds spent in the policy and in the environment since the last
        # reset_timings(); the rest of a run is observers (replay buffer, metrics).
        self.policy_seconds = 0.0
        self.env_seconds = 0.0

    def reset_timings(self) -> None:
        self.policy_seconds = self.env_seconds = 0.0

    def run(self, time_step, policy_state=()):
        # The policy's tf.function, traced on its first call here, may use the native kernels: it runs
        # in this process only (sit_keras.native.forward_passes).
        with native.forward_passes():
            return self._run(time_step, policy_state)

    def _run(self, time_step, policy_state):
        # PyDriver.run's loop body, counted in batched steps. Batched
        # environments reset themselves, so the policy state is not reset here.
        for _ in range(self.num_batched_steps):
            start = time.perf_counter()
            action_step = self.policy.action(time_step, policy_state)
            acted = time.perf_counter()
            next_time_step = self.env.step(action_step.action)
            self.policy_seconds += acted - start
            self.env_seconds += time.perf_counter() - acted
            traj = trajectory_lib.from_transition(
                time_step, action_step._replace(state=policy_state), next_time_step
            )
            for observer in self.observers:
                observer(traj)
            for observer in self.info_observers:
                observer(self.env.get_info())
            time_step, policy_state = next_time_step, action_step.state
        return time_step, policy_state


class EpisodeSuccessMetric(py_metrics.StreamingMetric):
    """Share of the last ``buffer_size`` episodes that ended in success (``get_info()["success"]``).

    Register it as an observer *and* its ``observe_info`` as an info observer.
    """

    def __init__(self, name: str = "SuccessRate", buffer_size: int = 100, batch_size: int | None = None):
        self._episode_ended = np.zeros((0,), bool)
        super().__init__(name, buffer_size=buffer_size, batch_size=batch_size)

    def _reset(self, batch_size: int) -> None:
        self._episode_ended = np.zeros((batch_size,), bool)

    def _batched_call(self, trajectory: trajectory_lib.Trajectory) -> None:
        self._episode_ended = np.asarray(trajectory.is_last())

    def observe_info(self, info: Mapping[str, np.ndarray]) -> None:
        success = np.asarray(info["success"], bool).reshape(-1)
        self.add_to_buffer(success[self._episode_ended].astype(np.float32))


class NormalizedReturnMetric(py_metric.PyStepMetric):
    """Procgen min-max normalised score of an ``AverageReturnMetric`` (Cobbe et al. 2020, easy mode)."""

    def __init__(self, average_return: py_metrics.AverageReturnMetric, game: str):
        super().__init__(name="NormalizedReturn")
        self._average_return = average_return
        self._game = game
        normalized_score(game, 0.0)  # unknown games fail here, not at the first summary

    def call(self, trajectory: trajectory_lib.Trajectory) -> None:
        del trajectory  # the wrapped metric observes the trajectories

    def reset(self) -> None:
        self._average_return.reset()

    def result(self) -> float:
        return float(normalized_score(self._game, self._average_return.result()))


class EpisodeRecorder:
    """Records the return, length and success of each environment's first ``quota[i]`` episodes.

    Used by evaluation: with a fixed quota per environment, short episodes do
    not crowd out long ones (which taking the first ``N`` to finish would do).
    """

    def __init__(self, quotas: np.ndarray):
        self.quotas = np.asarray(quotas, int)
        n = len(self.quotas)
        self._returns = np.zeros(n, np.float64)
        self._lengths = np.zeros(n, int)
        self._ended = np.zeros(n, bool)
        self.episodes: list[dict[str, float]] = []
        self._counts = np.zeros(n, int)

    @property
    def done(self) -> bool:
        return bool(np.all(self._counts >= self.quotas))

    def __call__(self, trajectory: trajectory_lib.Trajectory) -> None:
        boundary = np.asarray(trajectory.is_boundary())
        self._returns += np.where(boundary, 0.0, np.asarray(trajectory.reward, np.float64))
        self._lengths += ~boundary
        self._ended = np.asarray(trajectory.is_last())

    def observe_info(self, info: Mapping[str, np.ndarray]) -> None:
        success = np.asarray(info["success"], bool).reshape(-1)
        for i in np.flatnonzero(self._ended):
            if self._counts[i] < self.quotas[i]:
                self.episodes.append(
                    {
                        "env": int(i),
                        "return": float(self._returns[i]),
                        "length": int(self._lengths[i]),
                        "success": bool(success[i]),
                    }
                )
                self._counts[i] += 1
            self._returns[i] = 0.0
            self._lengths[i] = 0


def metric_results(metrics: list[py_metric.PyMetric]) -> dict[str, float]:
    """``{name: result}`` of py metrics, as floats."""
    return {metric.name: float(metric.result()) for metric in metrics}
