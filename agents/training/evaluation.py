"""How well the agent does during training: the training episodes' metrics and the evaluations.

``episode_metrics``: return, length and success of the last training episodes
(``collect/``); ``Evaluator``: episodes of the evaluation policy on separate
environments, into ``eval/`` (``EVAL_TAGS``) and ``evaluations.json``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import tensorflow as tf
from tf_agents.metrics import py_metrics
from tf_agents.policies import py_tf_eager_policy, tf_policy

from sit_keras import native
from sit_keras.agents import evaluate
from sit_keras.agents.environments import load
from sit_keras.agents.training.collection import EpisodeSuccessMetric, NormalizedReturnMetric
from sit_keras.agents.training.run_settings import RunSettings

EVAL_SEED_OFFSET = 1_000_000
EVALUATIONS_FILE = "evaluations.json"


class Evaluator:
    """Evaluation episodes on separate environments, into ``eval/`` and ``evaluations.json``.

    The environments (``RunSettings.eval_kwargs``, seeds from ``seed +
    EVAL_SEED_OFFSET``) are made on first use: pixel environments are slow to make.
    """

    def __init__(self, root_dir: str, settings: RunSettings, policy: tf_policy.TFPolicy):
        self._path = os.path.join(root_dir, EVALUATIONS_FILE)
        self._settings = settings
        self._policy = py_tf_eager_policy.PyTFEagerPolicy(
            policy, use_tf_function=True, batch_time_steps=False
        )
        self._env = None
        self._writer = tf.summary.create_file_writer(os.path.join(root_dir, "eval"))
        self.evaluations: list[dict[str, Any]] = []
        if os.path.exists(self._path):
            try:
                with open(self._path) as f:
                    self.evaluations = json.load(f)
            except (OSError, ValueError) as error:
                raise ValueError(
                    f"Damaged evaluations file {self._path!r} ({error}); move it away to resume."
                ) from error

    def _episodes(self, policy) -> list[dict[str, Any]]:
        settings = self._settings
        if self._env is None:
            num_envs = settings.eval_num_envs or min(settings.num_eval_episodes, 10)
            self._env = load(
                settings.env_name, num_envs=num_envs, seed=settings.seed + EVAL_SEED_OFFSET,
                **settings.eval_kwargs,
            )  # fmt: skip
        # An in-process policy is traced on its first call here, so it may use the native kernels, as the
        # collection driver's does; a saved policy keeps the builtin ops it was traced with.
        with native.forward_passes():
            return evaluate.run_episodes(policy, self._env, settings.num_eval_episodes)

    def summary_of(self, policy) -> dict[str, float]:
        """``evaluate.summarize`` of another py policy (e.g. BC's teacher) on the evaluation environments.

        Not recorded in ``evaluations.json``; it plays the environments' next episodes.
        """
        return evaluate.summarize(self._episodes(policy))

    def __call__(self, env_steps: int, train_step: int) -> dict[str, Any]:
        settings = self._settings
        start = time.perf_counter()
        episodes = self._episodes(self._policy)
        summary = evaluate.summarize(episodes)
        result = {
            "env_steps": env_steps,
            "frames": env_steps * settings.frames_per_env_step,
            "train_step": train_step,
            **summary,
            "returns": [e["return"] for e in episodes],
            "seconds": time.perf_counter() - start,
        }
        # A resumed run replaces the evaluations from after its checkpoint.
        self.evaluations = [e for e in self.evaluations if e["env_steps"] < env_steps] + [result]
        evaluate.write_json_atomically(self._path, self.evaluations)
        with self._writer.as_default(step=env_steps):
            for tag, name in EVAL_TAGS.items():
                tf.summary.scalar(f"Eval/{tag}", summary[name])
        self._writer.flush()
        return result

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


EVAL_TAGS = {
    "AverageReturn": "mean_return",
    "StdReturn": "std_return",
    "AverageEpisodeLength": "mean_length",
    "SuccessRate": "success_rate",
}
"""``eval/`` TensorBoard tags and the ``evaluate.summarize`` values they show."""


def episode_metrics(settings: RunSettings) -> list:
    """Return, length and success of the last 100 training episodes (Procgen: the normalised score)."""
    num_envs = settings.num_envs
    return_metric = py_metrics.AverageReturnMetric(buffer_size=100, batch_size=num_envs)
    metrics = [
        return_metric,
        py_metrics.AverageEpisodeLengthMetric(buffer_size=100, batch_size=num_envs),
        EpisodeSuccessMetric(buffer_size=100, batch_size=num_envs),
    ]
    family, _, game = settings.env_name.partition(":")
    if family == "procgen":
        metrics.append(NormalizedReturnMetric(return_metric, game))
    return metrics
