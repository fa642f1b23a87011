"""A trained policy's acting network, restored from a training folder, as one serving function.

``load_trained_policy(root_dir)`` reads ``policy_network.json`` (written by
every trainer, see ``sit_keras.agents.networks.policy_network``), rebuilds the network
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

The SavedModel's serving function checks every request inside the graph
(``checked_inputs``, ``checked_outputs``), because TF Serving and a loaded
signature do not compare a request with the signature's shapes: a request
without its batch axis aborted the process in a oneDNN kernel. TF-Agents'
``action`` signature is checked the same way (``CheckedPolicy``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tensorflow_probability as tfp
import tree
from tf_agents.networks import network
from tf_agents.policies import actor_policy, categorical_q_policy, greedy_policy, q_policy, tf_policy
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.environments.transforms import TRANSFORMS
from sit_keras.agents.networks import policy_network
from sit_keras.models.base import Encoder
from sit_keras.symmetry import INVARIANT

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


BATCH, SENSORS = "batch", "sensors"


def axis_names(specs: Mapping[str, tf.TensorSpec], takes_sensor_set: bool) -> dict[str, list[str | int]]:
    """Each input's axes: ``"batch"``, ``"sensors"`` (a sensor set's readings) or the fixed size.

    The first axis is the batch; an unknown size after it is a sensor set's
    number of readings (only sensor sets have one); every other size is
    fixed by the signature. Axes of the same name have the same size in all
    inputs of one request (see ``checked_inputs``).
    """
    names: dict[str, list[str | int]] = {}
    for name, spec in specs.items():
        dims = spec.shape.as_list()
        if any(d is None for d in dims[1:]) and not takes_sensor_set:
            raise ValueError(f"Input '{name}' has an unknown non-batch axis: {spec.shape}.")
        names[name] = [BATCH, *(SENSORS if d is None else int(d) for d in dims[1:])]
    return names


def shape_text(axes: Sequence[str | int]) -> str:
    """``(batch, 14, 14, 3)``: an input's axes as people write a shape."""
    return "(" + ", ".join(map(str, axes)) + ("," if len(axes) == 1 else "") + ")"


def _runtime_shape(x: tf.Tensor, rank: int) -> tuple[tf.Tensor, tf.Tensor]:
    """``x``'s rank and its shape cut or zero-padded to ``rank`` entries, both computed at run time.

    Graph optimisation takes the signature's shapes as given: ``tf.rank`` /
    ``tf.shape`` are trace-time constants where the spec pins them, and
    Grappler folds ``Size(Shape(x))`` into the signature's rank when a loaded
    signature runs, so a request of a higher rank with the right leading
    sizes passed. The length of a ``boolean_mask`` result is known only once
    it has run, so the rank comes from that.
    """
    shape = tf.raw_ops.Shape(input=x, out_type=tf.int32)
    shape = tf.boolean_mask(shape, tf.greater_equal(shape, 0))  # all of it, of a length unknown to the graph
    padded = tf.concat([shape, tf.zeros([rank], tf.int32)], axis=0)[:rank]
    return tf.raw_ops.Size(input=shape, out_type=tf.int32), padded


def checked_inputs(
    inputs: Mapping[str, tf.Tensor],
    specs: Mapping[str, tf.TensorSpec],
    takes_sensor_set: bool = False,
    reference: str = OBSERVATION,
) -> dict[str, tf.Tensor]:
    """``inputs`` behind in-graph checks of the whole request: a bad request raises, never aborts.

    TF Serving and a loaded signature feed a tensor of any shape to the
    graph: the signature's shapes are not enforced, and a wrong rank or size
    reached kernels that aborted the process (oneDNN's convolution) or
    answered for the wrong number of examples. Checked, in this order: each
    input's rank and every axis (``axis_names``; the batch and the number of
    readings are those of ``reference``, at least 1), then finiteness of the
    float inputs, then that every example of a sensor set has a reading in
    its ``sensor_mask``. A failed check raises ``InvalidArgumentError``, TF
    Serving's request error (HTTP 400), naming the input, the expected shape
    and the received one. Every returned tensor depends on every check, so
    no op of the network runs before they pass. The dtypes need no check
    here: the runtime refuses a mismatched dtype before the graph runs.
    """
    axes = axis_names(specs, takes_sensor_set)
    reference_rank, reference_shape = _runtime_shape(inputs[reference], len(axes[reference]))
    sizes = {BATCH: reference_shape[0], SENSORS: reference_shape[1] if takes_sensor_set else None}
    checks: list[tf.Operation] = []
    # The reference first: a bad batch is then reported on it, not on the input compared with it.
    for name in sorted(specs, key=lambda n: n != reference):
        spec = specs[name]
        rank, shape = (
            (reference_rank, reference_shape) if name == reference
            else _runtime_shape(inputs[name], len(axes[name]))
        )  # fmt: skip
        expected = tf.stack([sizes[a] if isinstance(a, str) else tf.constant(a) for a in axes[name]])
        variable = [i for i, a in enumerate(axes[name]) if isinstance(a, str)]
        valid = tf.reduce_all(
            [
                tf.equal(rank, len(axes[name])),
                tf.reduce_all(tf.equal(shape, expected)),
                tf.reduce_all(tf.gather(expected, variable) >= 1),
            ]
        )
        sizes_text = " and ".join(a for a in (BATCH, SENSORS) if a in axes[name])
        rule = "at least 1" if name == reference else f"as in {reference}"
        # Names without quotes: the Assert op prints its strings C-escaped (\').
        message = (
            f"Input {name} must have shape {shape_text(axes[name])} ({sizes_text} {rule}) "
            f"and dtype {spec.dtype.name}; received shape"
        )
        with tf.control_dependencies(checks[-1:]):  # in order: the first failure is reported
            # The data is the shape as received (any rank), not the padded one.
            checks.append(
                tf.debugging.Assert(valid, [message, tf.raw_ops.Shape(input=inputs[name])], summarize=16)
            )
    with tf.control_dependencies(checks[-1:]):
        checked = {name: tf.identity(inputs[name]) for name in specs}
    for name, spec in specs.items():
        if spec.dtype.is_floating:
            checked[name] = tf.debugging.check_numerics(checked[name], f"Input {name} must be finite")
    if takes_sensor_set and SENSOR_MASK in checked:
        has_reading = tf.debugging.Assert(
            tf.reduce_all(tf.reduce_any(checked[SENSOR_MASK], axis=1)),
            [f"Input {SENSOR_MASK} must mark at least one reading (True) in every example"],
        )
        with tf.control_dependencies([has_reading]):
            checked = {name: tf.identity(value) for name, value in checked.items()}
    return checked


def checked_outputs(outputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """``outputs``, each gated on every float output being finite: a NaN must not become an action.

    Finite inputs far outside the training range (e.g. 1e30) can overflow;
    the request then fails with ``InvalidArgumentError`` instead of an
    arbitrary answer. Every output waits for all the checks, so a gRPC
    request whose ``output_filter`` asks for ``action`` alone is checked too.
    """
    checks = [
        tf.debugging.check_numerics(
            value, f"Output {name} is not finite for these (finite) inputs; are they in the training range?"
        ).op
        for name, value in outputs.items()
        if value.dtype.is_floating
    ]
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in outputs.items()}


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
    def invariant_transforms(self) -> tuple[str, ...]:
        """The image transforms of ``environments.TRANSFORMS`` its encoder declares invariance to.

        From the encoder's ``declared_symmetry`` (``sit_keras.symmetry``):
        ``("rot90", "rot180", "rot270", "flip_h", "flip_v")`` for the SiT
        family, ``()`` for the baselines and for vector or sensor observations.
        """
        for module in self.network.submodules:
            if isinstance(module, Encoder):
                symmetry = module.declared_symmetry
                if symmetry.acts_on == "image" and symmetry.kind == INVARIANT:
                    return tuple(t for t in TRANSFORMS if t in symmetry.elements)
                return ()
        return ()

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
        self, batch_size: int | None = None, num_sensors: int | None = None, validate: bool | None = None
    ) -> tf.types.experimental.ConcreteFunction:
        """The concrete serving function: named inputs (``input_signature``) to named outputs.

        ``batch_size=None`` accepts any batch (SavedModel); TFLite needs a
        fixed one. ``num_sensors`` is the number of readings of a sensor set
        model: ``None`` for any (SavedModel), the documented maximum for TFLite.

        ``validate`` (default: ``batch_size is None``, the SavedModel) checks
        every request inside the graph before the network sees it
        (``checked_inputs``) and refuses non-finite outputs, because TF Serving
        feeds a request to the graph without comparing it to the signature:
        a wrong rank reached a oneDNN kernel and aborted the whole process.
        TFLite models are not validated in the graph (TFLite has no ``Assert``
        op); their runtime checks inputs in numpy (``export.runtime``).
        """
        specs = self.input_signature(batch_size, num_sensors)
        validate = batch_size is None if validate is None else validate

        @tf.function(autograph=False)
        def serve(inputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            if validate:
                inputs = checked_inputs(inputs, specs, self.takes_sensor_set)
            state = [inputs[name] for name in self.state_names]
            outputs = self.outputs(inputs[OBSERVATION], state, inputs.get(SENSOR_MASK))
            return checked_outputs(outputs) if validate else outputs

        return serve.get_concrete_function(specs)

    def tf_agents_policy(self) -> tf_policy.TFPolicy:
        """TF-Agents' greedy policy on this network, checking its inputs (``CheckedPolicy``).

        For the SavedModel's ``action`` signature and function: TF Serving serves every
        signature of a SavedModel, so TF-Agents' must refuse bad requests as ``serving_default`` does.
        """
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
        return CheckedPolicy(greedy_policy.GreedyPolicy(policy))


class CheckedPolicy(tf_policy.TFPolicy):
    """A TF-Agents policy whose ``action`` checks the time step and state first (``checked_inputs``).

    Every entry of the batched time step (``step_type``, ``reward``,
    ``discount``, ``observation``) and of the policy state must have the
    wrapped policy's spec shape after the batch axis, one batch of at least
    1, and finite floats; otherwise ``action`` raises ``InvalidArgumentError``.
    The SavedModel's TF-Agents ``action`` signature goes through this, so a
    malformed request to it cannot abort TF Serving either.
    """

    def __init__(self, policy: tf_policy.TFPolicy) -> None:
        super().__init__(
            policy.time_step_spec, policy.action_spec, policy.policy_state_spec, policy.info_spec,
            clip=False, automatic_state_reset=False, name="checked_" + policy.name,
        )  # fmt: skip
        self._wrapped = policy

    def _variables(self) -> list[tf.Variable]:
        return self._wrapped.variables()

    def _action(self, time_step: ts.TimeStep, policy_state: Any, seed: Any = None) -> Any:
        nest = (time_step, policy_state)
        specs = tf.nest.flatten((self.time_step_spec, self.policy_state_spec))
        names = ["/".join(map(str, path)) for path, _ in tree.flatten_with_path(nest)]
        batched = {n: tf.TensorSpec((None, *s.shape), s.dtype) for n, s in zip(names, specs, strict=True)}
        reference = next(n for n in names if n.startswith("0/observation"))
        inputs = dict(zip(names, tf.nest.flatten(nest), strict=True))
        checked = checked_inputs(inputs, batched, reference=reference)
        time_step, policy_state = tf.nest.pack_sequence_as(nest, [checked[n] for n in names])
        return self._wrapped.action(time_step, policy_state, seed)

    def _distribution(self, time_step: ts.TimeStep, policy_state: Any) -> Any:
        return self._wrapped.distribution(time_step, policy_state)


def load_trained_policy(root_dir: str) -> TrainedPolicy:
    """The acting network of the training folder ``root_dir`` with its newest checkpoint's weights.

    Raises:
      FileNotFoundError: ``root_dir`` has no ``policy_network.json`` or no checkpoint.
    """
    description = policy_network.read_description(root_dir)
    net = policy_network.build_network(description)
    checkpoint = policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    return TrainedPolicy(description, net, checkpoint, root_dir)
