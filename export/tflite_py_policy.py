"""A ``.tflite`` policy as a TF-Agents ``PyPolicy`` for batched environments (``sit-eval --tflite``).

Each observation goes through ``TFLitePolicy.step`` and its checks (see
``export.runtime``): an observation or output the model refuses raises
``PolicyInputError`` rather than becoming an action, and leaves that
environment's recurrent state as it was.
"""

from __future__ import annotations

import numpy as np
from tf_agents.policies import py_policy
from tf_agents.specs import array_spec, tensor_spec
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts

from sit_keras import quiet
from sit_keras.agents.networks.policy_network import spec_from_json
from sit_keras.export.runtime import ModelFileError, TFLitePolicy, metadata_path
from sit_keras.export.sensor_set_py_policy import with_rows

# The metadata entries this policy reads (besides those TFLitePolicy reads).
REQUIRED_METADATA = ("observation_spec", "action_spec", "environment")


class TFLitePyPolicy(py_policy.PyPolicy):
    """Runs one ``TFLitePolicy`` per environment of a batch (the models have batch size 1).

    Each environment's recurrent state lives in its ``TFLitePolicy`` and is
    reset at the environment's FIRST steps, so the TF-Agents policy state is
    empty.

    Args:
      model_path: a ``.tflite`` file written by ``sit-export`` (metadata beside it).
      num_threads: interpreter threads per model.
      verify_checksum: refuse a file whose SHA-256 differs from its metadata's.
      num_sensors: for a sensor set model, the readings per observation
        (at most the exported maximum; default: the maximum); the model
        masks the missing rows, so any number up to it acts as exported.

    Raises:
      FileNotFoundError: the model or its metadata is missing.
      ModelFileError: either is damaged, or the metadata lacks the specs (the message names the file).
      ValueError: ``num_sensors`` for a model without a sensor set, or outside 1 .. the maximum.
    """

    def __init__(
        self,
        model_path: str,
        num_threads: int = 1,
        verify_checksum: bool = True,
        num_sensors: int | None = None,
    ):
        self._model_path = model_path
        self._num_threads = num_threads
        self._models = [TFLitePolicy(model_path, num_threads=num_threads, verify_checksum=verify_checksum)]
        metadata = self._models[0].metadata
        missing = [key for key in REQUIRED_METADATA if key not in metadata]
        try:
            if missing:
                raise KeyError(", ".join(missing))
            observation_spec = tensor_spec.to_array_spec(spec_from_json(metadata["observation_spec"]))
            action_spec = tensor_spec.to_array_spec(spec_from_json(metadata["action_spec"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ModelFileError(
                f"{metadata_path(model_path)!r} is not complete sit-export metadata (cannot read {error}); "
                "export the model again with sit-export."
            ) from error
        if num_sensors is not None:
            observation_spec = self._with_sensors(observation_spec, num_sensors)
        super().__init__(ts.time_step_spec(observation_spec), action_spec)
        self._invoked = False

    @property
    def takes_sensor_set(self) -> bool:
        return self._models[0].takes_sensor_set

    @property
    def max_sensors(self) -> int | None:
        """The most readings a sensor set model takes (its exported rows); None for other models."""
        return int(self._models[0].observation_shape[0]) if self.takes_sensor_set else None

    def _with_sensors(self, spec: array_spec.ArraySpec, num_sensors: int) -> array_spec.ArraySpec:
        if not self.takes_sensor_set:
            raise ValueError(f"{self._model_path!r} takes no sensor set, so num_sensors does not apply.")
        if not 1 <= num_sensors <= self.max_sensors:
            raise ValueError(
                f"{self._model_path!r} takes 1 to {self.max_sensors} sensor readings, not {num_sensors}; "
                f"export it again with sit-export --max_sensors {num_sensors}."
            )
        return with_rows(spec, num_sensors)

    @property
    def metadata(self) -> dict:
        return self._models[0].metadata

    def _action(self, time_step: ts.TimeStep, policy_state=()) -> policy_step.PolicyStep:
        if self._invoked:
            return self._actions(time_step, policy_state)
        self._invoked = True
        with quiet.filtered_stderr():  # LiteRT's "Created TensorFlow Lite XNNPACK delegate" at the first run
            return self._actions(time_step, policy_state)

    def _actions(self, time_step: ts.TimeStep, policy_state) -> policy_step.PolicyStep:
        observations = np.asarray(time_step.observation)
        while len(self._models) < len(observations):
            # The file was verified (or the check skipped) when the first copy loaded.
            copy = TFLitePolicy(self._model_path, num_threads=self._num_threads, verify_checksum=False)
            self._models.append(copy)
        first = np.asarray(time_step.step_type) == ts.StepType.FIRST
        actions = []
        for model, observation, is_first in zip(self._models, observations, first, strict=False):
            if is_first:
                model.reset()
            actions.append(model.action(observation))
        return policy_step.PolicyStep(np.stack(actions).astype(self.action_spec.dtype), policy_state)
