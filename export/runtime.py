"""Run an exported ``.tflite`` policy on a robot: needs numpy and ``ai_edge_litert`` only.

    from sit_keras.export.runtime import TFLitePolicy

    policy = TFLitePolicy("exported/tflite/sit_policy_int8.tflite")
    policy.reset()                      # at every episode start (recurrent policies)
    action = policy.step(observation)["action"]

The metadata file beside the model (same name, ``.json``) gives the input
names, shapes and dtypes, the action spec and the preprocessing; nothing
else is needed. Without ``ai_edge_litert``, TensorFlow's
``tf.lite.Interpreter`` is used. Inputs are checked before they reach the
interpreter: a wrong shape, dtype or number of sensors, or a NaN, raises
``PolicyInputError`` (a ``ValueError``) and leaves the policy usable.
This module imports neither TensorFlow nor TF-Agents unless it must fall back.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

OBSERVATION = "observation"
SENSOR_MASK = "sensor_mask"
STATE_PREFIX = "state_"
NEXT_STATE_PREFIX = "next_state_"


class PolicyInputError(ValueError):
    """An input the exported policy cannot take; the message names what was expected."""


def make_interpreter(model_path: str, num_threads: int = 1) -> Any:
    """An interpreter for ``model_path``: ``ai_edge_litert``'s, else ``tf.lite.Interpreter``."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # no LiteRT wheel for this platform: TensorFlow's interpreter
        from tensorflow import lite

        Interpreter = lite.Interpreter  # noqa: N806
    return Interpreter(model_path=model_path, num_threads=num_threads)


def metadata_path(model_path: str) -> str:
    """The metadata file of a model: ``<name>.json`` beside ``<name>.tflite``."""
    return os.path.splitext(model_path)[0] + ".json"


def pad_sensors(readings: np.ndarray, num_sensors: int) -> tuple[np.ndarray, np.ndarray]:
    """Readings ``(n, ...)`` padded with zeros to ``(num_sensors, ...)`` and the mask of real rows.

    Raises:
      PolicyInputError: more than ``num_sensors`` readings.
    """
    readings = np.asarray(readings)
    count = readings.shape[0] if readings.ndim else 0
    if readings.ndim == 0 or count > num_sensors or count == 0:
        raise PolicyInputError(
            f"Expected between 1 and {num_sensors} sensor readings (the model's maximum); "
            f"received an array of shape {readings.shape}."
        )
    padded = np.zeros((num_sensors, *readings.shape[1:]), readings.dtype)
    padded[:count] = readings
    mask = np.zeros((num_sensors,), bool)
    mask[:count] = True
    return padded, mask


class TFLitePolicy:
    """A ``.tflite`` policy exported by ``sit-export``, with its metadata and (recurrent) state.

    Args:
      model_path: the ``.tflite`` file.
      metadata_file: its metadata; default: ``metadata_path(model_path)``.
      num_threads: interpreter threads.

    Raises:
      FileNotFoundError: the model or its metadata is missing.
    """

    def __init__(self, model_path: str, metadata_file: str | None = None, num_threads: int = 1):
        metadata_file = metadata_file or metadata_path(model_path)
        for path in (model_path, metadata_file):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path!r} does not exist; export a policy with sit-export first.")
        with open(metadata_file) as f:
            self.metadata: dict[str, Any] = json.load(f)
        self._interpreter = make_interpreter(model_path, num_threads)
        self._runner = self._interpreter.get_signature_runner()
        self._inputs = {
            name: (tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]))
            for name, detail in self._runner.get_input_details().items()
        }
        self.state_names = sorted(name for name in self._inputs if name.startswith(STATE_PREFIX))
        self.takes_sensor_set = SENSOR_MASK in self._inputs
        self.reset()

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """One observation's shape (no batch axis); for sensor sets, the maximum number of rows."""
        return self._inputs[OBSERVATION][0][1:]

    @property
    def observation_dtype(self) -> np.dtype:
        return self._inputs[OBSERVATION][1]

    def reset(self) -> None:
        """Starts a new episode: the recurrent state goes back to its initial value (zeros)."""
        self.state = {name: np.zeros(shape, dtype) for name, (shape, dtype) in self._inputs.items()
                      if name in self.state_names}  # fmt: skip

    def step(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        """The outputs for one observation (no batch axis, or a batch axis of 1); advances the state.

        Sensor set policies take ``(n, ...)`` readings in any order, ``n``
        up to the model's maximum. Outputs have their batch axis removed;
        ``"action"`` is the greedy action.

        Raises:
          PolicyInputError: wrong shape, dtype or number of sensors, or a non-finite value.
        """
        inputs = self._check(observation)
        inputs.update(self.state)
        outputs = self._runner(**inputs)
        for name in self.state_names:
            self.state[name] = outputs["next_" + name]
        return {name: value[0] for name, value in outputs.items() if not name.startswith(NEXT_STATE_PREFIX)}

    def action(self, observation: np.ndarray) -> np.ndarray:
        """The greedy action for one observation (``step(observation)["action"]``)."""
        return self.step(observation)["action"]

    def _check(self, observation: Any) -> dict[str, np.ndarray]:
        expected_shape, dtype = self.observation_shape, self.observation_dtype
        observation = np.asarray(observation)
        if not np.can_cast(observation.dtype, dtype, "same_kind"):  # e.g. floats for a uint8 image
            raise PolicyInputError(
                f"Expected an observation of dtype {dtype.name}; received {observation.dtype.name}."
            )
        if observation.dtype.kind == "f" and not np.all(np.isfinite(observation)):
            raise PolicyInputError("The observation contains NaN or infinite values.")
        observation = observation.astype(dtype, copy=False)
        if not self.takes_sensor_set:
            if observation.shape == (1, *expected_shape):
                observation = observation[0]
            if observation.shape != expected_shape:
                raise PolicyInputError(
                    f"Expected an observation of shape {expected_shape} (or {(1, *expected_shape)}); "
                    f"received {observation.shape}."
                )
            return {OBSERVATION: observation[None]}
        if observation.ndim == len(expected_shape) + 1 and observation.shape[0] == 1:
            observation = observation[0]
        if observation.shape[1:] != expected_shape[1:]:
            raise PolicyInputError(
                f"Expected sensor readings of shape {('n', *expected_shape[1:])} with "
                f"n <= {expected_shape[0]}; received {observation.shape}."
            )
        padded, mask = pad_sensors(observation, expected_shape[0])
        return {OBSERVATION: padded[None], SENSOR_MASK: mask[None]}
