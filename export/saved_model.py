"""SavedModels in TensorFlow Serving's layout, with a ``models.config`` for the model server.

    <serving_dir>/models.config
    <serving_dir>/<model_name>/<version>/saved_model.pb, variables/, policy_specs.pbtxt,
                                         assets.extra/sit_metadata.json

Signatures of each SavedModel (``SIGNATURES`` says the same, and goes into
the metadata):

- ``serving_default``: named inputs (``observation``; ``sensor_mask`` and
  ``state_*`` where the policy has them) to named outputs (``action`` and
  ``logits`` / ``loc`` + ``scale`` / ``q_values``; ``next_state_*``), any
  batch of at least 1. This is what TF Serving's REST and gRPC ``Predict``
  call. Every request is checked inside the graph before the network runs
  (``policy_model.checked_inputs``): a wrong rank, size, batch or dtype, a
  NaN or a sensor set example without readings fails with
  ``InvalidArgumentError`` (HTTP 400), never an abort of the server.
- TF-Agents' own ``action``, ``get_initial_state``, ``get_train_step`` and
  ``get_metadata`` (``PolicySaver``), so that ``SavedModelPyTFEagerPolicy``
  runs it as a greedy TF-Agents policy; ``action`` checks its inputs too.

Everything in the SavedModel loads and runs with TensorFlow alone (as TF
Serving loads it): TF-Agents' ``distribution`` function, whose output type
needs TensorFlow Probability to load, is left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tf_agents.policies import policy_saver, tf_policy

from sit_keras.export import runtime
from sit_keras.export.policy_model import TrainedPolicy

MODELS_CONFIG = "models.config"
METADATA_PATH = os.path.join("assets.extra", "sit_metadata.json")
SERVING_SIGNATURE = "serving_default"

# What each signature takes, gives and needs; written to the metadata (``serving_metadata``).
SIGNATURES: dict[str, str] = {
    SERVING_SIGNATURE: (
        "The policy for TF Serving's Predict: the named inputs and outputs of 'inputs' / 'outputs'. "
        "Needs TensorFlow only."
    ),
    "action": (
        "TF-Agents' greedy policy.action on flat inputs 0/step_type, 0/reward, 0/discount, "
        "0/observation (and 1/<state> for recurrent policies), each with a batch axis and the "
        "training spec's shape (a sensor set's training number of readings); outputs action "
        "(and state/<name>). Checked like serving_default. Runs with TensorFlow only; as a TF-Agents "
        "policy (tf_agents.policies.py_tf_eager_policy.SavedModelPyTFEagerPolicy, "
        "load_specs_from_pbtxt=True) it needs tf_agents, which imports tensorflow_probability, and "
        "policy_specs.pbtxt."
    ),
    "get_initial_state": (
        "TF-Agents' initial policy state for a batch_size (int32 scalar): zeros; empty for "
        "feed-forward policies. Needs TensorFlow only."
    ),
    "get_train_step": "TF-Agents' train step variable (-1: not recorded). Needs TensorFlow only.",
    "get_metadata": "TF-Agents' metadata variables (none). Needs TensorFlow only.",
}
NOT_SAVED = {
    "distribution": (
        "TF-Agents' policy.distribution is not saved: its output is a TensorFlow Probability "
        "distribution, which would make loading the SavedModel need tensorflow_probability; the "
        "greedy policy's distribution is a point mass on its action."
    ),
}


def serving_metadata() -> dict[str, Any]:
    """The ``serving`` entry of a SavedModel's metadata: the request contract and each signature's needs."""
    return {
        "signature": SERVING_SIGNATURE,
        "requests": (
            "Every input of 'inputs' is required, with its dtype and its shape: 'axes' names the batch "
            "(at least 1 example, the same in every input) and a sensor set's number of readings "
            "(at least 1, the same in every input); the other sizes are fixed. Floats must be finite, "
            "and a sensor_mask marks at least one reading in every example. A request that breaks this "
            "fails with InvalidArgumentError (TF Serving: HTTP 400): a wrong dtype in TensorFlow before "
            "the model runs, the rest in the model's first ops, whose message names the input, the "
            "expected shape and the received one. So does a request whose outputs would not be finite. "
            "There is no upper bound on the batch: limit the request size at the server."
        ),
        "signatures": dict(SIGNATURES),
        "not_saved": dict(NOT_SAVED),
        "requires": "tensorflow only (no tensorflow_probability or tf_agents import) to load and run it",
    }


class _ServingPolicySaver(policy_saver.PolicySaver):
    """``PolicySaver`` that also writes a ``serving_default`` signature, and no ``distribution``.

    ``PolicySaver`` saves ``policy.distribution`` as a function of the
    SavedModel's object graph. Its output is a TF-Agents / TF Probability
    distribution, whose type spec ``tf.saved_model.load`` must decode: loading
    failed in any process that had not imported ``tensorflow_probability``
    (``'tfp.distributions.Deterministic_ACTTypeSpec' has not been registered``).
    A greedy policy's distribution is a point mass on its ``action``, so
    nothing is lost by leaving it out.
    """

    def __init__(self, policy: tf_policy.TFPolicy, batch_size: int | None = None) -> None:
        super().__init__(policy, batch_size=batch_size)
        del self._policy.distribution

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
      metadata: written to ``assets.extra/sit_metadata.json.staged``; the export names it
        ``sit_metadata.json`` when it commits (``runtime.STAGED_SUFFIX``).
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
    metadata = dict(metadata)
    # What every file of the SavedModel must be: the serving client refuses a folder that differs.
    files = runtime.folder_sha256(version_dir, leave_out=METADATA_PATH)
    metadata["export"] = {**metadata.get("export", {}), "files_sha256": files}
    # Named METADATA_PATH when the export commits (exporter): until then the folder is unfinished.
    metadata_path = os.path.join(version_dir, METADATA_PATH + runtime.STAGED_SUFFIX)
    os.makedirs(os.path.dirname(metadata_path), exist_ok=True)
    with open(metadata_path, "w") as f:
        json.dump(metadata, f, indent=2)
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
