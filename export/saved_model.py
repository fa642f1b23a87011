"""SavedModels in TensorFlow Serving's layout, with a ``models.config`` for the model server.

    <serving_dir>/models.config
    <serving_dir>/<model_name>/<version>/saved_model.pb, variables/, policy_specs.pbtxt,
                                         assets.extra/sit_metadata.json

Signatures of each SavedModel:

- ``serving_default``: named inputs (``observation``; ``sensor_mask`` and
  ``state_*`` where the policy has them) to named outputs (``action`` and
  ``logits`` / ``loc`` + ``scale`` / ``q_values``; ``next_state_*``), any
  batch size. This is what TF Serving's REST and gRPC ``Predict`` call.
- TF-Agents' own ``action``, ``get_initial_state``, ``get_train_step`` and
  ``get_metadata`` (``PolicySaver``), so that ``tf.saved_model.load`` /
  ``SavedModelPyTFEagerPolicy`` also run it as a greedy TF-Agents policy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tf_agents.policies import policy_saver

from sit_keras.export.policy_model import TrainedPolicy

MODELS_CONFIG = "models.config"
METADATA_PATH = os.path.join("assets.extra", "sit_metadata.json")
SERVING_SIGNATURE = "serving_default"


class _ServingPolicySaver(policy_saver.PolicySaver):
    """``PolicySaver`` that also writes a ``serving_default`` signature."""

    def add_signature(self, name: str, function: tf.types.experimental.ConcreteFunction) -> None:
        # PolicySaver keeps its signatures in this dict and passes it to tf.saved_model.save.
        self._signatures[name] = function


def next_version(model_dir: str) -> int:
    """One more than the largest numeric version folder in ``model_dir`` (1 if none)."""
    if not os.path.isdir(model_dir):
        return 1
    versions = [int(name) for name in os.listdir(model_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def export_saved_model(
    policy: TrainedPolicy,
    serving_dir: str,
    model_name: str,
    metadata: Mapping[str, Any],
    version: int | None = None,
    serving_base_path: str = "/models",
) -> str:
    """Writes ``<serving_dir>/<model_name>/<version>`` and the ``models.config``; returns the version folder.

    Args:
      policy: the restored policy.
      serving_dir: the model server's base folder (mounted as
        ``serving_base_path`` in the TF Serving container).
      model_name: the name clients use (``/v1/models/<model_name>:predict``).
      metadata: written to ``assets.extra/sit_metadata.json``.
      version: the version folder; default: the next free number.
      serving_base_path: where ``serving_dir`` is seen by the model server.

    Raises:
      ValueError: ``model_name`` is not a plain name, or the version exists.
    """
    if not model_name or os.sep in model_name or model_name.startswith("."):
        raise ValueError(f"model_name must be a plain folder name; received {model_name!r}")
    model_dir = os.path.join(serving_dir, model_name)
    version = next_version(model_dir) if version is None else version
    version_dir = os.path.join(model_dir, str(version))
    if os.path.exists(version_dir):
        raise ValueError(f"{version_dir!r} exists; TF Serving versions are immutable: pass another version.")
    saver = _ServingPolicySaver(policy.tf_agents_policy(), batch_size=None)
    saver.add_signature(SERVING_SIGNATURE, policy.serving_function(batch_size=None))
    saver.save(version_dir)
    metadata_path = os.path.join(version_dir, METADATA_PATH)
    os.makedirs(os.path.dirname(metadata_path), exist_ok=True)
    with open(metadata_path, "w") as f:
        json.dump(dict(metadata), f, indent=2)
    write_models_config(serving_dir, serving_base_path)
    return version_dir


def write_models_config(serving_dir: str, serving_base_path: str = "/models") -> str:
    """Writes ``models.config`` (a ``ModelServerConfig`` text proto) for every model in ``serving_dir``."""
    names = sorted(
        name
        for name in os.listdir(serving_dir)
        if os.path.isdir(os.path.join(serving_dir, name))
        and next_version(os.path.join(serving_dir, name)) > 1
    )
    entries = "".join(
        "  config {\n"
        f"    name: '{name}'\n"
        f"    base_path: '{serving_base_path.rstrip('/')}/{name}'\n"
        "    model_platform: 'tensorflow'\n"
        "  }\n"
        for name in names
    )
    path = os.path.join(serving_dir, MODELS_CONFIG)
    with open(path, "w") as f:
        f.write("model_config_list {\n" + entries + "}\n")
    return path
