"""TF-Agents networks whose torso is any encoder of this package.

    observation (B, [T,] H, W, C) uint8
        -> flatten outer dims (B*T, H, W, C)
        -> encoder  (build_encoder name: sit, sit_star, set, siet, vit, impala_cnn, cnn;
                     "mlp" for vector observations)
        -> [Dense + ReLU] * len(fc_layer_params)
        -> actor: categorical (discrete) or normal (continuous) projection
           value: Dense(1)

The encoder is built inside the network from its *name* and keyword
arguments, never passed in as an object: ``Network.copy()`` (used for target
networks) must give fresh weights, and a built-in encoder is tracked by the
network so that its weights are in ``trainable_variables``.
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

from sit_keras.agents.policy_network import register_network
from sit_keras.models import ENCODER_NAMES, build_encoder

MLP_ENCODER = "mlp"
NETWORK_ENCODERS: tuple[str, ...] = (*ENCODER_NAMES, MLP_ENCODER)


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

    Raises:
      ValueError: unknown encoder name, or an encoder that does not fit the
        observation's rank.
    """
    if encoder not in NETWORK_ENCODERS:
        raise ValueError(f"Unknown encoder {encoder!r}. Expected one of: {', '.join(NETWORK_ENCODERS)}.")
    shape = tuple(observation_spec.shape)
    kwargs = dict(encoder_kwargs or {})
    if encoder == MLP_ENCODER:
        if len(shape) != 1:
            raise ValueError(
                "The 'mlp' encoder takes vector observations of shape (D,). "
                f"Received: observation shape={shape}"
            )
        units = tuple(kwargs.pop("units", (64, 64)))
        if kwargs:
            raise ValueError(f"Unknown 'mlp' encoder arguments: {sorted(kwargs)}. Expected: ['units'].")
        layers = [tf_keras.layers.Dense(n, activation="relu") for n in units]
    else:
        if len(shape) != 3:
            raise ValueError(
                f"Encoder {encoder!r} takes image observations of shape (H, W, C). "
                f"Received: observation shape={shape}; use encoder='mlp' for vectors."
            )
        layers = [build_encoder(encoder, shape, **kwargs)]
    layers += [tf_keras.layers.Dense(n, activation="relu") for n in fc_layer_params]
    return tf_keras.Sequential(layers, name="torso")


def _single_spec(spec: Any, what: str) -> Any:
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
        features = self._torso(squash.flatten(observations), training=training)
        return squash.unflatten(features), outer_rank


@register_network
class EncoderActorNetwork(_EncoderNetwork, network.DistributionNetwork):
    """Actor ``pi(a | s)`` on an encoder torso: categorical or normal projection.

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
        observation_spec = _single_spec(input_tensor_spec, "input_tensor_spec")
        action_spec = _single_spec(output_tensor_spec, "output_tensor_spec")
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

    def call(self, observations, step_type=None, network_state=(), training=False, mask=None):
        del step_type  # feed-forward: episode boundaries do not matter
        features, outer_rank = self._encode(observations, training)
        distribution, _ = self._projection(features, outer_rank, training=training, mask=mask)
        return distribution, network_state


class EncoderValueNetwork(_EncoderNetwork, network.Network):
    """State value ``V(s)`` on an encoder torso; arguments as ``EncoderActorNetwork``."""

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        encoder: str = "sit",
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        name: str = "EncoderValueNetwork",
    ):
        observation_spec = _single_spec(input_tensor_spec, "input_tensor_spec")
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        self._torso = build_torso(observation_spec, encoder, encoder_kwargs, fc_layer_params)
        self._value_head = tf_keras.layers.Dense(1, name="value")

    def call(self, observations, step_type=None, network_state=(), training=False):
        del step_type
        features, _ = self._encode(observations, training)
        return tf.squeeze(self._value_head(features, training=training), axis=-1), network_state
