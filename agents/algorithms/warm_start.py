"""Starting an actor from another run's trained weights (PPO's ``ppo.initial_actor_dir``).

Tang & Ha (NeurIPS 2021) train the AttentionNeuron agent on its own return
(ES); here a student cloned from a teacher (``sit-distill``) can go on from its
cloned weights with PPO instead of from random ones. The folder is any
training folder of this project (``policy_network.json`` + ``checkpoints/``)
whose acting network is the new run's actor: the same class, encoder, encoder
and dense-layer arguments, observation and action specs. Only the actor's
weights are read; the critic, the optimiser and the counters start afresh.

Behaviour cloning trains a continuous actor's mode alone, so its standard
deviation is still the projection's initial one (softplus(0) = 0.69 of the
action range): ``set_action_std`` sets it to what the new run should sample with.

A discrete actor starts from random weights near the uniform policy;
``set_action_probabilities`` makes it start near other probabilities instead
(``ppo.initial_action_probabilities``): an exploration prior that the run then
trains away from like any other weights.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
from tf_agents.networks import categorical_projection_network, network, normal_projection_network

from sit_keras.agents.networks import policy_network

# Constructor arguments that change how a network trains, not which weights it has.
_TRAINING_ONLY_ARGUMENTS = ("previous_action_noise",)


def _architecture(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` in the JSON form ``policy_network.json`` keeps, without the training-only arguments."""
    plain = policy_network.jsonable(dict(kwargs))
    return {k: v for k, v in plain.items() if k not in _TRAINING_ONLY_ARGUMENTS}


def read_folder(actor_dir: str, setting: str) -> policy_network.PolicyNetworkDescription:
    """The description of ``actor_dir``'s acting network; ``ValueError`` (one sentence) if it has none."""
    try:
        description = policy_network.read_description(actor_dir)
    except FileNotFoundError as error:
        raise ValueError(f"{setting} = {actor_dir!r} is not a training folder: {error}") from error
    if tf.train.latest_checkpoint(os.path.join(actor_dir, policy_network.CHECKPOINT_DIR)) is None:
        raise ValueError(
            f"{setting} = {actor_dir!r} has no checkpoint in {policy_network.CHECKPOINT_DIR}/: "
            "its run never saved the weights to start from."
        )
    return description


def check_same_actor(
    description: policy_network.PolicyNetworkDescription,
    actor_class: str,
    actor_kwargs: Mapping[str, Any],
    setting: str,
    actor_dir: str,
) -> None:
    """``ValueError`` unless the folder's network is ``actor_class(**actor_kwargs)``, training-only
    arguments aside."""
    theirs, ours = _architecture(description.network_kwargs), _architecture(actor_kwargs)
    if description.network_class != actor_class or theirs != ours:
        raise ValueError(
            f"{setting} = {actor_dir!r} holds a {description.network_class} with {theirs}, but this run's "
            f"actor is a {actor_class} with {ours}: set the encoder, train_eval.encoder_kwargs and "
            "fc_layer_params as that run did."
        )


def check_same_specs(
    description: policy_network.PolicyNetworkDescription,
    observation_spec: tf.TensorSpec,
    action_spec: tf.TensorSpec,
    setting: str,
    actor_dir: str,
) -> None:
    """``ValueError`` unless the folder's network saw this run's observation and action shapes and dtypes."""
    for what, theirs, ours in (
        ("observations", description.observation_spec, observation_spec),
        ("actions", description.action_spec, action_spec),
    ):
        if theirs.shape != ours.shape or theirs.dtype != ours.dtype:
            raise ValueError(
                f"{setting} = {actor_dir!r} was trained on {what} {theirs.shape} {theirs.dtype.name}, "
                f"but this run's environment ({description.env_name!r} there) gives {ours.shape} "
                f"{ours.dtype.name}."
            )


def load_actor(
    actor_net: network.Network, description: policy_network.PolicyNetworkDescription, actor_dir: str
) -> str:
    """Reads the newest checkpoint of ``actor_dir`` into ``actor_net``; returns the checkpoint's path."""
    actor_net.create_variables()
    return policy_network.restore_network(actor_net, actor_dir, description.checkpoint_attribute)


def set_action_probabilities(actor_net: network.Network, probabilities: Sequence[float]) -> None:
    """Starts a categorical actor near ``probabilities`` in every state: its logits' bias set to their logs.

    The logits are ``W h + b``; TF-Agents initialises ``W`` at a tenth of the usual
    scale, so at the start the policy is ``softmax(b)`` up to a small state-dependent part.

    Raises:
      ValueError: the actor is not categorical, or ``probabilities`` has another length than its actions.
    """
    projection = getattr(actor_net, "_projection", None)
    if not isinstance(projection, categorical_projection_network.CategoricalProjectionNetwork):
        raise ValueError(
            f"Initial action probabilities need a discrete actor; {type(actor_net).__name__} has "
            f"{type(projection).__name__}."
        )
    actor_net.create_variables()
    bias = projection._projection_layer.bias  # TF-Agents' logits layer (Dense, bias initialised to 0)
    if bias.shape[-1] != len(probabilities):
        raise ValueError(
            f"ppo.initial_action_probabilities gives {len(probabilities)} probabilities for an actor of "
            f"{bias.shape[-1]} actions."
        )
    bias.assign(tf.math.log(tf.constant(list(probabilities), bias.dtype)))


def set_action_std(actor_net: network.Network, std: float) -> None:
    """Makes a normal projection's state-independent standard deviation ``std`` (softplus(bias) = std).

    Raises:
      ValueError: the actor has no such projection (discrete actions, or a state-dependent std).
    """
    projection = getattr(actor_net, "_projection", None)
    bias = getattr(projection, "_bias", None)
    if not isinstance(projection, normal_projection_network.NormalProjectionNetwork) or bias is None:
        raise ValueError(
            f"An initial action std needs a continuous actor with a state-independent std; "
            f"{type(actor_net).__name__} has {type(projection).__name__}."
        )
    actor_net.create_variables()
    inverse_softplus = std + math.log(-math.expm1(-std))  # log(exp(std) - 1), stable for small std
    for variable in bias.trainable_variables:
        variable.assign(tf.fill(variable.shape, tf.cast(inverse_softplus, variable.dtype)))
