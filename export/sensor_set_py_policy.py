"""A trained sensor set policy (AttentionNeuron) as a ``PyPolicy`` for any number of sensors.

The AttentionNeuron's weights do not depend on how many readings arrive
(eq. 1-2 of Tang & Ha 2021 run per sensor and attend over all of them), but
a policy saved by training has the training number fixed in its signature.
``SensorSetPyPolicy`` runs the network of the training folder through its
serving function for ``num_sensors`` readings (``TrainedPolicy``), greedy,
with the recurrent state of each environment of a batch carried in numpy and
reset at the environment's FIRST steps. ``sit-eval`` uses it when an
environment gives a different number of readings than training did
(``--env_kwarg duplicate_sensors=true``, ``noise_sensors=5``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tf_agents.policies import py_policy
from tf_agents.specs import array_spec, tensor_spec
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts

from sit_keras.export.policy_model import OBSERVATION, SENSOR_MASK, TrainedPolicy


def with_rows(spec: array_spec.ArraySpec, rows: int) -> array_spec.ArraySpec:
    """``spec`` with ``rows`` sensor readings (its first axis); bounds become the scalar extremes."""
    shape = (rows, *spec.shape[1:])
    if isinstance(spec, array_spec.BoundedArraySpec):
        return array_spec.BoundedArraySpec(
            shape, spec.dtype, np.min(spec.minimum), np.max(spec.maximum), spec.name
        )
    return array_spec.ArraySpec(shape, spec.dtype, spec.name)


class SensorSetPyPolicy(py_policy.PyPolicy):
    """The greedy policy of a trained sensor set network on ``num_sensors`` readings per observation.

    Args:
      trained: the training folder's network (``load_trained_policy``).
      num_sensors: readings per observation, at least 1.

    Raises:
      ValueError: the network takes no sensor set, or ``num_sensors`` is below 1.
    """

    def __init__(self, trained: TrainedPolicy, num_sensors: int):
        if not trained.takes_sensor_set:
            raise ValueError(f"The policy of {trained.root_dir!r} takes no sensor set.")
        if num_sensors < 1:
            raise ValueError(f"num_sensors must be at least 1; received {num_sensors}.")
        observation_spec = with_rows(tensor_spec.to_array_spec(trained.observation_spec), num_sensors)
        super().__init__(ts.time_step_spec(observation_spec), tensor_spec.to_array_spec(trained.action_spec))
        self._trained = trained
        self._num_sensors = num_sensors
        self._serve = trained.serving_function(batch_size=None, num_sensors=num_sensors, validate=False)
        self._state: list[np.ndarray] = []

    def _action(self, time_step: ts.TimeStep, policy_state: Any = ()) -> policy_step.PolicyStep:
        observation = np.asarray(time_step.observation, self.time_step_spec.observation.dtype)
        batch = observation.shape[0]
        initial = [np.asarray(s) for s in self._trained.initial_state(batch, self._num_sensors)]
        if not self._state or self._state[0].shape[0] != batch:
            self._state = [s.copy() for s in initial]
        first = np.asarray(time_step.step_type) == ts.StepType.FIRST
        for state, start in zip(self._state, initial, strict=True):
            state[first] = start[first]
        inputs = {OBSERVATION: observation, SENSOR_MASK: np.ones((batch, self._num_sensors), bool)}
        inputs.update(zip(self._trained.state_names, self._state, strict=True))
        outputs = self._serve(inputs)
        self._state = [np.array(outputs["next_" + name]) for name in self._trained.state_names]
        action = np.asarray(outputs["action"]).astype(self.action_spec.dtype)
        return policy_step.PolicyStep(action, policy_state)
