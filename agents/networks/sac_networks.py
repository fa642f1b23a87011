"""SAC's actor and twin critics on one shared encoder (TF-Agents networks).

    observation (B, [T,] H, W, C) uint8 or (B, [T,] D) float
        -> encoder E (build_encoder name: sit, sit_star, set, siet, vit,
                      impala_cnn, cnn; "mlp" for vectors)     one object, shared
    actor:     stop_gradient(E(s)) -> [Dense + ReLU] * n -> tanh-squashed Normal  pi(a | s)
    critic i:  [E(s), a] -> [Dense + ReLU] * n -> Dense(1)                        Q_i(s, a), i = 1, 2
    target i:  the same on E', a second encoder that tracks E (soft updates)

Which loss trains what, as in pixel SAC (SAC-AE, Yarats et al. 2019; DrQ,
Kostrikov et al. 2020; Hansen & Wang 2021, the baseline of the SiT paper's
appendix F.3): the critic loss trains E and both critic heads; the actor loss
trains the actor's head only, reading E's features through
``tf.stop_gradient``; the target critics are never trained.

Ownership, and why: the *actor* owns E and builds it from its name, so that
export can rebuild the acting network alone from its constructor arguments
(``policy_network.build_network``) and restore it from the agent's
checkpoint, encoder included (``agent._actor_network._encoder``). The two
critics reference the actor's encoder (``shared_encoder=actor.encoder``); a
critic made without ``shared_encoder`` builds its own E from the name, which
is how ``Network.copy(shared_encoder=None)`` makes the target critics.
``twin_critics`` puts the four critics together.

Encoder passes: each network's ``call`` runs E itself. ``encode`` (one pass
of E), ``SacActorNetwork.distribution_from_features`` and
``SacCriticNetwork.q_from_features`` split a call in two, so that an agent can
run E once per batch and feed the actor and both critics from it
(``sac_agent.SharedEncoderSacAgent``, which ``sac_train`` uses).

For vector observations ``encoder="mlp"`` defaults to no shared layers
(``units=()``): state SAC (Haarnoja et al. 2018) gives the actor and each
critic their own MLP, here ``fc_layer_params``.

Precision: built inside ``sit_keras.mixed_precision.dtype_policy(precision)``,
E and the dense layers of the actor's and the critics' heads compute in the
policy's compute dtype; the projection (``TanhNormalProjectionNetwork``) and
the critics' output layer ``q_value`` are float32 layers
(``full_precision()``) with float32 inputs, so the action distribution, its
log-probabilities and the Q-values are float32. Variables are float32 and
named as in float32. Under float16, E, the actor's dense layers and each
critic's dense layers are each a loss-scaled region with a scale of its own
(``loss_scaling``; E's goes with E, so the critics share it), so that neither
the critic loss's gradients nor the actor loss's ``dQ/da`` underflow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from tf_agents.agents.sac import sac_agent, tanh_normal_projection_network
from tf_agents.networks import network
from tf_agents.networks import utils as network_utils
from tf_agents.specs import tensor_spec
from tf_agents.utils import nest_utils, object_identity

from sit_keras.agents.networks import loss_scaling
from sit_keras.agents.networks.actor_critic import (
    MLP_ENCODER,
    build_torso,
    call_torso,
    head_input,
    single_spec,
)
from sit_keras.agents.networks.policy_network import register_network
from sit_keras.mixed_precision import full_precision


def build_shared_encoder(
    observation_spec: tf.TensorSpec, encoder: str, encoder_kwargs: Mapping[str, Any] | None
) -> tf_keras.Sequential:
    """The encoder E by name (``actor_critic.build_torso`` without dense layers).

    ``encoder="mlp"`` with ``encoder_kwargs=None`` is the identity (no shared
    layers); pass ``{"units": (...)}`` to share dense layers. Under float16 it
    carries its ``loss_scale``, shared with it.
    """
    if encoder == MLP_ENCODER and encoder_kwargs is None:
        encoder_kwargs = {"units": ()}
    return build_torso(observation_spec, encoder, encoder_kwargs, fc_layer_params=())


def _mlp(fc_layer_params: Sequence[int], name: str) -> tf_keras.Sequential:
    """Dense ReLU layers in the compute dtype, with a ``loss_scale`` under float16."""
    layers = [tf_keras.layers.Dense(n, activation="relu") for n in fc_layer_params]
    mlp = tf_keras.Sequential(layers, name=name)
    loss_scaling.attach(mlp)
    return mlp


def _encode(encoder: tf_keras.layers.Layer, observations: tf.Tensor, spec: tf.TensorSpec, training: bool):
    """``E(observations)`` for any outer dims ``(B,)`` or ``(B, T)``; returns features and the outer rank."""
    outer_rank = nest_utils.get_outer_rank(observations, spec)
    squash = network_utils.BatchSquash(outer_rank)
    return squash.unflatten(call_torso(encoder, squash.flatten(observations), training)), outer_rank


@register_network
class SacActorNetwork(network.DistributionNetwork):
    """SAC's actor ``pi(a | s)``: a tanh-squashed diagonal Normal on the encoder's features.

    The features enter through ``tf.stop_gradient`` and the encoder's weights
    are left out of ``trainable_weights`` (they are in ``non_trainable_weights``,
    so ``variables`` and checkpoints still hold them): SAC's actor loss trains
    the head, the critic loss trains the encoder (see the module docstring).
    The log standard deviation is clipped to ``[-20, 2]``
    (``sac_agent.std_clip_transform``).

    Args:
      input_tensor_spec: the observation spec (one tensor).
      output_tensor_spec: a continuous ``BoundedTensorSpec`` of actions.
      encoder: an encoder name (``actor_critic.NETWORK_ENCODERS``).
      encoder_kwargs: ``build_encoder`` arguments, or ``{"units": ...}`` for
        ``"mlp"`` (default: no shared layers).
      fc_layer_params: the actor head's ReLU dense layers.
      name: network name.

    Call arguments:
      observations: ``(B, *obs_shape)`` or ``(B, T, *obs_shape)``.
      step_type: unused (feed-forward).
      network_state: ``()``.
      training: Python boolean.

    Returns:
      ``(distribution over actions, network_state)``.
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        output_tensor_spec: tensor_spec.BoundedTensorSpec,
        encoder: str = "cnn",
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (1024, 1024),
        name: str = "SacActorNetwork",
    ):
        observation_spec = single_spec(input_tensor_spec, "input_tensor_spec")
        action_spec = single_spec(output_tensor_spec, "output_tensor_spec")
        if not tensor_spec.is_continuous(action_spec):
            raise ValueError(f"SAC needs a continuous action spec. Received: {action_spec}")
        with full_precision():  # float32 distribution parameters
            projection = tanh_normal_projection_network.TanhNormalProjectionNetwork(
                action_spec, std_transform=sac_agent.std_clip_transform
            )
        super().__init__(
            input_tensor_spec=input_tensor_spec, state_spec=(), output_spec=projection.output_spec, name=name
        )
        self._observation_spec = observation_spec
        self._encoder = build_shared_encoder(observation_spec, encoder, encoder_kwargs)
        self._head = _mlp(fc_layer_params, "actor_head")
        self._projection = projection
        self._action_spec = action_spec

    @property
    def encoder(self) -> tf_keras.layers.Layer:
        """The encoder E, for the critics to share."""
        return self._encoder

    @property
    def trainable_weights(self) -> list[tf.Variable]:
        encoder_weights = object_identity.ObjectIdentitySet(self._encoder.trainable_weights)
        return [w for w in super().trainable_weights if w not in encoder_weights]

    @property
    def non_trainable_weights(self) -> list[tf.Variable]:
        return [*super().non_trainable_weights, *self._encoder.trainable_weights]

    def encode(self, observations: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, int]:
        """``E(observations)``: features ``(B, D)`` or ``(B, T, D)`` and the number of outer dims.

        One pass of the shared encoder; ``distribution_from_features`` and
        ``SacCriticNetwork.q_from_features`` read its output, so that an agent
        can run E once per batch (``sac_agent.SharedEncoderSacAgent``).
        """
        return _encode(self._encoder, observations, self._observation_spec, training)

    def distribution_from_features(
        self, features: tf.Tensor, outer_rank: int, training: bool = False, mask: tf.Tensor | None = None
    ):
        """``pi(a | s)`` from ``features = E(s)`` (``encode``), read through ``tf.stop_gradient``."""
        hidden = call_torso(self._head, tf.stop_gradient(features), training)
        hidden = head_input(hidden, self._projection)
        distribution, _ = self._projection(hidden, outer_rank, training=training, mask=mask)
        return distribution

    def call(self, observations, step_type=None, network_state=(), training=False, mask=None):
        del step_type  # feed-forward: episode boundaries do not matter
        features, outer_rank = self.encode(observations, training)
        return self.distribution_from_features(features, outer_rank, training, mask), network_state


class SacCriticNetwork(network.Network):
    """One of SAC's critics ``Q(s, a)``: a dense head on ``[E(s), a]``.

    Args:
      input_tensor_spec: ``(observation_spec, action_spec)``.
      encoder, encoder_kwargs: the encoder E by name (as ``SacActorNetwork``);
        used only when ``shared_encoder`` is None.
      fc_layer_params: the critic head's ReLU dense layers, then ``Dense(1)``.
      shared_encoder: an encoder object to use instead of building one (the
        actor's, for the trained critics; the first target's, for the second
        target). ``Network.copy(shared_encoder=None)`` builds a fresh one.
      name: network name.

    Call arguments:
      inputs: ``(observations, actions)`` with outer dims ``(B,)`` or ``(B, T)``.

    Returns:
      ``(q_values (B,) or (B, T), network_state)``.
    """

    def __init__(
        self,
        input_tensor_spec: tuple[tf.TensorSpec, tf.TensorSpec],
        encoder: str = "cnn",
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (1024, 1024),
        shared_encoder: tf_keras.layers.Layer | None = None,
        name: str = "SacCriticNetwork",
    ):
        if not isinstance(input_tensor_spec, (tuple, list)) or len(input_tensor_spec) != 2:
            raise ValueError(
                f"input_tensor_spec must be (observation_spec, action_spec). Received: {input_tensor_spec}"
            )
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        self._observation_spec = single_spec(input_tensor_spec[0], "observation spec")
        self._action_size = single_spec(input_tensor_spec[1], "action spec").shape.num_elements()
        if shared_encoder is None:
            shared_encoder = build_shared_encoder(self._observation_spec, encoder, encoder_kwargs)
        self._encoder = shared_encoder
        self._head = _mlp(fc_layer_params, "critic_head")
        with full_precision():  # float32 Q-values
            self._q_value = tf_keras.layers.Dense(1, name="q_value")

    @property
    def encoder(self) -> tf_keras.layers.Layer:
        return self._encoder

    def encode(self, observations: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, int]:
        """``E(observations)`` and the number of outer dims (as ``SacActorNetwork.encode``)."""
        return _encode(self._encoder, observations, self._observation_spec, training)

    def q_from_features(
        self, features: tf.Tensor, actions: Any, outer_rank: int, training: bool = False
    ) -> tf.Tensor:
        """``Q(s, a)`` from ``features = E(s)`` (``encode``): ``(B,)`` or ``(B, T)``.

        The features are not stopped: the critic loss trains E through them.
        """
        squash = network_utils.BatchSquash(outer_rank)
        actions = tf.reshape(squash.flatten(tf.nest.flatten(actions)[0]), [-1, self._action_size])

        def head(features: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
            dtype = self._head.compute_dtype
            joint = tf.concat([tf.cast(features, dtype), tf.cast(actions, dtype)], axis=-1)
            return self._head(joint, training=training)

        # Under float16 the head's loss scale also covers dQ/da, the actor loss's gradient.
        hidden = loss_scaling.scaled_call(self._head.loss_scale, head, squash.flatten(features), actions)
        q_values = self._q_value(head_input(hidden, self._q_value), training=training)
        return squash.unflatten(tf.squeeze(q_values, axis=-1))

    def call(self, inputs, step_type=None, network_state=(), training=False):
        del step_type
        observations, actions = inputs
        features, outer_rank = self.encode(observations, training)
        return self.q_from_features(features, actions, outer_rank, training), network_state


def twin_critics(
    actor: SacActorNetwork,
    action_spec: tensor_spec.BoundedTensorSpec,
    fc_layer_params: Sequence[int] = (1024, 1024),
) -> dict[str, SacCriticNetwork]:
    """The twin critics on the actor's encoder and their targets on one fresh encoder.

    Returns a dict with the ``SacAgent`` arguments ``critic_network``,
    ``critic_network_2``, ``target_critic_network`` and
    ``target_critic_network_2``. The targets are ``Network.copy`` of the
    critics: the first builds E' from the encoder's name, the second shares
    E'. ``SacAgent`` soft-updates E' once per step (the second critic's
    update skips the variables it shares with the first).
    """
    kwargs = actor._saved_kwargs  # the actor's constructor arguments (tf_agents' Network records them)
    spec = (actor.input_tensor_spec, action_spec)
    common = {
        "encoder": kwargs.get("encoder", "cnn"),
        "encoder_kwargs": kwargs.get("encoder_kwargs"),
        "fc_layer_params": tuple(fc_layer_params),
    }
    critic_1 = SacCriticNetwork(spec, shared_encoder=actor.encoder, name="CriticNetwork1", **common)
    critic_2 = SacCriticNetwork(spec, shared_encoder=actor.encoder, name="CriticNetwork2", **common)
    target_1 = critic_1.copy(shared_encoder=None, name="TargetCriticNetwork1")
    target_2 = critic_2.copy(shared_encoder=target_1.encoder, name="TargetCriticNetwork2")
    return {
        "critic_network": critic_1,
        "critic_network_2": critic_2,
        "target_critic_network": target_1,
        "target_critic_network_2": target_2,
    }
