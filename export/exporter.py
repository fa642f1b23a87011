"""``export_policy``: a training folder to a TF Serving SavedModel and TFLite models, with parity reports.

<output_dir>/saved_model/models.config
<output_dir>/saved_model/<model_name>/<version>/...       (export.saved_model)
<output_dir>/tflite/<model_name>_<quantization>.tflite    (export.tflite)
<output_dir>/tflite/<model_name>_<quantization>.json      (metadata, parity report included)
<output_dir>/export_report.json                           (sizes and parity of every model)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from sit_keras.export import saved_model, tflite
from sit_keras.export.metadata import build_metadata
from sit_keras.export.parity import compare
from sit_keras.export.policy_model import TrainedPolicy, load_trained_policy
from sit_keras.export.rollouts import collect_examples, representative_data

FORMATS = ("saved_model", "tflite")


def export_policy(
    root_dir: str,
    output_dir: str,
    model_name: str = "policy",
    formats: Sequence[str] = FORMATS,
    quantizations: Sequence[str] = tflite.QUANTIZATIONS,
    max_sensors: int | None = None,
    num_examples: int = 256,
    allow_flex_ops: bool = False,
    version: int | None = None,
    serving_base_path: str = "/models",
    seed: int = 20_000,
) -> dict[str, Any]:
    """Exports the policy of ``root_dir``; returns (and writes) the export report.

    Args:
      root_dir: a training folder (``sit-train`` or ``sit-distill``).
      output_dir: where the models go (layout in the module docstring).
      model_name: the TF Serving model name and the TFLite file prefix.
      formats, quantizations: subsets of ``FORMATS`` and ``tflite.QUANTIZATIONS``.
      max_sensors: rows of a sensor set TFLite model (default: the training
        observation's); the SavedModel takes any number.
      num_examples: real rollout steps of the policy in its training
        environment (seeds from ``seed``): every other step calibrates int8
        models, the rest check every TFLite model against TensorFlow.
      allow_flex_ops: allow TensorFlow (Flex) ops in TFLite models.
      version: the SavedModel version (default: the next free one).
      serving_base_path: the model server's path of ``<output_dir>/saved_model``.

    Raises:
      ValueError: unknown format or quantisation, or ``max_sensors`` for a
        policy without a sensor set.
      tflite.UnsupportedOpsError: a TFLite model would need non-built-in ops.
    """
    _check_subset(formats, FORMATS, "format")
    _check_subset(quantizations, tflite.QUANTIZATIONS, "quantization")
    policy = load_trained_policy(root_dir)
    if max_sensors is not None and not policy.takes_sensor_set:
        raise ValueError(
            f"max_sensors is only for sensor set policies; {policy.description.network_class} is not."
        )
    _check_zero_initial_state(policy)
    options = {"allow_flex_ops": allow_flex_ops, "num_examples": num_examples, "seed": seed}
    report: dict[str, Any] = {"root_dir": root_dir, "checkpoint": policy.checkpoint, "models": {}}
    if "saved_model" in formats:
        function = policy.serving_function(batch_size=None)
        metadata = build_metadata(policy, function, "saved_model", options)
        path = saved_model.export_saved_model(
            policy, os.path.join(output_dir, "saved_model"), model_name, metadata, version, serving_base_path
        )
        report["models"]["saved_model"] = {"path": path, "bytes": _folder_size(path)}
    if "tflite" in formats and quantizations:
        report["models"].update(
            _export_tflite(
                policy,
                os.path.join(output_dir, "tflite"),
                model_name,
                quantizations,
                max_sensors,
                num_examples,
                seed,
                options,
            )  # fmt: skip
        )
    with open(os.path.join(output_dir, "export_report.json"), "w") as f:
        json.dump(report, f, indent=2)
    return report


def _export_tflite(
    policy: TrainedPolicy, tflite_dir: str, model_name: str, quantizations: Sequence[str],
    max_sensors: int | None, num_examples: int, seed: int, options: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    os.makedirs(tflite_dir, exist_ok=True)
    num_sensors = max_sensors or (int(policy.observation_spec.shape[0]) if policy.takes_sensor_set else None)
    examples = collect_examples(policy, max(num_examples, 2), seed=seed, num_sensors=num_sensors)
    # Alternate steps: both halves span the same stretch of episodes (int8 ranges need late states too).
    calibration, held_out = examples[0::2], examples[1::2]
    function = policy.serving_function(batch_size=1, num_sensors=num_sensors)
    models = {}
    for quantization in quantizations:
        flatbuffer = tflite.convert_function(
            function,
            policy.network,
            quantization,
            representative_data(calibration),
            options["allow_flex_ops"],
        )
        path = os.path.join(tflite_dir, f"{model_name}_{quantization}.tflite")
        with open(path, "wb") as f:
            f.write(flatbuffer)
        parity = compare(path, held_out, _action_range(policy))
        parity["passed"] = parity["unexplained_disagreements"] == 0
        metadata = build_metadata(policy, function, "tflite", {**options, "quantization": quantization})
        metadata["export"]["parity"] = parity
        with open(os.path.splitext(path)[0] + ".json", "w") as f:
            json.dump(metadata, f, indent=2)
        models[f"tflite_{quantization}"] = {"path": path, "bytes": len(flatbuffer), "parity": parity}
    return models


def _action_range(policy: TrainedPolicy) -> float:
    """The smallest span ``maximum - minimum`` of the action spec's components."""
    spec = policy.action_spec
    return float(np.min(np.asarray(spec.maximum, np.float64) - np.asarray(spec.minimum, np.float64)))


def _check_subset(values: Sequence[str], valid: Sequence[str], what: str) -> None:
    unknown = [v for v in values if v not in valid]
    if unknown:
        raise ValueError(
            f"Unknown {what} {', '.join(map(repr, unknown))}. Expected some of: {', '.join(valid)}."
        )


def _check_zero_initial_state(policy: TrainedPolicy) -> None:
    """The runtime starts episodes from zeros: the network's initial state must be zeros."""
    if any(np.any(t.numpy() != 0) for t in policy.initial_state(1)):
        raise ValueError(
            f"{policy.description.network_class}'s initial state is not zero; the runtime assumes it is."
        )


def _folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
