"""Q-networks on any encoder of this package: DQN (Q-values) and C51 (return distributions).

    observation (B, H, W, C) uint8 or (B, D) float
        -> encoder  (any actor_critic.NETWORK_ENCODERS name; default "data_efficient_cnn")
        -> [Dense + ReLU] * len(fc_layer_params)
        -> EncoderQNetwork:            Dense(A)              -> Q-values  (B, A)
           EncoderCategoricalQNetwork: Dense(A * num_atoms)  -> logits    (B, A, num_atoms)

As in ``networks``, the encoder is built inside the network from its name, so
that ``Network.copy()`` (DqnAgent's target network) has its own fresh weights.

Precision (as ``networks``): under a mixed policy the torso computes in the
half dtype (loss-scaled under float16) and the linear head ``q_head`` in
float32, so Q-values and C51 logits are float32; variables are float32.

``"data_efficient_cnn"`` is the convolutional torso of data-efficient Rainbow
(van Hasselt, Hessel & Aslanides 2019, "When to use parametric models in
reinforcement learning?", appendix: two convolutions, 32 and 64 channels,
5x5 kernels, stride 5, then 256 hidden units), the CNN baseline of the SiT
paper's Atari 100k experiments (Table 2, Table 3). It is ``build_encoder("cnn")``
with these settings (``actor_critic.DATA_EFFICIENT_CNN_KWARGS``); ``encoder_kwargs`` override them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from tf_agents.networks import network
from tf_agents.specs import tensor_spec

from sit_keras.agents.networks import actor_critic
from sit_keras.agents.networks.policy_network import register_network
from sit_keras.mixed_precision import full_precision

# The Q-networks' default torso (data-efficient Rainbow's); every actor_critic.NETWORK_ENCODERS name fits.
DATA_EFFICIENT_CNN = actor_critic.DATA_EFFICIENT_CNN


def _discrete_action_spec(action_spec: Any) -> tensor_spec.BoundedTensorSpec:
    flat = tf.nest.flatten(action_spec)
    spec = flat[0] if len(flat) == 1 else None
    if spec is None or not tensor_spec.is_discrete(spec) or spec.shape.rank != 0 or spec.minimum != 0:
        raise ValueError(
            "Q-networks need one scalar discrete action spec with minimum 0 (actions 0 .. A-1). "
            f"Received: action_spec={action_spec}"
        )
    return spec


class _EncoderQNetworkBase(actor_critic._EncoderNetwork, network.Network):
    """Torso and a linear head with ``num_actions * outputs_per_action`` units."""

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        action_spec: tensor_spec.BoundedTensorSpec,
        encoder: str,
        encoder_kwargs: Mapping[str, Any] | None,
        fc_layer_params: Sequence[int],
        outputs_per_action: int,
        name: str,
    ):
        observation_spec = actor_critic.single_spec(input_tensor_spec, "input_tensor_spec")
        action_spec = _discrete_action_spec(action_spec)
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        self._action_spec = action_spec
        self._num_actions = int(action_spec.maximum - action_spec.minimum + 1)
        self._torso = actor_critic.build_torso(observation_spec, encoder, encoder_kwargs, fc_layer_params)
        with full_precision():  # float32 Q-values / logits
            self._head = tf_keras.layers.Dense(self._num_actions * outputs_per_action, name="q_head")

    @property
    def action_spec(self) -> tensor_spec.BoundedTensorSpec:
        return self._action_spec

    def _head_outputs(self, observations: tf.Tensor, training: bool) -> tf.Tensor:
        features, _ = self._encode(observations, training)
        return self._head(actor_critic.head_input(features, self._head), training=training)


@register_network
class EncoderQNetwork(_EncoderQNetworkBase):
    """``Q(s, .)`` on an encoder torso, for ``tf_agents.agents.DqnAgent``.

    Args:
      input_tensor_spec: the observation spec (one tensor): ``(H, W, C)``
        images or ``(D,)`` vectors (``encoder="mlp"``).
      action_spec: one scalar discrete ``BoundedTensorSpec`` with minimum 0.
      encoder: an ``actor_critic.NETWORK_ENCODERS`` name.
      encoder_kwargs: arguments of ``build_encoder`` (or of the mlp,
        ``{"units": (64, 64)}``, or overrides of ``DATA_EFFICIENT_CNN_KWARGS``).
      fc_layer_params: dense ReLU layers between the encoder and the head.
      name: network name.

    Call arguments:
      observations: ``(B, *observation shape)`` or ``(B, T, *observation shape)``.
      step_type, network_state: as every TF-Agents network (feed-forward here).
      training: Python boolean.

    Returns:
      ``(q_values, network_state)`` with ``q_values`` of shape ``(B, [T,] A)``.

    Raises:
      ValueError: a non-scalar or continuous action spec, an unknown encoder.

    >>> from tf_agents.specs import tensor_spec
    >>> net = EncoderQNetwork(tensor_spec.TensorSpec((4,), tf.float32),
    ...                       tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1), "mlp")
    >>> net(tf.zeros((3, 4)))[0].shape
    TensorShape([3, 2])
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        action_spec: tensor_spec.BoundedTensorSpec,
        encoder: str = DATA_EFFICIENT_CNN,
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        name: str = "EncoderQNetwork",
    ):
        super().__init__(input_tensor_spec, action_spec, encoder, encoder_kwargs, fc_layer_params, 1, name)

    def call(self, observations, step_type=None, network_state=(), training=False):
        del step_type  # feed-forward: episode boundaries do not matter
        return self._head_outputs(observations, training), network_state


@register_network
class EncoderCategoricalQNetwork(_EncoderQNetworkBase):
    """Return-distribution logits on an encoder torso, for ``CategoricalDqnAgent`` (C51).

    The semantics of ``tf_agents.networks.categorical_q_network``: the output
    holds, for every action, logits over ``num_atoms`` atoms of a fixed
    support ``linspace(min_q_value, max_q_value, num_atoms)`` that the agent
    owns (Bellemare, Dabney & Munos 2017); the greedy action maximises
    ``sum(softmax(logits) * support)``.

    Args:
      input_tensor_spec, action_spec, encoder, encoder_kwargs,
      fc_layer_params, name: as ``EncoderQNetwork``.
      num_atoms: atoms of the support (51: C51 and Rainbow).

    Call arguments:
      As ``EncoderQNetwork``.

    Returns:
      ``(logits, network_state)`` with ``logits`` of shape ``(B, [T,] A, num_atoms)``.

    >>> from tf_agents.specs import tensor_spec
    >>> states = tensor_spec.TensorSpec((4,), tf.float32)
    >>> actions = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1)
    >>> net = EncoderCategoricalQNetwork(states, actions, "mlp", num_atoms=5)
    >>> net(tf.zeros((3, 4)))[0].shape
    TensorShape([3, 2, 5])
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        action_spec: tensor_spec.BoundedTensorSpec,
        encoder: str = DATA_EFFICIENT_CNN,
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        num_atoms: int = 51,
        name: str = "EncoderCategoricalQNetwork",
    ):
        if isinstance(num_atoms, bool) or not isinstance(num_atoms, int) or num_atoms < 2:
            raise ValueError(f"num_atoms must be an integer >= 2. Received: num_atoms={num_atoms!r}")
        super().__init__(
            input_tensor_spec, action_spec, encoder, encoder_kwargs, fc_layer_params, num_atoms, name
        )
        self._num_atoms = num_atoms

    @property
    def num_atoms(self) -> int:
        return self._num_atoms

    def call(self, observations, step_type=None, network_state=(), training=False):
        del step_type
        logits = self._head_outputs(observations, training)
        outer_shape = tf.shape(logits)[:-1]
        shape = tf.concat([outer_shape, [self._num_actions, self._num_atoms]], axis=0)
        return tf.reshape(logits, shape), network_state
