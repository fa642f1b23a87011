"""The metadata written beside every exported model: all a robot-side loader needs.

``<model>.json`` beside ``<model>.tflite``, and ``assets.extra/sit_metadata.json``
inside each SavedModel version:

- ``inputs`` / ``outputs``: names, shapes (``null``: any size), dtypes;
  a SavedModel's inputs also have ``axes``: ``"batch"``, ``"sensors"`` (a
  sensor set's number of readings) or the fixed size of each axis, which is
  what ``serving_client`` checks a request against;
- ``serving`` (SavedModel): the request contract, what each signature takes
  and needs, and what was left out (``saved_model.serving_metadata``);
- ``observation_spec``, ``action_spec``, ``preprocessing``, ``environment``;
- ``state``: the recurrent state's input names, its initial value (zeros)
  and when to reset it; ``sensor_set``: the maximum number of readings;
- ``training``: the training folder, source checkpoint, agent, network and
  the operative gin configuration;
- ``export``: format, quantisation and options, and the parity report.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from importlib import metadata as package_metadata
from typing import Any

import tensorflow as tf

from sit_keras.agents.networks.policy_network import spec_to_json
from sit_keras.export import saved_model
from sit_keras.export.policy_model import NEXT_STATE_PREFIX, TrainedPolicy, axis_names


def _specs_json(specs: Mapping[str, tf.TensorSpec] | Any) -> dict[str, dict[str, Any]]:
    return {name: {"shape": spec.shape.as_list(), "dtype": spec.dtype.name} for name, spec in specs.items()}


def _read_gin(root_dir: str) -> str | None:
    path = os.path.join(root_dir, "config.gin")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def build_metadata(
    policy: TrainedPolicy,
    function: tf.types.experimental.ConcreteFunction,
    export_format: str,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """The metadata of one exported model whose serving function is ``function``."""
    description = policy.description
    inputs = function.structured_input_signature[0][0]
    outputs = {name: tf.TensorSpec.from_tensor(t) for name, t in function.structured_outputs.items()}
    observation = inputs["observation"]
    metadata: dict[str, Any] = {
        "format": export_format,
        "sit_keras_version": package_metadata.version("sit-keras"),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": _specs_json(inputs),
        "outputs": _specs_json(outputs),
        "observation_spec": spec_to_json(description.observation_spec),
        "action_spec": spec_to_json(description.action_spec),
        "action": "greedy: argmax of logits / Q-values, or the mode of the squashed normal",
        "preprocessing": (
            f"Observations exactly as environments.load({description.env_name!r}, **environment.kwargs) "
            f"returns them: {observation.dtype.name}, shape {observation.shape.as_list()[1:]} per example; "
            "scaling (e.g. /255 for images) happens inside the model."
        ),
        "environment": {
            "name": description.env_name,
            "kwargs": dict(description.env_kwargs),
            # What the run evaluated with (Atari: whole games), which sit-eval uses.
            "evaluation_kwargs": dict(
                description.env_kwargs if description.eval_env_kwargs is None else description.eval_env_kwargs
            ),
        },
        "training": {
            "root_dir": os.path.abspath(policy.root_dir),
            "checkpoint": os.path.abspath(policy.checkpoint),
            "agent": description.agent,
            "network_class": description.network_class,
            "network_kwargs": dict(description.network_kwargs),
            "config_gin": _read_gin(policy.root_dir),
        },
        "export": dict(options),
    }
    if export_format == "saved_model":
        for name, axes in axis_names(inputs, policy.takes_sensor_set).items():
            metadata["inputs"][name]["axes"] = axes
        metadata["serving"] = saved_model.serving_metadata()
    if policy.is_stateful:
        metadata["state"] = {
            "inputs": policy.state_names,
            "outputs": [NEXT_STATE_PREFIX + name[len("state_") :] for name in policy.state_names],
            "initial": "zeros",
            "reset": "at every episode start; feed each next_state_* back as state_* on the next step",
        }
    if policy.takes_sensor_set:
        metadata["sensor_set"] = {
            "max_sensors": observation.shape[1],
            "mask": "sensor_mask: True for real readings; readings may come in any order",
        }
    return metadata
