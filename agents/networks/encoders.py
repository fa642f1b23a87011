"""The trainers' view of the encoder registry: actor and value networks on any encoder.

The names are those of ``sit_keras.models.registry.ENCODERS`` (the one
registry), which says for each whether it is recurrent:

- feed-forward torsos (``actor_critic.NETWORK_ENCODERS``) that every agent takes
  (images: the SiT family, ViT, IMPALA-CNN, CNN, ``"data_efficient_cnn"``;
  vectors: ``"mlp"``);
- ``"attention_neuron"`` (``sensor_networks``): the permutation-invariant
  AttentionNeuron, recurrent, on vector observations. Agents that train on
  whole sequences take it (PPO, behaviour cloning); SAC and DQN sample
  single transitions from their replay buffers, which a recurrent torso
  cannot learn from, so they refuse it by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
from tf_agents.networks import network

from sit_keras.agents.networks import actor_critic, sensor_networks
from sit_keras.models import registry

RECURRENT_ENCODERS: tuple[str, ...] = registry.RECURRENT_NAMES
ENCODERS: tuple[str, ...] = tuple(registry.ENCODERS)


def check_encoder(encoder: str, agent: str, recurrent: bool = True) -> None:
    """Raises ``ValueError`` for a name not in ``ENCODERS``, or a recurrent one unless ``recurrent``."""
    if encoder not in ENCODERS:
        raise ValueError(f"Unknown encoder {encoder!r}. Expected one of: {', '.join(ENCODERS)}.")
    if encoder in RECURRENT_ENCODERS and not recurrent:
        raise ValueError(
            f"Encoder {encoder!r} is recurrent, and {agent!r} trains on single transitions. "
            f"Expected one of: {', '.join(actor_critic.NETWORK_ENCODERS)}."
        )


def actor_network_kwargs(
    encoder: str,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
    previous_action_noise: float = 0.0,
) -> dict[str, Any]:
    """The actor's constructor arguments after the two specs, as ``policy_network.json`` stores them.

    ``"attention_neuron"``: ``sensor_networks.SensorActorNetwork``'s (with
    ``previous_action_noise`` when it is not 0); any ``actor_critic.NETWORK_ENCODERS``
    name: ``actor_critic.EncoderActorNetwork``'s, which has no previous action.
    """
    check_encoder(encoder, "actor")
    if encoder == sensor_networks.SENSOR_ENCODER:
        kwargs = {"encoder_kwargs": dict(encoder_kwargs or {}), "fc_layer_params": tuple(fc_layer_params)}
        if previous_action_noise:
            kwargs["previous_action_noise"] = float(previous_action_noise)
        return kwargs
    if previous_action_noise:
        raise ValueError(
            f"previous_action_noise needs the {sensor_networks.SENSOR_ENCODER!r} encoder, whose actor "
            f"sees its previous action. Received: encoder={encoder!r}"
        )
    return {
        "encoder": encoder,
        "encoder_kwargs": dict(encoder_kwargs or {}),
        "fc_layer_params": tuple(fc_layer_params),
    }


def actor_network(
    observation_spec: tf.TensorSpec, action_spec: tf.TensorSpec, **kwargs: Any
) -> network.DistributionNetwork:
    """The actor of ``actor_network_kwargs(**kwargs)``'s encoder, made from those arguments."""
    if "encoder" in kwargs:
        return actor_critic.EncoderActorNetwork(observation_spec, action_spec, **kwargs)
    return sensor_networks.SensorActorNetwork(observation_spec, action_spec, **kwargs)


def value_network(
    observation_spec: tf.TensorSpec,
    encoder: str,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
) -> network.Network:
    """The value network for ``encoder`` (the names of ``actor_network``)."""
    check_encoder(encoder, "value")
    if encoder == sensor_networks.SENSOR_ENCODER:
        return sensor_networks.SensorValueNetwork(observation_spec, encoder_kwargs, fc_layer_params)
    return actor_critic.EncoderValueNetwork(observation_spec, encoder, encoder_kwargs, fc_layer_params)


def shared_value_network(actor_net: actor_critic.EncoderActorNetwork) -> actor_critic.EncoderValueNetwork:
    """A value head on ``actor_net``'s torso (PPO's ``shared_torso``): one encoder for both."""
    if not isinstance(actor_net, actor_critic.EncoderActorNetwork):
        raise ValueError(
            f"A shared torso needs a feed-forward actor network (EncoderActorNetwork). Received: "
            f"{type(actor_net).__name__}"
        )
    return actor_critic.EncoderValueNetwork(actor_net.input_tensor_spec, shared_torso=actor_net.torso)
