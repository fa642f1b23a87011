"""TF-Agents networks whose torso is any encoder of this package.

    observation (B, [T,] H, W, C) uint8
        -> flatten outer dims (B*T, H, W, C)
        -> encoder  (a feed-forward name of sit_keras.models.registry.ENCODERS: sit, sit_star,
                     set, siet, vit, impala_cnn, cnn, "data_efficient_cnn"; "mlp" for vectors)
        -> [Dense + ReLU] * len(fc_layer_params)
        -> actor: categorical (discrete) or normal (continuous) projection
           value: Dense(1)

The encoder is built inside the network from its *name* and keyword
arguments, never passed in as an object: ``Network.copy()`` (used for target
networks) must give fresh weights, and a built-in encoder is tracked by the
network so that its weights are in ``trainable_variables``.

Precision: built inside ``sit_keras.mixed_precision.dtype_policy(precision)``,
the torso (encoder and dense layers) computes in the policy's compute dtype
(bfloat16 or float16), while the projection networks and the value head are
float32 layers (built inside ``full_precision()``) whose input is cast to
float32 (``head_input``), so logits, distribution parameters,
log-probabilities and values are float32. Every variable is float32 and named
as in a float32 network, so checkpoints restore across precisions. A float16
torso is loss-scaled at its boundary (``loss_scaling``; its ``loss_scale``
attribute), which keeps its gradients from underflowing inside any TF-Agents
train step. Under a policy that is not mixed (float32, or a float64 floatx)
everything runs in that dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from tf_agents.networks import categorical_projection_network, network, normal_projection_network
from tf_agents.networks import utils as network_utils
from tf_agents.specs import tensor_spec
from tf_agents.utils import nest_utils

from sit_keras.agents.networks import loss_scaling
from sit_keras.agents.networks.policy_network import register_network
from sit_keras.mixed_precision import full_precision
from sit_keras.models import registry

MLP_ENCODER = "mlp"
DATA_EFFICIENT_CNN = "data_efficient_cnn"
DATA_EFFICIENT_CNN_KWARGS: dict[str, Any] = dict(registry.ENCODERS[DATA_EFFICIENT_CNN].defaults)
"""van Hasselt et al. 2019 (data-efficient Rainbow's network), a preset of "cnn" in the registry."""
NETWORK_ENCODERS: tuple[str, ...] = registry.FEED_FORWARD_NAMES
"""The feed-forward torsos every network family of ``sit_keras.agents`` takes (actor, value, SAC, Q)."""


def build_torso(
    observation_spec: tf.TensorSpec,
    encoder: str,
    encoder_kwargs: Mapping[str, Any] | None = None,
    fc_layer_params: Sequence[int] = (),
) -> tf_keras.Sequential:
    """The encoder followed by the dense layers ``fc_layer_params``.

    Images (rank-3 observation specs) go through ``build_encoder(encoder,
    ...)``; vector observations (rank 1) need ``encoder="mlp"``, whose
    ``encoder_kwargs`` are ``{"units": (64, 64)}``.

    The torso computes in the global policy's compute dtype; under float16 it
    gets a ``loss_scale`` (``loss_scaling.attach``; None otherwise), which
    ``call_torso`` applies.

    Raises:
      ValueError: unknown encoder name, or an encoder that does not fit the
        observation's rank.
    """
    layers = registry.build_feed_forward(encoder, tuple(observation_spec.shape), **dict(encoder_kwargs or {}))
    layers += [tf_keras.layers.Dense(n, activation="relu") for n in fc_layer_params]
    torso = tf_keras.Sequential(layers, name="torso")
    loss_scaling.attach(torso)
    return torso


def call_torso(torso: tf_keras.layers.Layer, inputs: tf.Tensor, training: bool) -> tf.Tensor:
    """``torso(inputs)``, loss-scaled when the torso has a ``loss_scale`` (float16; features then float32).

    Otherwise the features come out in the torso's compute dtype (bfloat16
    under ``mixed_bfloat16``); the float32 heads cast them on input.
    """
    loss_scale = getattr(torso, "loss_scale", None)
    return loss_scaling.scaled_call(loss_scale, lambda x: torso(x, training=training), inputs)


def head_input(features: tf.Tensor, head: tf_keras.layers.Layer) -> tf.Tensor:
    """``features`` cast to the compute dtype of an output head (float32 under a mixed policy).

    Explicit because TF-Agents' networks, the projection networks among them,
    turn Keras' autocasting of inputs off.
    """
    return tf.cast(features, head.compute_dtype)


def single_spec(spec: Any, what: str) -> Any:
    """The one tensor spec in ``spec``; ``ValueError`` naming ``what`` for a nest of several."""
    flat = tf.nest.flatten(spec)
    if len(flat) != 1:
        raise ValueError(f"{what} must be a single tensor spec. Received: {spec}")
    return flat[0]


class _EncoderNetwork:
    """Shared part of the actor and value networks: flatten outer dims, encode."""

    def _encode(self, observations: tf.Tensor, training: bool) -> tuple[tf.Tensor, int]:
        """Features ``(*outer, D)`` and the number of outer dims (1 or 2)."""
        outer_rank = nest_utils.get_outer_rank(observations, self.input_tensor_spec)
        squash = network_utils.BatchSquash(outer_rank)
        features = call_torso(self._torso, squash.flatten(observations), training)
        return squash.unflatten(features), outer_rank


@register_network
class EncoderActorNetwork(_EncoderNetwork, network.DistributionNetwork):
    """Actor ``pi(a | s)`` on an encoder torso: categorical or normal projection.

    Under a mixed policy the torso computes in the half dtype and the
    projection in float32 (logits, means and standard deviations are float32).

    Args:
      input_tensor_spec: the observation spec (one tensor).
      output_tensor_spec: the action spec: a discrete ``BoundedTensorSpec``
        (categorical projection over its values) or a continuous one
        (normal projection, tanh-squashed to the bounds).
      encoder: an encoder name (``NETWORK_ENCODERS``).
      encoder_kwargs: keyword arguments of ``build_encoder`` (e.g.
        ``{"preset": "minigrid"}``) or of the mlp (``{"units": (64, 64)}``).
      fc_layer_params: dense layers between the encoder and the projection.
      name: network name.
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        output_tensor_spec: tensor_spec.BoundedTensorSpec,
        encoder: str = "sit",
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        name: str = "EncoderActorNetwork",
    ):
        observation_spec = single_spec(input_tensor_spec, "input_tensor_spec")
        action_spec = single_spec(output_tensor_spec, "output_tensor_spec")
        with full_precision():  # float32 logits / distribution parameters
            if tensor_spec.is_discrete(action_spec):
                projection = categorical_projection_network.CategoricalProjectionNetwork(action_spec)
            else:
                projection = normal_projection_network.NormalProjectionNetwork(action_spec)
        super().__init__(
            input_tensor_spec=input_tensor_spec,
            state_spec=(),
            output_spec=projection.output_spec,
            name=name,
        )
        self._torso = build_torso(observation_spec, encoder, encoder_kwargs, fc_layer_params)
        self._projection = projection
        self._action_spec = action_spec

    @property
    def torso(self) -> tf_keras.Sequential:
        """The encoder and dense layers before the projection (a value network can share them)."""
        return self._torso

    def call(self, observations, step_type=None, network_state=(), training=False, mask=None):
        del step_type  # feed-forward: episode boundaries do not matter
        features, outer_rank = self._encode(observations, training)
        return self.project(features, outer_rank, training, mask), network_state

    def project(self, features: tf.Tensor, outer_rank: int, training: bool = False, mask=None) -> Any:
        """The action distribution of torso ``features`` (``(*outer, D)``, ``outer_rank`` outer dims)."""
        features = head_input(features, self._projection)
        distribution, _ = self._projection(features, outer_rank, training=training, mask=mask)
        return distribution


class EncoderValueNetwork(_EncoderNetwork, network.Network):
    """State value ``V(s)`` on an encoder torso; arguments as ``EncoderActorNetwork``.

    The value head ``Dense(1)`` is float32 under every policy that is not
    float64: values are float32.

    ``shared_torso``: an actor's torso (``EncoderActorNetwork.torso``) to put
    the value head on instead of building one: one encoder, trained by the
    policy and the value losses together, as in IMPALA's network (policy and
    baseline heads on one torso), which the SiT paper trains on MiniGrid.
    ``encoder``, ``encoder_kwargs`` and ``fc_layer_params`` are then unused,
    and ``Network.copy()`` shares that torso too (PPO copies no network).
    During collection TF-Agents' PPO policy still calls the actor and this
    network apart (two torso passes); the learner's loss makes one
    (``actor_and_value``).
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        encoder: str = "sit",
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        name: str = "EncoderValueNetwork",
        shared_torso: tf_keras.layers.Layer | None = None,
    ):
        observation_spec = single_spec(input_tensor_spec, "input_tensor_spec")
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        if shared_torso is None:
            shared_torso = build_torso(observation_spec, encoder, encoder_kwargs, fc_layer_params)
        self._torso = shared_torso
        with full_precision():  # float32 values
            self._value_head = tf_keras.layers.Dense(1, name="value")

    @property
    def torso(self) -> tf_keras.layers.Layer:
        """The encoder and dense layers before the value head (an actor's, with ``shared_torso``)."""
        return self._torso

    def call(self, observations, step_type=None, network_state=(), training=False):
        del step_type
        features, _ = self._encode(observations, training)
        return self.value(features, training), network_state

    def value(self, features: tf.Tensor, training: bool = False) -> tf.Tensor:
        """``V(s)`` of torso ``features`` (``(*outer, D)`` -> ``(*outer,)``)."""
        values = self._value_head(head_input(features, self._value_head), training=training)
        return tf.squeeze(values, axis=-1)


def shares_torso(actor_net: network.Network, value_net: network.Network) -> bool:
    """Whether ``value_net`` is a value head on ``actor_net``'s torso (PPO's ``shared_torso``)."""
    return (
        isinstance(actor_net, EncoderActorNetwork)
        and isinstance(value_net, EncoderValueNetwork)
        and value_net.torso is actor_net.torso
    )


def actor_and_value(
    actor_net: EncoderActorNetwork, value_net: EncoderValueNetwork, observations: tf.Tensor, training: bool
) -> tuple[Any, tf.Tensor]:
    """``pi(. | s)`` and ``V(s)`` from one pass of the torso they share (``shares_torso``).

    The same values and gradients as calling the two networks, at the cost of
    one encoder pass instead of two.
    """
    features, outer_rank = actor_net._encode(observations, training)
    return actor_net.project(features, outer_rank, training), value_net.value(features, training)
