"""Run an exported ``.tflite`` policy on a robot: needs numpy and ``ai_edge_litert`` only.

    from sit_keras.export.runtime import TFLitePolicy

    policy = TFLitePolicy("exported/tflite/sit_policy_int8.tflite")
    policy.reset()                      # at every episode start (recurrent policies)
    action = policy.step(observation)["action"]

The metadata file beside the model (same name, ``.json``) gives the input
names, shapes and dtypes, the action spec and the preprocessing; nothing
else is needed. Without ``ai_edge_litert``, TensorFlow's
``tf.lite.Interpreter`` is used. This module imports neither TensorFlow nor
TF-Agents unless it must fall back.

What ``step`` accepts and returns. A wrong answer on a robot is a fault, so
every observation is checked before it reaches the interpreter, and every
output before it is returned:

- The observation must have the model's shape (with or without a batch axis
  of 1; a ragged nested list is refused by name) and a dtype that casts to
  the model's input dtype without changing kind: floats for a float32
  model, integers in the input dtype's range (0-255 for uint8 images) for an
  integer model.
- Finiteness is checked *after* the cast to the model's input dtype, so a
  float64 value beyond float32's range (1e300, which would become inf) is
  refused like a NaN or an inf.
- Values that are finite in the model's dtype are accepted, however large
  (1e30 is a valid float32): the model's arithmetic is defined for them, and
  the runtime does not guess a "plausible" range that the training
  environment never stated. int8 models clamp such inputs to their
  calibrated range, as quantised arithmetic does. What the runtime refuses
  is a non-finite result: if any float output or next recurrent state is NaN
  or inf (float32 overflow inside the model, e.g. for inputs near 3e38),
  ``step`` raises ``PolicyOutputError`` instead of returning it.
- The recurrent state is committed only after all checks pass: a refused
  input or output leaves the previous state in place, so the next valid
  step continues the episode as if the refused one had not happened.

Every refusal is a ``PolicyInputError`` (a ``ValueError``) with one sentence
that names what was expected, and leaves the policy usable. A missing model
or metadata file raises ``FileNotFoundError``; a damaged one raises
``ModelFileError`` (a ``ValueError``), both naming the file.
"""

from __future__ import annotations

import hashlib
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


class PolicyOutputError(PolicyInputError):
    """The model's outputs for an accepted input are not finite; nothing is returned or stored."""


class ModelFileError(ValueError):
    """A model or metadata file that exists but cannot be read; the message names the file."""


def make_interpreter(model_path: str, num_threads: int = 1) -> Any:
    """An interpreter for ``model_path``: ``ai_edge_litert``'s, else ``tf.lite.Interpreter``.

    Raises:
      ModelFileError: the file is not a TFLite model (the interpreter's reason is kept).
    """
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # no LiteRT wheel for this platform: TensorFlow's interpreter
        from tensorflow import lite

        Interpreter = lite.Interpreter  # noqa: N806
    try:
        return Interpreter(model_path=model_path, num_threads=num_threads)
    except ValueError as error:  # the interpreter's message does not name the file
        raise ModelFileError(
            f"{model_path!r} is not a readable TFLite model ({error}); export it again with sit-export."
        ) from error


# sit-export writes its models into a folder of this prefix, then moves them into place.
STAGING_PREFIX = ".sit-export-"
STAGED_SUFFIX = ".staged"
"""An export writes each metadata file under this suffix and names it when it commits: a model whose
metadata has only its staged name comes from an export that did not finish (the completion marker)."""


def check_not_staged(model_path: str) -> None:
    """Refuses a model inside an export's staging folder: that export was killed before it finished.

    Raises:
      ModelFileError: naming the folder.
    """
    parts = os.path.abspath(model_path).split(os.sep)
    staged = [part for part in parts if part.startswith(STAGING_PREFIX)]
    if staged:
        raise ModelFileError(
            f"{model_path!r} lies in {staged[0]!r}, the staging folder of an export that did not finish; "
            "its models were never checked: export the policy again with sit-export."
        )


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, as exports record them."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_sha256(folder: str, leave_out: str) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``folder`` but ``leave_out`` (its metadata)."""
    digests = {}
    for directory, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, folder)
            if relative != leave_out:
                digests[relative] = file_sha256(path)
    return dict(sorted(digests.items()))


def check_not_unfinished(metadata_file: str) -> None:
    """Refuses a model whose metadata exists only under its staged name (an export that did not finish).

    Raises:
      ModelFileError: naming the staged file.
    """
    staged = metadata_file + STAGED_SUFFIX
    if not os.path.exists(metadata_file) and os.path.exists(staged):
        raise ModelFileError(
            f"{staged!r} was never given its name: the export that wrote it did not finish, and its models "
            "were never checked; export the policy again with sit-export."
        )


def check_folder_checksums(folder: str, metadata: dict[str, Any], metadata_file: str) -> None:
    """Refuses a SavedModel folder whose files differ from the SHA-256s its export recorded.

    Raises:
      ModelFileError: naming the first changed, missing or added file and the metadata file.
    """
    export = metadata.get("export")
    recorded = export.get("files_sha256") if isinstance(export, dict) else None
    if recorded is None:
        return
    actual = folder_sha256(folder, os.path.relpath(metadata_file, folder))
    for name in sorted(set(recorded) | set(actual)):
        if recorded.get(name) != actual.get(name):
            what = "is missing" if name not in actual else "was added" if name not in recorded else "changed"
            raise ModelFileError(
                f"{os.path.join(folder, name)!r} {what} since the export recorded its files in "
                f"{metadata_file!r}: the SavedModel is damaged; export the policy again with sit-export "
                "(or skip this check explicitly)."
            )


def check_checksum(model_path: str, metadata: dict[str, Any], metadata_file: str) -> None:
    """Refuses a model whose bytes differ from the SHA-256 its export recorded (exports since it was added).

    Raises:
      ModelFileError: naming both files.
    """
    export = metadata.get("export")
    recorded = export.get("sha256") if isinstance(export, dict) else None
    if recorded is None:
        return
    if file_sha256(model_path) != recorded:
        raise ModelFileError(
            f"{model_path!r} does not match the SHA-256 recorded in {metadata_file!r}: the file is damaged "
            "or was changed after export; export the policy again with sit-export (or skip this check "
            "explicitly)."
        )


def metadata_path(model_path: str) -> str:
    """The metadata file of a model: ``<name>.json`` beside ``<name>.tflite``."""
    return os.path.splitext(model_path)[0] + ".json"


def read_metadata(path: str) -> dict[str, Any]:
    """The metadata JSON object at ``path``.

    Raises:
      ModelFileError: the file is not JSON or not a JSON object (a damaged or foreign file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            metadata = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFileError(
            f"{path!r} is not valid metadata JSON ({error}); export the model again with sit-export."
        ) from error
    if not isinstance(metadata, dict):
        raise ModelFileError(f"{path!r} is not sit-export metadata: expected a JSON object.")
    return metadata


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


def to_model_dtype(value: Any, dtype: np.dtype, name: str, expected_shape: tuple) -> np.ndarray:
    """``value`` as an array of ``dtype``, refused unless the cast keeps every value exactly or finitely.

    Floats may round (float64 to float32) but must stay finite after the
    cast; integers must lie in ``dtype``'s range. ``expected_shape`` only
    words the message for ragged input.

    Raises:
      PolicyInputError: ragged nesting, a dtype of another kind, a value out of
        range, or a value that is not finite in ``dtype``.
    """
    try:
        array = np.asarray(value)
    except ValueError as error:  # numpy: "setting an array element with a sequence ..."
        raise PolicyInputError(
            f"The {name} must be a rectangular array of shape {expected_shape}; received a ragged "
            f"nested sequence ({error})."
        ) from error
    if array.dtype == object:
        raise PolicyInputError(
            f"The {name} must be a rectangular numeric array of shape {expected_shape}; received "
            "an object array (ragged or mixed nesting)."
        )
    kind_ok = np.can_cast(array.dtype, dtype, "same_kind") or (
        dtype.kind in "iu" and array.dtype.kind in "iub"
    )
    if not kind_ok:  # e.g. floats for a uint8 image
        raise PolicyInputError(f"Expected an {name} of dtype {dtype.name}; received {array.dtype.name}.")
    if dtype.kind in "iu" and array.dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise PolicyInputError(
                f"Expected {name} values in [{info.min}, {info.max}] (dtype {dtype.name}); "
                f"received values in [{low}, {high}]."
            )
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, with the cause
        cast = array.astype(dtype, copy=False)
    if cast.dtype.kind == "f" and not np.all(np.isfinite(cast)):
        if array.dtype.kind == "f" and np.all(np.isfinite(array)):
            raise PolicyInputError(
                f"The {name} has values beyond {dtype.name}'s range (largest finite "
                f"{float(np.finfo(dtype).max):.3g}); received a largest magnitude of "
                f"{float(np.max(np.abs(array))):.3g}."
            )
        raise PolicyInputError(f"The {name} contains NaN or infinite values.")
    return cast


class TFLitePolicy:
    """A ``.tflite`` policy exported by ``sit-export``, with its metadata and (recurrent) state.

    Args:
      model_path: the ``.tflite`` file.
      metadata_file: its metadata; default: ``metadata_path(model_path)``.
      num_threads: interpreter threads, at least 1.
      verify_checksum: refuse a model whose bytes differ from the SHA-256 its
        export recorded (``check_checksum``); False skips that check.

    Raises:
      FileNotFoundError: the model or its metadata is missing.
      ModelFileError: the model or its metadata is damaged.
      ValueError: ``num_threads < 1``.
    """

    def __init__(
        self,
        model_path: str,
        metadata_file: str | None = None,
        num_threads: int = 1,
        verify_checksum: bool = True,
    ):
        if int(num_threads) != num_threads or num_threads < 1:
            raise ValueError(f"num_threads must be a positive integer; received {num_threads!r}.")
        metadata_file = metadata_file or metadata_path(model_path)
        for path in (model_path, metadata_file):
            check_not_unfinished(path)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path!r} does not exist; export a policy with sit-export first.")
        check_not_staged(model_path)
        self.metadata: dict[str, Any] = read_metadata(metadata_file)
        if verify_checksum:
            check_checksum(model_path, self.metadata, metadata_file)
        self._interpreter = make_interpreter(model_path, int(num_threads))
        self._runner = self._interpreter.get_signature_runner()
        self._inputs = {
            name: (tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]))
            for name, detail in self._runner.get_input_details().items()
        }
        if OBSERVATION not in self._inputs:
            raise ModelFileError(
                f"{model_path!r} is not a sit-export policy: its signature has no {OBSERVATION!r} input."
            )
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
        ``"action"`` is the greedy action. The state advances only when the
        observation and every output pass the checks (module docstring).

        Raises:
          PolicyInputError: wrong shape, dtype or number of sensors, or a
            value that is not finite in the model's input dtype.
          PolicyOutputError: an output or next state is not finite (state unchanged).
        """
        inputs = self._check(observation)
        inputs.update(self.state)
        outputs = self._runner(**inputs)
        bad = sorted(
            name
            for name, value in outputs.items()
            if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value))
        )
        if bad:
            raise PolicyOutputError(
                f"The model's {', '.join(bad)} for this observation are not finite (float32 overflow "
                f"inside the model; largest input magnitude {_largest(inputs[OBSERVATION]):.3g}); "
                "nothing was returned and the recurrent state is unchanged."
            )
        for name in self.state_names:
            self.state[name] = outputs["next_" + name]
        return {name: value[0] for name, value in outputs.items() if not name.startswith(NEXT_STATE_PREFIX)}

    def action(self, observation: np.ndarray) -> np.ndarray:
        """The greedy action for one observation (``step(observation)["action"]``)."""
        return self.step(observation)["action"]

    def _check(self, observation: Any) -> dict[str, np.ndarray]:
        expected_shape, dtype = self.observation_shape, self.observation_dtype
        described = str(expected_shape)
        if self.takes_sensor_set:
            described = f"{('n', *expected_shape[1:])} with n <= {expected_shape[0]}"
        observation = to_model_dtype(observation, dtype, "observation", described)
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
        if observation.ndim != len(expected_shape) or observation.shape[1:] != expected_shape[1:]:
            raise PolicyInputError(
                f"Expected sensor readings of shape {('n', *expected_shape[1:])} with "
                f"n <= {expected_shape[0]}; received {observation.shape}."
            )
        padded, mask = pad_sensors(observation, expected_shape[0])
        return {OBSERVATION: padded[None], SENSOR_MASK: mask[None]}


def _largest(array: np.ndarray) -> float:
    return float(np.max(np.abs(array.astype(np.float64)))) if array.size else 0.0
