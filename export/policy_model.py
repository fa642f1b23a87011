"""A trained policy's acting network, restored from a training folder, as one serving function.

``load_trained_policy(root_dir)`` reads ``policy_network.json`` (written by
every trainer, see ``sit_keras.agents.policy_network``), rebuilds the network
and restores its newest training checkpoint. ``TrainedPolicy.outputs`` is the
one forward pass every export format shares:

- actor networks (PPO, SAC, sensor policies): ``action`` (the greedy action:
  argmax of the logits, or the mode of the squashed normal) and ``logits``
  (discrete) or ``loc`` / ``scale`` of the normal before squashing (continuous);
- Q-networks (DQN): ``action`` (argmax) and ``q_values``;
- categorical Q-networks (C51): ``action``, ``q_values`` (the expectation over
  the support) and ``logits`` per action and atom.

Stateful networks (recurrent, AttentionNeuron) take their state as explicit
inputs ``state_<name>`` and return it as ``next_state_<name>``; permutation
invariant sensor networks also take a boolean ``sensor_mask``, so that a
model with a fixed number of rows (TFLite) runs with fewer readings.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
import tensorflow_probability as tfp
import tree
from tf_agents.networks import network
from tf_agents.policies import actor_policy, categorical_q_policy, greedy_policy, q_policy, tf_policy
from tf_agents.trajectories import time_step as ts

from sit_keras.agents import policy_network

OBSERVATION = "observation"
SENSOR_MASK = "sensor_mask"
STATE_PREFIX = "state_"
NEXT_STATE_PREFIX = "next_" + STATE_PREFIX

DISTRIBUTION, Q_VALUES, CATEGORICAL_Q = "distribution", "q_values", "categorical_q"


def _state_names(state_spec: Any) -> list[str]:
    """Signature-safe names of the flattened state: ``state_<nest path>``."""
    # dm-tree orders a nest as tf.nest does (dict keys sorted).
    paths = ["_".join(map(str, path)) or "0" for path, _ in tree.flatten_with_path(state_spec)]
    return [STATE_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", path) for path in paths]


@dataclasses.dataclass
class TrainedPolicy:
    """The acting network of a training folder with its trained weights.

    Attributes:
      description: the folder's ``policy_network.json``.
      network: the rebuilt network, weights restored.
      checkpoint: the checkpoint the weights came from.
      root_dir: the training folder.
    """

    description: policy_network.PolicyNetworkDescription
    network: network.Network
    checkpoint: str
    root_dir: str

    @property
    def kind(self) -> str:
        """``DISTRIBUTION``, ``Q_VALUES`` or ``CATEGORICAL_Q``: what the network outputs."""
        if isinstance(self.network, network.DistributionNetwork):
            return DISTRIBUTION
        return CATEGORICAL_Q if hasattr(self.network, "num_atoms") else Q_VALUES

    @property
    def observation_spec(self) -> tf.TensorSpec:
        return self.description.observation_spec

    @property
    def action_spec(self) -> tf.TensorSpec:
        return self.description.action_spec

    @property
    def takes_sensor_set(self) -> bool:
        """True for permutation-invariant sensor networks: ``call`` takes a ``sensor_mask``.

        Such a network also has ``initial_state(batch_size, num_sensors)``.
        """
        return "sensor_mask" in inspect.signature(self.network.call).parameters

    @property
    def is_stateful(self) -> bool:
        return bool(tf.nest.flatten(self.network.state_spec))

    @property
    def state_names(self) -> list[str]:
        return _state_names(self.network.state_spec) if self.is_stateful else []

    def initial_state(self, batch_size: int, num_sensors: int | None = None) -> list[tf.Tensor]:
        """The flattened initial state (empty for feed-forward networks)."""
        if not self.is_stateful:
            return []
        if num_sensors is not None and self.takes_sensor_set:
            # Per-sensor states have one row per reading.
            state = self.network.initial_state(batch_size, num_sensors)
        else:
            state = self.network.get_initial_state(batch_size)
        return tf.nest.flatten(state)

    def observation_shape(self, num_sensors: int | None = None) -> tuple[int | None, ...]:
        """The observation's shape without batch; for sensor sets ``(num_sensors, ...)`` (None: any)."""
        shape = tuple(self.observation_spec.shape)
        return (num_sensors, *shape[1:]) if self.takes_sensor_set else shape

    def outputs(
        self,
        observation: tf.Tensor,
        state: list[tf.Tensor] | None = None,
        sensor_mask: tf.Tensor | None = None,
    ) -> dict[str, tf.Tensor]:
        """The named outputs for a batch of observations (and flattened states); see the module docstring."""
        step_type = tf.fill(tf.shape(observation)[:1], ts.StepType.MID)
        network_state = tf.nest.pack_sequence_as(self.network.state_spec, state) if self.is_stateful else ()
        if self.takes_sensor_set:
            result, next_state = self.network.call(
                observation, step_type=step_type, network_state=network_state, sensor_mask=sensor_mask
            )
        else:
            result, next_state = self.network(observation, step_type=step_type, network_state=network_state)
        outputs = self._head_outputs(result)
        for name, tensor in zip(self.state_names, tf.nest.flatten(next_state), strict=True):
            outputs["next_" + name] = tensor
        return outputs

    def _head_outputs(self, result: Any) -> dict[str, tf.Tensor]:
        minimum = tf.cast(self.action_spec.minimum, self.action_spec.dtype)
        if self.kind == DISTRIBUTION:
            if isinstance(result, tfp.distributions.Categorical):
                logits = result.logits_parameter()
                action = tf.cast(tf.argmax(logits, axis=-1), self.action_spec.dtype) + minimum
                return {"action": action, "logits": logits}
            # TF-Agents' SquashToSpecNormal (SAC, PPO's tanh-squashed normal) wraps a Normal or a
            # MultivariateNormalDiag; mean() / stddev() read either.
            normal = getattr(result, "input_distribution", result)
            return {
                "action": tf.cast(result.mode(), self.action_spec.dtype),
                "loc": normal.mean(),
                "scale": normal.stddev(),
            }
        if self.kind == CATEGORICAL_Q:
            extra = self.description.extra
            support = tf.linspace(
                float(extra["min_q_value"]), float(extra["max_q_value"]), self.network.num_atoms
            )
            q_values = tf.reduce_sum(tf.nn.softmax(result, axis=-1) * support, axis=-1)
            action = tf.cast(tf.argmax(q_values, axis=-1), self.action_spec.dtype) + minimum
            return {"action": action, "q_values": q_values, "logits": result}
        action = tf.cast(tf.argmax(result, axis=-1), self.action_spec.dtype) + minimum
        return {"action": action, "q_values": result}

    def input_signature(
        self, batch_size: int | None, num_sensors: int | None = None
    ) -> dict[str, tf.TensorSpec]:
        """Named input specs of the serving function (``num_sensors``: see ``serving_function``)."""
        shape = (batch_size, *self.observation_shape(num_sensors))
        specs = {OBSERVATION: tf.TensorSpec(shape, self.observation_spec.dtype, name=OBSERVATION)}
        if self.takes_sensor_set:
            specs[SENSOR_MASK] = tf.TensorSpec(shape[:2], tf.bool, name=SENSOR_MASK)
        for name, state_shape, dtype in zip(self.state_names, *self._state_shapes(num_sensors), strict=True):
            specs[name] = tf.TensorSpec((batch_size, *state_shape), dtype, name=name)
        return specs

    def _state_shapes(self, num_sensors: int | None) -> tuple[list[tuple], list[tf.DType]]:
        """Per-example state shapes and dtypes; a sensor set's per-sensor states get ``num_sensors`` rows."""
        if not self.takes_sensor_set:
            state = self.initial_state(1)
            return [tuple(t.shape[1:]) for t in state], [t.dtype for t in state]
        # Probe with 1 and 2 sensors: the entries that change have a sensor axis.
        one, two = self.initial_state(1, 1), self.initial_state(1, 2)
        shapes = [
            (num_sensors, *a.shape[2:]) if a.shape != b.shape else tuple(a.shape[1:])
            for a, b in zip(one, two, strict=True)
        ]
        return shapes, [t.dtype for t in one]

    def serving_function(
        self, batch_size: int | None = None, num_sensors: int | None = None
    ) -> tf.types.experimental.ConcreteFunction:
        """The concrete serving function: named inputs (``input_signature``) to named outputs.

        ``batch_size=None`` accepts any batch (SavedModel); TFLite needs a
        fixed one. ``num_sensors`` is the number of readings of a sensor set
        model: ``None`` for any (SavedModel), the documented maximum for TFLite.
        """
        specs = self.input_signature(batch_size, num_sensors)

        @tf.function(autograph=False)
        def serve(inputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            state = [inputs[name] for name in self.state_names]
            return self.outputs(inputs[OBSERVATION], state, inputs.get(SENSOR_MASK))

        return serve.get_concrete_function(specs)

    def tf_agents_policy(self) -> tf_policy.TFPolicy:
        """TF-Agents' greedy policy on this network (for the SavedModel's ``action`` signatures)."""
        time_step_spec = ts.time_step_spec(self.observation_spec)
        if self.kind == DISTRIBUTION:
            policy = actor_policy.ActorPolicy(time_step_spec, self.action_spec, self.network, training=False)
        elif self.kind == CATEGORICAL_Q:
            extra = self.description.extra
            policy = categorical_q_policy.CategoricalQPolicy(
                time_step_spec, self.action_spec, self.network,
                min_q_value=float(extra["min_q_value"]), max_q_value=float(extra["max_q_value"]),
            )  # fmt: skip
        else:
            policy = q_policy.QPolicy(time_step_spec, self.action_spec, self.network)
        return greedy_policy.GreedyPolicy(policy)


def load_trained_policy(root_dir: str) -> TrainedPolicy:
    """The acting network of the training folder ``root_dir`` with its newest checkpoint's weights.

    Raises:
      FileNotFoundError: ``root_dir`` has no ``policy_network.json`` or no checkpoint.
    """
    description = policy_network.read_description(root_dir)
    net = policy_network.build_network(description)
    checkpoint = policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    return TrainedPolicy(description, net, checkpoint, root_dir)
