"""What export needs to rebuild a trained policy's network, written by every trainer.

Each trainer (PPO, SAC, DQN, ...) writes ``<root_dir>/policy_network.json``
next to its checkpoints: the agent, the class and constructor arguments of
the network that acts (actor or Q-network), the object path of that network
inside the ``agent`` entry of ``<root_dir>/checkpoints``, the specs, and the
environment. ``build_network`` + ``restore_network`` then give that network
with its trained weights, without rebuilding the agent or the environment.

Network classes are looked up by name among those decorated with
``register_network``; each takes ``(observation_spec, action_spec, **kwargs)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import tensorflow as tf
from tf_agents.networks import network
from tf_agents.specs import tensor_spec

DESCRIPTION_FILE = "policy_network.json"
CHECKPOINT_DIR = "checkpoints"

# Modules whose networks can act; imported before a network is built by name.
NETWORK_MODULES = (
    "sit_keras.agents.networks.actor_critic",
    "sit_keras.agents.networks.sac_networks",
    "sit_keras.agents.networks.q_networks",
    "sit_keras.agents.networks.sensor_networks",
)

_NETWORKS: dict[str, type] = {}
NetworkClass = TypeVar("NetworkClass", bound=type)


def register_network(cls: NetworkClass) -> NetworkClass:
    """Class decorator: makes ``cls`` buildable by name from a description."""
    _NETWORKS[cls.__name__] = cls
    return cls


def spec_to_json(spec: tf.TensorSpec) -> dict[str, Any]:
    """A tensor spec as JSON: shape, dtype and, for bounded specs, the bounds."""
    out: dict[str, Any] = {"shape": list(spec.shape), "dtype": spec.dtype.name}
    if isinstance(spec, tensor_spec.BoundedTensorSpec):
        out["minimum"] = _bound(spec.minimum)
        out["maximum"] = _bound(spec.maximum)
    return out


def _bound(value: Any) -> Any:
    """A scalar when every element is the same (image bounds are 255 everywhere), else a list."""
    array = np.asarray(value)
    return array.flat[0].item() if array.size and np.all(array == array.flat[0]) else array.tolist()


def spec_from_json(data: Mapping[str, Any]) -> tf.TensorSpec:
    """The inverse of ``spec_to_json``."""
    dtype = tf.as_dtype(data["dtype"])
    if "minimum" in data:
        return tensor_spec.BoundedTensorSpec(
            data["shape"], dtype, np.asarray(data["minimum"]), np.asarray(data["maximum"])
        )
    return tf.TensorSpec(data["shape"], dtype)


@dataclasses.dataclass(frozen=True)
class PolicyNetworkDescription:
    """The contents of ``policy_network.json``.

    Attributes:
      agent: ``"ppo"``, ``"sac"``, ``"dqn"``, ``"c51"``, ...
      network_class: a ``register_network`` class name.
      network_kwargs: its constructor arguments after the two specs (JSON).
      checkpoint_attribute: the network's attribute path in the agent, e.g.
        ``"_actor_net"`` (PPO), ``"_q_network"`` (DQN, C51) or
        ``"_actor_network"`` (SAC); dots separate nested attributes.
      observation_spec, action_spec: the environment's specs.
      env_name, env_kwargs: the training environment (``environments.load``).
      extra: agent-specific facts export needs (e.g. C51's ``min_q_value`` /
        ``max_q_value``), JSON.
      eval_env_kwargs: the keywords the run evaluated with (``env_kwargs``
        updated by ``train_eval.eval_env_kwargs``; Atari: whole games), which
        ``sit-eval`` uses; ``None`` in folders written before it was recorded.
    """

    agent: str
    network_class: str
    network_kwargs: Mapping[str, Any]
    checkpoint_attribute: str
    observation_spec: tf.TensorSpec
    action_spec: tf.TensorSpec
    env_name: str
    env_kwargs: Mapping[str, Any]
    extra: Mapping[str, Any]
    eval_env_kwargs: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["observation_spec"] = spec_to_json(self.observation_spec)
        data["action_spec"] = spec_to_json(self.action_spec)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyNetworkDescription:
        data = dict(data)
        data["observation_spec"] = spec_from_json(data["observation_spec"])
        data["action_spec"] = spec_from_json(data["action_spec"])
        return cls(**data)


def jsonable(value: Any) -> Any:
    """Tuples to lists and numpy scalars to Python, recursively (gin gives tuples)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_description(
    root_dir: str,
    *,
    agent: str,
    network: network.Network,
    network_kwargs: Mapping[str, Any],
    checkpoint_attribute: str,
    env_name: str,
    env_kwargs: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    eval_env_kwargs: Mapping[str, Any] | None = None,
) -> PolicyNetworkDescription:
    """Writes ``<root_dir>/policy_network.json`` for ``network`` (a registered class) and returns it."""
    name = type(network).__name__
    if name not in _NETWORKS:
        raise ValueError(f"{name} is not registered with policy_network.register_network.")
    description = PolicyNetworkDescription(
        agent=agent,
        network_class=name,
        network_kwargs=jsonable(dict(network_kwargs)),
        checkpoint_attribute=checkpoint_attribute,
        observation_spec=network.input_tensor_spec,
        action_spec=_action_spec_of(network),
        env_name=env_name,
        env_kwargs=jsonable(dict(env_kwargs or {})),
        extra=jsonable(dict(extra or {})),
        eval_env_kwargs=None if eval_env_kwargs is None else jsonable(dict(eval_env_kwargs)),
    )
    with open(os.path.join(root_dir, DESCRIPTION_FILE), "w") as f:
        json.dump(description.to_json(), f, indent=2)
    return description


def _action_spec_of(net: network.Network) -> tf.TensorSpec:
    spec = getattr(net, "action_spec", None) or getattr(net, "_action_spec", None)
    if spec is None:
        raise ValueError(f"{type(net).__name__} must have an `action_spec` or `_action_spec` attribute.")
    return spec


def read_description(root_dir: str) -> PolicyNetworkDescription:
    """Reads ``<root_dir>/policy_network.json``.

    Raises:
      FileNotFoundError: ``root_dir`` is not a training folder of this project.
    """
    path = os.path.join(root_dir, DESCRIPTION_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path!r} does not exist: {root_dir!r} is not a training folder written by sit-train "
            f"(expected {DESCRIPTION_FILE} and {CHECKPOINT_DIR}/)."
        )
    with open(path) as f:
        return PolicyNetworkDescription.from_json(json.load(f))


def network_class(name: str) -> type:
    """The registered network class ``name`` (the modules of ``NETWORK_MODULES`` are imported first)."""
    for module in NETWORK_MODULES:
        importlib.import_module(module)
    if name not in _NETWORKS:
        raise ValueError(f"Unknown network class {name!r}; registered: {', '.join(sorted(_NETWORKS))}.")
    return _NETWORKS[name]


def build_network(description: PolicyNetworkDescription) -> network.Network:
    """A fresh (untrained, built) network of the described class."""
    cls = network_class(description.network_class)
    net = cls(description.observation_spec, description.action_spec, **description.network_kwargs)
    net.create_variables()
    return net


def restore_network(net: network.Network, root_dir: str, attribute: str, path: str | None = None) -> str:
    """Loads the newest training checkpoint of ``root_dir`` (or ``path``) into ``net``; returns its path.

    Only the network's variables are read (matched by object path, not by
    name), and every one of them must be in the checkpoint.

    Raises:
      FileNotFoundError: no checkpoint in ``<root_dir>/checkpoints`` (``path`` not given).
    """
    if path is None:
        checkpoint_dir = os.path.join(root_dir, CHECKPOINT_DIR)
        path = tf.train.latest_checkpoint(checkpoint_dir)
        if path is None:
            raise FileNotFoundError(
                f"No training checkpoint in {checkpoint_dir!r}; train with sit-train first."
            )
    status = _agent_checkpoint(net, attribute).read(path)
    status.expect_partial()
    status.assert_existing_objects_matched()
    return path


def save_network(net: network.Network, root_dir: str, attribute: str, step: int) -> str:
    """Writes ``net``'s variables alone as ``<root_dir>/checkpoints/ckpt-<step>``, where an agent's
    checkpoint keeps them, so that ``restore_network`` reads it as a training checkpoint; returns its path."""
    manager = tf.train.CheckpointManager(
        _agent_checkpoint(net, attribute), os.path.join(root_dir, CHECKPOINT_DIR), max_to_keep=1
    )
    return manager.save(checkpoint_number=step)


def _agent_checkpoint(net: network.Network, attribute: str) -> tf.train.Checkpoint:
    """Stand-ins for the agent's object graph down to the network (``attribute``: its path in the agent)."""
    node: Any = net
    for name in reversed(attribute.split(".")):
        node = tf.train.Checkpoint(**{name: node})
    return tf.train.Checkpoint(agent=node)
