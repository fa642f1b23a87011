"""Requests to TensorFlow Serving for an exported policy: REST JSON and gRPC ``PredictRequest``.

REST (port 8501)::

    POST http://<host>:8501/v1/models/<model_name>[/versions/<v>]:predict
    {"signature_name": "serving_default", "inputs": {"observation": [[...]]}}
    -> {"outputs": {"action": [2], "logits": [[...]]}}

gRPC (port 8500): ``PredictionService.Predict`` with
``grpc_predict_request(...)``; read the reply with ``parse_grpc_response``.
Inputs are the SavedModel's ``serving_default`` inputs, each with a batch
axis (``observation``; ``sensor_mask`` and ``state_*`` where the policy has
them); see the model's ``assets.extra/sit_metadata.json``.

Both request builders check the inputs before a request leaves the client
(``check_inputs``), so a mistake is a ``ValueError`` naming the input, what
was expected and what was received, rather than a server error to decode.
Given the model's metadata (``metadata=read_metadata(version_dir)``), the
check is the model's own: every input present and no other, dtypes, every
axis, one batch and one number of readings across inputs, finite floats, a
reading in every example of a sensor set; values are converted to the
model's dtypes where that changes none of them (int64 pixels to ``uint8``,
float64 to ``float32``, rounded), since TF Serving would refuse other dtypes.
Without it, only what holds for every model is checked: numeric arrays with
one batch of at least 1 example across the inputs, and finite floats. A
client without the model's files gets the same contract from the server:
``metadata_from_server`` reads TF Serving's model metadata
(``rest_metadata_url``), and ``metadata_from_signature`` a loaded signature.

Where values change silently without these checks: a signature called with
arrays converts them in the caller's process (int64 300 -> uint8 44, -1 ->
255, NaN -> 0), before the model can see them; ``call_signature`` checks
first. TF Serving's REST API takes any JSON integer of the int32 range for a
uint8 input and keeps its low byte (300 -> 44; non-integers such as 2.5 or
NaN are refused), and ``tf.make_tensor_proto`` does the same to a gRPC
request: docs/export.md, "Values a uint8 input cannot hold".
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2

from sit_keras.export import runtime

SIGNATURE = "serving_default"
METADATA_PATH = os.path.join("assets.extra", "sit_metadata.json")
SENSOR_MASK = "sensor_mask"
BATCH, SENSORS = "batch", "sensors"


# A host name or IPv4 address (RFC 1123 labels), or an IPv6 address in brackets.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\]")
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _rest_model_url(host: str, model_name: str, version: int | None, port: int) -> str:
    """``http://<host>:<port>/v1/models/<model_name>[/versions/<version>]``, each part checked."""
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise ValueError(f"host must be a host name or an IP address (IPv6 in brackets); received {host!r}.")
    if not isinstance(model_name, str) or not _MODEL_NAME.fullmatch(model_name):
        raise ValueError(
            f"model_name must be a plain name (letters, digits, _ . -); received {model_name!r}."
        )
    for name, value, low, high in (("port", port, 1, 65535), ("version", version, 1, None)):
        if value is None and name == "version":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            limits = f"from {low} to {high}" if high else f"at least {low}"
            raise ValueError(f"{name} must be an integer {limits}; received {value!r}.")
    version_part = f"/versions/{version}" if version is not None else ""
    return f"http://{host}:{port}/v1/models/{model_name}{version_part}"


def rest_predict_url(host: str, model_name: str, version: int | None = None, port: int = 8501) -> str:
    """The REST ``:predict`` URL of a model (its newest version unless ``version``).

    Raises:
      ValueError: a host, model name, version or port that cannot make a valid URL, in one sentence.
    """
    return _rest_model_url(host, model_name, version, port) + ":predict"


def rest_metadata_url(host: str, model_name: str, version: int | None = None, port: int = 8501) -> str:
    """The REST URL of TF Serving's model metadata (``GET``): its answer goes to ``metadata_from_server``.

    Raises:
      ValueError: as ``rest_predict_url``.
    """
    return _rest_model_url(host, model_name, version, port) + "/metadata"


def metadata_from_server(answer: str | Mapping[str, Any], signature_name: str = SIGNATURE) -> dict[str, Any]:
    """The request contract in TF Serving's own model metadata, for a client without the model's files.

    ``answer`` is the JSON of ``GET rest_metadata_url(...)`` (a
    ``GetModelMetadataResponse`` whose ``signature_def`` metadata holds every
    signature). The result works as ``metadata=`` of the request builders:
    each input's dtype and shape, so that the client refuses what the server
    would refuse, and what it would silently change (a uint8 input keeps the
    low byte of a JSON integer: 300 arrives as 44).

    Raises:
      ValueError: an answer without that signature or with an input of unknown rank.
    """
    try:
        body = json.loads(answer) if isinstance(answer, str) else answer
        signatures = body["metadata"]["signature_def"]["signature_def"]
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(
            "Not a TF Serving model metadata answer (expected metadata.signature_def.signature_def): "
            f"{error}."
        ) from None
    if signature_name not in signatures:
        raise ValueError(
            f"The model has no signature {signature_name!r}; it has: "
            f"{', '.join(sorted(n for n in signatures if not n.startswith('__')))}."
        )
    inputs = {}
    for name, info in signatures[signature_name].get("inputs", {}).items():
        shape = info.get("tensor_shape", {})
        if shape.get("unknown_rank"):
            raise ValueError(f"Input {name!r} has an unknown rank in the model metadata; cannot check it.")
        dims = [int(d.get("size", -1)) for d in shape.get("dim", [])]
        dtype = tf.dtypes.as_dtype(types_pb2.DataType.Value(info["dtype"])).name
        inputs[name] = {"dtype": dtype, "shape": [None if d < 0 else d for d in dims]}
    return {"signature_name": signature_name, "inputs": inputs}


def metadata_from_signature(signature: Any) -> dict[str, Any]:
    """The request contract of a loaded signature (``tf.saved_model.load(path).signatures[name]``).

    For models without sit-export's metadata; with it, ``read_metadata`` also knows a sensor set's axis.
    """
    specs = signature.structured_input_signature[1]
    inputs = {name: {"dtype": spec.dtype.name, "shape": spec.shape.as_list()} for name, spec in specs.items()}
    return {"inputs": inputs}


def call_signature(
    signature: Any, inputs: Mapping[str, Any], metadata: Mapping[str, Any] | str | None = None
) -> dict[str, np.ndarray]:
    """Runs a loaded SavedModel signature on ``inputs`` after the client's checks; outputs as arrays.

    Calling the signature with arrays directly converts them to its dtypes in
    the caller's process, where the model cannot see them: int64 300 becomes
    uint8 44, -1 becomes 255 and a float NaN 0. Here they are refused first,
    against ``metadata`` (default: ``metadata_from_signature(signature)``).

    Raises:
      ValueError: an input the model would refuse or that its dtype would change (``check_inputs``).
    """
    arrays = check_inputs(inputs, metadata_from_signature(signature) if metadata is None else metadata)
    outputs = signature(**{name: tf.constant(array) for name, array in arrays.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def read_metadata(path: str, verify_checksums: bool = True) -> dict[str, Any]:
    """The metadata of an exported SavedModel: ``path`` is its version folder or the metadata file.

    Given the version folder, its files are checked against the SHA-256s the
    export recorded (``verify_checksums=False`` skips that).

    Raises:
      FileNotFoundError: no metadata there.
      runtime.ModelFileError: the file is not a JSON object (a damaged or foreign file), or a file of
        the version folder differs from what the export recorded.
    """
    file = os.path.join(path, METADATA_PATH) if os.path.isdir(path) else path
    runtime.check_not_unfinished(file)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{file!r} does not exist; pass a SavedModel version folder from sit-export.")
    metadata = runtime.read_metadata(file)
    if os.path.isdir(path) and verify_checksums:
        runtime.check_folder_checksums(path, metadata, file)
    return metadata


def _shape_text(axes: Sequence[Any]) -> str:
    return "(" + ", ".join(map(str, axes)) + ("," if len(axes) == 1 else "") + ")"


def _as_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a numeric or boolean array; a ragged or non-numeric value is a ``ValueError``."""
    try:
        array = np.asarray(value)
    except ValueError as error:  # numpy refuses ragged nested lists
        raise ValueError(
            f"Input {name!r} must be a rectangular array; received a ragged value ({error})."
        ) from None
    if array.dtype.kind not in "biuf":
        raise ValueError(
            f"Input {name!r} must be a numeric or boolean array; received dtype {array.dtype.name}."
        )
    return array


def _converted(name: str, array: np.ndarray, dtype_name: str) -> np.ndarray:
    """``array`` in the input's dtype, or a ``ValueError`` when the conversion would change the request.

    Integers convert when the input's dtype holds every value exactly (0 to
    255 for ``uint8``; up to 2**24 in magnitude for ``float32``). Floats
    convert to a float input, rounded as the TFLite runtime rounds them, and
    must then be finite: 1e300 is not a float32. Booleans go to boolean
    inputs only, and floats never to integer inputs.
    """
    dtype = np.dtype(dtype_name)
    received = array.dtype
    refused = ValueError(f"Input {name!r} must have dtype {dtype.name}; received {received.name}.")
    if (dtype.kind == "b") != (received.kind == "b") or (dtype.kind in "iu" and received.kind == "f"):
        raise refused
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(dtype, copy=False)
    if received.kind in "iu" and array.size and not np.array_equal(converted.astype(received), array):
        values = f"{received.name} values from {array.min()} to {array.max()}"
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            raise ValueError(
                f"Input {name!r} must have dtype {dtype.name} (values {info.min} to {info.max}); "
                f"received {values}."
            )
        raise ValueError(
            f"Input {name!r} must have dtype {dtype.name}; received {values}, not all exact in {dtype.name}."
        )
    if dtype.kind == "f" and not np.all(np.isfinite(converted)):
        beyond = " in " + dtype.name if np.all(np.isfinite(array)) else ""
        raise ValueError(f"Input {name!r} must be finite{beyond}; received NaN or infinite values.")
    return converted


def _check_generic(arrays: Mapping[str, np.ndarray]) -> None:
    """Checks that hold for every model: a batch axis of one size (at least 1), finite floats."""
    batches = {}
    for name, array in arrays.items():
        if array.ndim == 0:
            raise ValueError(f"Input {name!r} must have a batch axis first; received a scalar.")
        batches[name] = array.shape[0]
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise ValueError(f"Input {name!r} must be finite; received NaN or infinite values.")
    if batches and min(batches.values()) < 1:
        name = min(batches, key=batches.get)
        raise ValueError(f"Input {name!r} must have at least 1 example; received a batch of 0.")
    if len(set(batches.values())) > 1:
        raise ValueError(f"All inputs must have the same batch size; received {batches}.")


def _check_against(arrays: dict[str, np.ndarray], inputs: Mapping[str, Any]) -> None:
    """Checks (and converts, in place) ``arrays`` against the metadata's ``inputs``."""
    unknown = sorted(set(arrays) - set(inputs))
    if unknown:
        raise ValueError(
            f"Input {unknown[0]!r} is not an input of this model; "
            f"expected inputs: {', '.join(sorted(inputs))}."
        )
    missing = sorted(set(inputs) - set(arrays))
    if missing:
        raise ValueError(
            f"Input {missing[0]!r} is required by this model (expected inputs: "
            f"{', '.join(sorted(inputs))}); received only: {', '.join(sorted(arrays)) or 'none'}."
        )
    sizes: dict[str, tuple[int, str]] = {}  # axis name -> (size, the input that set it)
    for name, spec in inputs.items():
        axes = spec.get("axes") or [BATCH, *(SENSORS if d is None else d for d in spec["shape"][1:])]
        array = arrays[name]
        expected = _shape_text(axes)
        if array.ndim != len(axes):
            hint = "; add the batch axis first (x[None])" if array.ndim == len(axes) - 1 else ""
            raise ValueError(
                f"Input {name!r} must have shape {expected}; received shape {array.shape}{hint}."
            )
        for axis, size in zip(axes, array.shape, strict=True):
            if isinstance(axis, str):
                if size < 1:
                    raise ValueError(
                        f"Input {name!r} must have at least 1 entry on its {axis} axis; "
                        f"received shape {array.shape}."
                    )
                first = sizes.setdefault(axis, (size, name))
                if first[0] != size:
                    raise ValueError(
                        f"Input {name!r} must have the same {axis} size as {first[1]!r} ({first[0]}); "
                        f"received shape {array.shape}."
                    )
            elif size != axis:
                raise ValueError(f"Input {name!r} must have shape {expected}; received shape {array.shape}.")
        arrays[name] = _converted(name, array, spec["dtype"])
    if SENSOR_MASK in arrays and not np.all(np.any(arrays[SENSOR_MASK], axis=1)):
        raise ValueError(
            f"Input {SENSOR_MASK!r} must mark at least one reading (True) in every example; "
            f"received an example without any."
        )


def check_inputs(
    inputs: Mapping[str, Any], metadata: Mapping[str, Any] | str | None = None
) -> dict[str, np.ndarray]:
    """``inputs`` as arrays, checked as the model will check them; see the module docstring.

    Args:
      inputs: input name to array (or nested list), each with a batch axis.
      metadata: the SavedModel's metadata (``read_metadata``), or its version
        folder or metadata file; ``None`` checks only what holds for every model.

    Returns:
      The inputs as arrays, converted to the model's dtypes (given ``metadata``).

    Raises:
      ValueError: one sentence naming the first bad input, the expected and the received.
    """
    if not inputs:
        raise ValueError("A request needs at least the 'observation' input; received no inputs.")
    arrays = {name: _as_array(name, value) for name, value in inputs.items()}
    if metadata is None:
        _check_generic(arrays)
        return arrays
    if isinstance(metadata, str):
        metadata = read_metadata(metadata)
    _check_against(arrays, metadata["inputs"])
    return arrays


def _checked(
    inputs: Mapping[str, Any], signature_name: str, metadata: Mapping[str, Any] | str | None
) -> dict[str, np.ndarray]:
    if metadata is not None:
        # sit-export's metadata describes serving_default; a server's answer names its signature.
        described = metadata.get("signature_name", SIGNATURE) if isinstance(metadata, Mapping) else SIGNATURE
        if signature_name != described:
            raise ValueError(
                f"The metadata describes the {described!r} signature; received signature_name "
                f"{signature_name!r} (pass metadata=None for TF-Agents' signatures)."
            )
    return check_inputs(inputs, metadata)


def rest_predict_body(
    inputs: Mapping[str, Any],
    signature_name: str = SIGNATURE,
    *,
    metadata: Mapping[str, Any] | str | None = None,
) -> str:
    """The JSON body of a REST predict request, in the columnar ``"inputs"`` format.

    Raises:
      ValueError: an input the model would refuse (``check_inputs``; pass
        ``metadata`` for the model's own checks).
    """
    arrays = _checked(inputs, signature_name, metadata)
    return json.dumps(
        {"signature_name": signature_name, "inputs": {name: a.tolist() for name, a in arrays.items()}}
    )


def parse_rest_response(body: str) -> dict[str, np.ndarray]:
    """The outputs of a REST predict reply (``{"outputs": {...}}``) as arrays."""
    outputs = json.loads(body)["outputs"]
    return {name: np.asarray(value) for name, value in outputs.items()}


def grpc_predict_request(
    model_name: str,
    inputs: Mapping[str, Any],
    signature_name: str = SIGNATURE,
    version: int | None = None,
    *,
    metadata: Mapping[str, Any] | str | None = None,
) -> predict_pb2.PredictRequest:
    """A gRPC ``PredictRequest`` for ``PredictionServiceStub(channel).Predict(request, timeout)``.

    Raises:
      ValueError: an input the model would refuse (``check_inputs``; pass
        ``metadata`` for the model's own checks).
    """
    arrays = _checked(inputs, signature_name, metadata)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    for name, value in arrays.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def parse_grpc_response(response: predict_pb2.PredictResponse) -> dict[str, np.ndarray]:
    """The outputs of a gRPC ``PredictResponse`` as arrays."""
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
