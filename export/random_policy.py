"""Training folders without training, for export benchmarks and tests.

``write_random_policy_folder`` writes what a trainer would: a network with
random (perturbed) weights, checkpointed in the agent's object layout
(``agent/<attribute>``), and its ``policy_network.json``. Sizes, latencies
and exactness do not depend on training; action agreement of quantised
models does (their logits are nearly tied), so measure that on trained policies.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.train.utils import spec_utils

from sit_keras.agents.environments import load
from sit_keras.agents.networks import policy_network

_SMALL_SIT = {"dim": 16, "num_heads": 2, "local_layers": 1, "global_layers": 1, "output_dim": 16}
# The demo's SiT (configs/demo/sit.gin).
DEMO_SIT = {
    "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 3, "pool_size": 2,
    "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ExamplePolicy:
    """A small acting network of one family, in the layout its trainer writes."""

    network_class: str  # a policy_network.register_network class name
    network_kwargs: Mapping[str, Any]
    env_name: str
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    agent: str = "ppo"
    attribute: str = "_actor_net"
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _actor(encoder: str, encoder_kwargs: Mapping[str, Any], env_name: str) -> ExamplePolicy:
    return ExamplePolicy(
        "EncoderActorNetwork", {"encoder": encoder, "encoder_kwargs": encoder_kwargs}, env_name
    )


_TINY_VIT = {
    "patch_size": 16,
    "embed_dim": 16,
    "num_layers": 1,
    "num_heads": 2,
    "mlp_dim": 32,
    "output_dim": 16,
}

EXAMPLE_POLICIES: dict[str, ExamplePolicy] = {
    "sit": _actor("sit", DEMO_SIT, "minigrid:LavaGapS5"),
    "siet": _actor("siet", _SMALL_SIT, "procgen:coinrun"),
    "sit_star": _actor("sit_star", _SMALL_SIT, "procgen:coinrun"),
    "vit": _actor("vit", _TINY_VIT, "procgen:coinrun"),
    "impala_cnn": _actor("impala_cnn", {"channels": (4, 8), "output_dim": 16}, "procgen:coinrun"),
    "cnn": _actor("cnn", {"filters": (8, 16), "strides": 1}, "minigrid:LavaGapS5"),
    "mlp": _actor("mlp", {"units": (32, 32)}, "gymnasium:CartPole-v1"),
    "sac_state": ExamplePolicy(
        "SacActorNetwork",
        {"encoder": "mlp", "fc_layer_params": (32, 32)},
        "dmc:cartpole-swingup",
        agent="sac",
        attribute="_actor_network",
    ),  # fmt: skip
    "dqn": ExamplePolicy(
        "EncoderQNetwork", {"encoder": "mlp", "encoder_kwargs": {"units": (32, 32)}}, "gymnasium:CartPole-v1",
        agent="dqn", attribute="_q_network",
    ),
    "c51_atari": ExamplePolicy(
        "EncoderCategoricalQNetwork", {"encoder": "data_efficient_cnn", "num_atoms": 51}, "atari:Pong",
        agent="c51", attribute="_q_network", extra={"min_q_value": -10.0, "max_q_value": 10.0},
    ),
    "attention_neuron": ExamplePolicy(
        "SensorActorNetwork", {"encoder_kwargs": {"output_dim": 16}, "fc_layer_params": (16,)},
        "dmc:cartpole-swingup",
    ),
}  # fmt: skip
"""Small policies of every encoder family of the registry (``sit_keras.models.registry.ENCODERS``) and
every agent, each with an environment (``SensorActorNetwork`` is the ``"attention_neuron"`` encoder)."""


def write_example_policy_folder(root_dir: str, name: str, seed: int = 0) -> Any:
    """``write_random_policy_folder`` for an ``EXAMPLE_POLICIES`` entry; returns the network."""
    example = EXAMPLE_POLICIES[name]
    network_class = policy_network.network_class(example.network_class)
    return write_random_policy_folder(
        root_dir, network_class, example.network_kwargs, example.env_name, example.env_kwargs,
        example.agent, example.attribute, example.extra, seed,
    )  # fmt: skip


def perturb(variables: list[tf.Variable], seed: int = 0, scale: float = 0.3) -> None:
    """Adds noise to every weight, so that no symmetry or parity holds by accident of initialisation."""
    rng = np.random.default_rng(seed)
    for variable in variables:
        noise = rng.normal(0.0, scale, variable.shape) * (np.std(variable.numpy()) + 0.05)
        variable.assign_add(noise.astype(variable.dtype.as_numpy_dtype))


def write_random_policy_folder(
    root_dir: str,
    network_class: type,
    network_kwargs: Mapping[str, Any],
    env_name: str,
    env_kwargs: Mapping[str, Any] | None = None,
    agent: str = "ppo",
    attribute: str = "_actor_net",
    extra: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> Any:
    """Writes a training folder whose policy is a ``network_class`` with perturbed weights; returns it."""
    env = load(env_name, num_envs=1, seed=seed, **dict(env_kwargs or {}))
    observation_spec, action_spec, _ = spec_utils.get_tensor_specs(env)
    env.close()
    tf_keras.utils.set_random_seed(seed)  # the initial weights too: a folder is the same on every run
    net = network_class(observation_spec, action_spec, **network_kwargs)
    net.create_variables()
    perturb(net.variables, seed)
    os.makedirs(root_dir, exist_ok=True)
    policy_network.write_description(
        root_dir,
        agent=agent,
        network=net,
        network_kwargs=network_kwargs,
        checkpoint_attribute=attribute,
        env_name=env_name,
        env_kwargs=env_kwargs,
        extra=extra,
    )
    node: Any = net
    for name in reversed(attribute.split(".")):
        node = tf.train.Checkpoint(**{name: node})
    tf.train.CheckpointManager(
        tf.train.Checkpoint(agent=node), os.path.join(root_dir, "checkpoints"), 1
    ).save()
    return net
