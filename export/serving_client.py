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
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

SIGNATURE = "serving_default"


def rest_predict_url(host: str, model_name: str, version: int | None = None, port: int = 8501) -> str:
    """The REST ``:predict`` URL of a model (its newest version unless ``version``)."""
    version_part = f"/versions/{version}" if version is not None else ""
    return f"http://{host}:{port}/v1/models/{model_name}{version_part}:predict"


def rest_predict_body(inputs: Mapping[str, np.ndarray], signature_name: str = SIGNATURE) -> str:
    """The JSON body of a REST predict request, in the columnar ``"inputs"`` format."""
    return json.dumps(
        {
            "signature_name": signature_name,
            "inputs": {name: np.asarray(v).tolist() for name, v in inputs.items()},
        }
    )


def parse_rest_response(body: str) -> dict[str, np.ndarray]:
    """The outputs of a REST predict reply (``{"outputs": {...}}``) as arrays."""
    outputs = json.loads(body)["outputs"]
    return {name: np.asarray(value) for name, value in outputs.items()}


def grpc_predict_request(
    model_name: str,
    inputs: Mapping[str, np.ndarray],
    signature_name: str = SIGNATURE,
    version: int | None = None,
) -> predict_pb2.PredictRequest:
    """A gRPC ``PredictRequest`` for ``PredictionServiceStub(channel).Predict(request, timeout)``."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(np.asarray(value)))
    return request


def parse_grpc_response(response: predict_pb2.PredictResponse) -> dict[str, np.ndarray]:
    """The outputs of a gRPC ``PredictResponse`` as arrays."""
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
