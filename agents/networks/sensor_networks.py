"""Permutation-invariant TF-Agents actor and critic networks on AttentionNeuron, for vector observations.

::

    observation o_t (B, [T,] N)    N unordered scalar sensors; any N at call time
    network state: hidden, cell    (B, N, H), the per-sensor LSTM memories of eq. 1
                   previous_action (B, A), a_{t-1} (actor only)
                   memory_hidden, memory_cell (B, U), with memory_units U > 0 only
        -> SensorSetEncoder's AttentionNeuron (eq. 1-2), m_t (B, M)
        -> m_t * D / N  (tanh attention only: footnote 3 of Tang & Ha)
        -> SensorSetEncoder's projection, Dense(output_dim)
        -> [LSTM(U) over the steps: the code's memory]  (encoder_kwargs["memory_units"] = U > 0)
        -> [Dense + ReLU] * len(fc_layer_params)
        -> actor: categorical (discrete) or normal (continuous) projection;
                  the new previous_action is the distribution's mode
           critic: Dense(1)

Tang & Ha, "The Sensory Neuron as a Transformer" (NeurIPS 2021), sections 3-4:
every observation entry is one sensory neuron (``N = D``, ``o_t[i]`` in R^1,
Table 1's CartPole and Ant), the key function is an LSTM that sees the
reading and the previous action, values pass the readings through (W_v = I)
and ``sigma`` is tanh by default.

Symmetry: the action distribution (and the value) is invariant under every
permutation of the ``N`` sensors (the symmetric group ``S_N``) applied
together to the observation and to the per-sensor ``hidden`` / ``cell``
state, which is permuted the same way (equivariant); the previous action is
not per-sensor and does not move. A policy that is handed a shuffled
observation from the first step of an episode on therefore acts exactly as
on the unshuffled one (up to the rounding of the sum over sensors), over the
whole episode.

Duplicated sensors (10 = 5 twice, Table 2): with ``attention="softmax"``
eq. 2 is a weighted mean over the sensors and a duplicate of every sensor
leaves it unchanged. With ``tanh`` it is a sum, which doubles; the paper
"scaled the output from the AttentionNeuron layer by 0.5" for its 10-input
tests (footnote 3). ``count_scaling=True`` does that for any ``N``: ``m_t``
is multiplied by ``D / N`` (``D`` the training observation size, ``N`` the
number of present sensors), exactly 1 at training time. Both make the
policy invariant under duplicating every sensor (with its state).

The code's memory (``memory_units``, off by default; not in the paper's CartPole
agent, whose AttentionNeuron feeds a feed-forward policy): an LSTM over the
projected code ``m_t``, between the projection and the dense layers. Its
input is already pooled over the sensors, so it keeps the invariance, and its
state is not per-sensor (like the previous action, a permutation does not
move it). Each sensory neuron reads its own reading's history and the
previous action only; this memory lets the policy read the readings' history
*together* (Tang & Ha's CarRacing agent, A.4.4, likewise feeds the layer's
output to AttentionAgent's LSTM controller). While the pole swings, the cloned
CartPoleSwingUpHarder students err 2.7 to 6.8 times as much as an MLP student
(docs/results.md); this memory is meant for that.

The previous action: a TF-Agents network never sees the action its policy
samples, so the actor feeds its own *mode* back (the greedy action; for the
stochastic collect policy it is the mean, not the sample), held in the
network state so that the network is self-contained: the exported model
takes ``hidden``, ``cell`` and ``previous_action`` as explicit inputs and
returns them. It is held fixed for gradients (an input of the next step, as
in the paper); ``previous_action_noise`` adds N(0, sigma) to it in training
calls, as the paper's behaviour cloning does (A.4.2). The critic's sensory
neurons see a zero action (a value network gets observations only). Where
``step_type`` is FIRST the state is reset to zeros before the step.

Recurrent training: PPO (``train.train_eval``) trains on whole environment
sequences from the initial state; collection carries the state across
iterations as TF-Agents' actors do.

Precision: built inside ``sit_keras.mixed_precision.dtype_policy(precision)``,
the torso (``SensorTorso``: AttentionNeuron, projection, dense layers) computes
in the policy's compute dtype, while the projection networks and the value head
are float32 layers (``full_precision()``) with float32 inputs: the
distribution, its log-probabilities and the values are float32. The network
state (``hidden``, ``cell``, ``previous_action``) is kept in ``floatx``
(float32) between steps, as its spec says: it is cast to the compute dtype on
entry to each step and back on exit. Under float16 the torso's whole unroll
over time (one step, or the ``tf.scan`` over a sequence) is one loss-scaled
region (``loss_scaling``; the torso's ``loss_scale``). Variables are float32
and named as in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras
from tf_agents.networks import categorical_projection_network, network, normal_projection_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.networks import loss_scaling
from sit_keras.agents.networks.actor_critic import head_input, single_spec
from sit_keras.agents.networks.policy_network import register_network
from sit_keras.layers.attention_neuron import apply_kernel, lstm_step, unit_forget_bias
from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.mixed_precision import full_precision
from sit_keras.models.sensor_encoder import SensorSetEncoder
from sit_keras.symmetry import SENSORS, Symmetry

SENSOR_ENCODER = "attention_neuron"
"""The ``train_eval(encoder=...)`` name of these networks: the recurrent entry of the registry."""

DEFAULT_ENCODER_KWARGS: dict[str, Any] = {"output_dim": 64, "activation": "tanh"}
"""``SensorSetEncoder`` arguments used unless given; the others default to Table 1's CartPole
(16 queries of dimension 8, LSTM size 8, projection 32, tanh attention)."""

_SET_BY_THE_NETWORK = ("num_features", "action_dim", "num_sensor_types")

MEMORY_UNITS = "memory_units"
"""The ``encoder_kwargs`` key of the code's memory (an LSTM after the projection; 0: none)."""

MEMORY_STATE = ("memory_hidden", "memory_cell")
"""The network-state names of the code's memory, ``(B, memory_units)`` each."""

State = dict[str, tf.Tensor]


def _vector_spec(observation_spec: tf.TensorSpec) -> int:
    if observation_spec.shape.rank != 1 or not observation_spec.shape[0]:
        raise ValueError(
            f"The '{SENSOR_ENCODER}' networks take vector observations of shape (D,), one sensor per entry. "
            f"Received: observation shape={tuple(observation_spec.shape)}"
        )
    return int(observation_spec.shape[0])


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class SensorTorso(tf_keras.layers.Layer):
    """One step of the sensor encoder and the dense layers: readings ``(B, N)`` -> features ``(B, F)``.

    Symmetry: ``S_N``-invariant features, ``S_N``-equivariant per-sensor state
    (see the module docstring); ``N`` is free at call time.

    The parts of ``SensorSetEncoder`` (its ``neuron`` and ``projection``) are
    called one after the other rather than the encoder as a whole, so that
    ``m_t`` can be scaled by ``D / N`` between them (footnote 3).

    Args:
      num_sensors: ``D``, the training observation size (the reference of ``count_scaling``).
      action_dim: size of the previous action fed to the sensory neurons.
      encoder_kwargs: ``SensorSetEncoder`` arguments (``output_dim``, ``num_queries``,
        ``hidden_size``, ``attention``, ...), over ``DEFAULT_ENCODER_KWARGS``;
        ``num_features`` (1) and ``action_dim`` are set here. ``memory_units``
        (default 0) adds the code's memory, an LSTM of that size between the
        projection and the dense layers (module docstring).
      fc_layer_params: dense ReLU layers after the encoder (and the memory).
      count_scaling: scale ``m_t`` by ``D / N`` under tanh attention.
    """

    SYMMETRY: ClassVar[Symmetry] = SENSORS

    @property
    def declared_symmetry(self) -> Symmetry:
        """As its ``SensorSetEncoder``: ``S_N``-invariant features, equivariant per-sensor state."""
        return self.SYMMETRY

    def __init__(
        self,
        num_sensors: int,
        action_dim: int,
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        count_scaling: bool = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        options = {**DEFAULT_ENCODER_KWARGS, **dict(encoder_kwargs or {})}
        memory_units = options.pop(MEMORY_UNITS, 0)
        if isinstance(memory_units, bool) or not isinstance(memory_units, int) or memory_units < 0:
            raise ValueError(
                f"encoder_kwargs[{MEMORY_UNITS!r}] must be an integer >= 0 (0: no memory). "
                f"Received: {memory_units!r}"
            )
        self.memory_units = memory_units
        fixed = sorted(set(options) & set(_SET_BY_THE_NETWORK))
        if fixed:
            raise ValueError(
                f"encoder_kwargs may not set {fixed}: a sensor network reads one scalar per sensor "
                f"(num_features=1, no sensor types) and takes action_dim from the action spec."
            )
        self.num_sensors = int(num_sensors)
        self.action_dim = int(action_dim)
        self.encoder_kwargs = dict(encoder_kwargs or {})
        self.fc_layer_params = tuple(int(n) for n in fc_layer_params)
        self.encoder = SensorSetEncoder(num_features=1, action_dim=self.action_dim, dtype=self.dtype_policy,
                                        name="sensor_encoder", **options)  # fmt: skip
        self.dense_layers = [
            tf_keras.layers.Dense(int(n), activation="relu", dtype=self.dtype_policy, name=f"fc_{i}")
            for i, n in enumerate(fc_layer_params)
        ]
        self.count_scaling = bool(count_scaling) and self.encoder.attention == "tanh"
        size = self.memory_units or self.encoder.output_dim
        self.output_size = int(fc_layer_params[-1]) if len(fc_layer_params) else size

    @property
    def hidden_size(self) -> int:
        return self.encoder.hidden_size

    def build(self, input_shape: tf.TensorShape) -> None:
        build_sublayer(self.encoder, (None, None, 1))
        size = self.encoder.output_dim
        if self.memory_units:
            gates = 4 * self.memory_units
            self.memory_input_kernel = self.add_weight(
                "memory_input_kernel", (size, gates), initializer="glorot_uniform"
            )
            self.memory_recurrent_kernel = self.add_weight(
                "memory_recurrent_kernel", (self.memory_units, gates), initializer="orthogonal"
            )
            self.memory_bias = self.add_weight(
                "memory_bias", (gates,), initializer=unit_forget_bias(self.memory_units)
            )
            size = self.memory_units
        for layer in self.dense_layers:
            build_sublayer(layer, (None, size))
            size = layer.units
        super().build(input_shape)

    def call(
        self,
        readings: tf.Tensor,
        previous_action: tf.Tensor,
        hidden: tf.Tensor,
        cell: tf.Tensor,
        sensor_mask: tf.Tensor | None = None,
        memory: Sequence[tf.Tensor] = (),
        training: bool | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """``(features (B, F), hidden' (B, N, H), cell' (B, N, H), memory')`` of one step.

        ``memory`` is ``[h, c]`` of the code's memory, each ``(B, memory_units)``,
        and ``memory'`` the next (float32 under a mixed policy); both empty
        without the memory.
        """
        readings = tf.cast(readings, self.compute_dtype)[..., None]  # (B, N, 1)
        neuron = self.encoder.neuron
        code_set, (hidden, cell) = neuron(
            readings, previous_action, state=[hidden, cell], mask=sensor_mask, training=training
        )
        code = tf.reshape(code_set, [-1, self.encoder.code_size])
        if self.count_scaling:
            code = code * self._count_scale(readings, sensor_mask)
        features = self.encoder.projection(code, training=training)
        if self.memory_units:
            features, memory = self._remember(features, memory)
        else:
            memory = []
        for layer in self.dense_layers:
            features = layer(features, training=training)
        return features, hidden, cell, memory

    def _remember(self, features: tf.Tensor, memory: Sequence[tf.Tensor]) -> tuple[tf.Tensor, list]:
        """One step of the code's memory: its ``h'`` as the features, and ``[h', c']``.

        The matmuls run in the compute dtype, the gates and the state in
        ``stable_dtype`` (as the sensory neurons' LSTM).
        """
        if len(memory) != 2:
            raise ValueError(f"{self.name} has a memory of {self.memory_units} units: pass memory=[h, c].")
        state_dtype = stable_dtype(self.compute_dtype)
        hidden, cell = (tf.cast(m, state_dtype) for m in memory)
        gates = apply_kernel(features, self.memory_input_kernel) + self.memory_bias
        hidden, cell = lstm_step(gates, hidden, cell, self.memory_recurrent_kernel)
        return tf.cast(hidden, self.compute_dtype), [hidden, cell]

    def _count_scale(self, readings: tf.Tensor, sensor_mask: tf.Tensor | None) -> tf.Tensor:
        """``D / N`` per example, ``(B, 1)``: N the present sensors (at least 1)."""
        if sensor_mask is None:
            count = tf.cast(tf.shape(readings)[1], self.compute_dtype)
            return tf.fill([tf.shape(readings)[0], 1], self.num_sensors / count)
        count = tf.reduce_sum(tf.cast(sensor_mask, self.compute_dtype), axis=1, keepdims=True)
        return self.num_sensors / tf.maximum(count, tf.ones_like(count))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            num_sensors=self.num_sensors,
            action_dim=self.action_dim,
            encoder_kwargs=self.encoder_kwargs,
            fc_layer_params=self.fc_layer_params,
            count_scaling=self.count_scaling,
        )
        return config


def _sensor_state_spec(torso: SensorTorso, num_sensors: int, dtype: tf.DType) -> dict[str, tf.TensorSpec]:
    """The per-sensor LSTM state, and the code's memory when the torso has one."""
    shape = (num_sensors, torso.hidden_size)
    spec = {
        "hidden": tf.TensorSpec(shape, dtype, name="hidden"),
        "cell": tf.TensorSpec(shape, dtype, name="cell"),
    }
    if torso.memory_units:
        spec.update({name: tf.TensorSpec((torso.memory_units,), dtype, name=name) for name in MEMORY_STATE})
    return spec


def _time_major(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


class _SensorNetwork:
    """Shared part of the actor and the critic: input checks, resets and the unroll over time."""

    _num_sensors: int
    _torso: SensorTorso
    _state_dtype: tf.DType

    def _torso_step(
        self,
        observations: tf.Tensor,
        previous_action: tf.Tensor,
        state: State,
        sensor_mask: tf.Tensor | None,
        training: bool,
    ) -> tuple[tf.Tensor, State]:
        """One torso step in its compute dtype: its features, and the torso's new state in the state dtype.

        ``state`` holds ``hidden`` and ``cell`` (and the code's memory); other entries are not read.
        """
        dtype = self._torso.compute_dtype
        memory = [state[name] for name in MEMORY_STATE if name in state]
        features, hidden, cell, memory = self._torso(
            observations, tf.cast(previous_action, dtype), tf.cast(state["hidden"], dtype),
            tf.cast(state["cell"], dtype), sensor_mask=sensor_mask, memory=memory, training=training,
        )  # fmt: skip
        new_state = {"hidden": hidden, "cell": cell, **dict(zip(MEMORY_STATE, memory, strict=False))}
        return features, {name: tf.cast(value, self._state_dtype) for name, value in new_state.items()}

    def _scaled(self, fn: Callable[..., Any], **tensors: tf.Tensor | None) -> Any:
        """``fn(**tensors)``, one loss-scaled region under float16 (``loss_scaling``); Nones stay None."""
        names = [name for name, value in tensors.items() if value is not None]

        def region(*values: tf.Tensor) -> Any:
            return fn(**{**tensors, **dict(zip(names, values, strict=True))})

        loss_scale = getattr(self._torso, "loss_scale", None)
        return loss_scaling.scaled_call(loss_scale, region, *(tensors[name] for name in names))

    def _no_features(self, observations: tf.Tensor) -> tf.Tensor:
        """Zero features ``(B, F)`` in the torso's compute dtype: the initial output of ``_scan``."""
        return tf.zeros([tf.shape(observations)[0], self._torso.output_size], self._torso.compute_dtype)

    def initial_state(self, batch_size: int | tf.Tensor, num_sensors: int | tf.Tensor | None = None) -> State:
        """Zero state for ``batch_size`` examples of ``num_sensors`` sensors (default: the spec's ``D``)."""
        num_sensors = self._num_sensors if num_sensors is None else num_sensors
        state = {}
        for name, spec in self.state_spec.items():
            shape = [num_sensors, *spec.shape[1:]] if name in ("hidden", "cell") else list(spec.shape)
            state[name] = tf.zeros([batch_size, *shape], spec.dtype)
        return state

    def _check_inputs(
        self, observations, step_type, network_state, sensor_mask
    ) -> tuple[tf.Tensor, tf.Tensor | None, State, tf.Tensor | None]:
        observations = tf.convert_to_tensor(observations)
        if observations.shape.rank not in (2, 3):
            raise ValueError(
                f"{self.name} expects observations of shape (B, N) or (B, T, N) (N sensors, any N). "
                f"Received: observations.shape={observations.shape}"
            )
        if sensor_mask is not None:
            sensor_mask = tf.convert_to_tensor(sensor_mask)
            if sensor_mask.shape.rank != observations.shape.rank or not sensor_mask.shape.is_compatible_with(
                observations.shape
            ):
                raise ValueError(
                    f"{self.name} expects a sensor_mask of the observations' shape {observations.shape}. "
                    f"Received: sensor_mask.shape={sensor_mask.shape}"
                )
            sensor_mask = tf.cast(sensor_mask, tf.bool)
        if step_type is not None:
            step_type = tf.convert_to_tensor(step_type)
            outer = observations.shape[:-1]
            if step_type.shape.rank != outer.rank or not step_type.shape.is_compatible_with(outer):
                raise ValueError(
                    f"{self.name} expects step_type of shape {outer} (the observations' outer dims). "
                    f"Received: step_type.shape={step_type.shape}"
                )
        if not network_state:
            dims = tf.shape(observations)
            network_state = self.initial_state(dims[0], dims[-1])
        return observations, step_type, dict(network_state), sensor_mask

    @staticmethod
    def _reset(state: State, step_type: tf.Tensor | None) -> State:
        """Zeros where ``step_type`` is FIRST: a new episode starts from the initial state."""
        if step_type is None:
            return state
        first = tf.equal(step_type, ts.StepType.FIRST)
        out = {}
        for name, value in state.items():
            where = tf.reshape(first, [-1] + [1] * (value.shape.rank - 1))
            out[name] = tf.where(where, tf.zeros_like(value), value)
        return out

    def _scan(
        self,
        step: Callable[[tf.Tensor, State, tf.Tensor | None], tuple[tf.Tensor, State]],
        observations: tf.Tensor,
        step_type: tf.Tensor | None,
        state: State,
        sensor_mask: tf.Tensor | None,
        output_zeros: tf.Tensor,
        previous_actions: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, State]:
        """Runs ``step`` along the time axis of ``(B, T, N)`` observations; outputs ``(B, T, ...)``.

        ``previous_actions`` ``(B, T, A)``, if given, replace the carried ``previous_action``
        at every step (before the FIRST reset, so a new episode still starts from zero).
        """
        batch, steps = tf.shape(observations)[0], tf.shape(observations)[1]
        # Without a step type no step is FIRST: the given state runs on.
        step_types = tf.fill([steps, batch], ts.StepType.MID) if step_type is None else _time_major(step_type)
        masked = sensor_mask is not None
        masks = _time_major(sensor_mask) if masked else tf.ones([steps, batch, 1], tf.bool)
        forced = previous_actions is not None
        given = _time_major(previous_actions) if forced else tf.zeros([steps, batch, 1])

        def body(carry, inputs):
            obs_t, step_t, mask_t, given_t = inputs
            state = carry[1]
            if forced:
                state = {**state, "previous_action": tf.cast(given_t, state["previous_action"].dtype)}
            return step(obs_t, self._reset(state, step_t), mask_t if masked else None)

        elems = (_time_major(observations), tf.cast(step_types, tf.int32), masks, given)
        outputs, states = tf.scan(body, elems, initializer=(output_zeros, state))
        return _time_major(outputs), tf.nest.map_structure(lambda s: s[-1], states)


@register_network
class SensorActorNetwork(_SensorNetwork, network.DistributionNetwork):
    """Permutation-invariant actor ``pi(a | o_1..t)`` on AttentionNeuron; see the module docstring.

    Args:
      input_tensor_spec: the observation spec, a vector ``(D,)``: ``D`` sensors.
      output_tensor_spec: a discrete ``BoundedTensorSpec`` (categorical
        projection; the previous action is its one-hot mode) or a continuous
        one (normal projection, tanh-squashed to the bounds; the previous
        action is the squashed mean, the mode).
      encoder_kwargs: ``SensorSetEncoder`` arguments over ``DEFAULT_ENCODER_KWARGS``.
      fc_layer_params: dense ReLU layers between the encoder and the projection.
      count_scaling: scale ``m_t`` by ``D / N`` under tanh attention (footnote 3).
      previous_action_noise: standard deviation of zero-mean Gaussian noise
        added to ``a_{t-1}`` where the network is called with ``training=True``
        (Tang & Ha, appendix A.4.2: 0.03 when cloning the Ant); 0 adds none.
        Acting (``training=False``) never adds it.
      name: network name.

    Call arguments:
      observations: ``(B, N)`` or ``(B, T, N)``, any ``N``.
      step_type: ``(B,)`` or ``(B, T)``; FIRST resets the state.
      network_state: ``{"hidden", "cell"}`` each ``(B, N, H)``, ``"previous_action"``
        ``(B, A)`` and, with ``memory_units``, ``"memory_hidden"``, ``"memory_cell"``
        ``(B, U)``; or ``()`` for the initial state.
      training: passed to the layers; ``True`` also adds ``previous_action_noise``.
      sensor_mask: bool of the observations' shape, ``True`` for present
        sensors, or ``None``. Absent sensors contribute nothing and keep their
        state. Pass it to ``call`` directly: ``__call__`` checks the inputs
        against the ``(D,)`` spec.
      previous_actions: ``(B, T, A)`` or ``None``, sequences only: the ``a_{t-1}``
        input of every step, in place of the network's own previous mode (FIRST steps
        still see zero). Training on recorded steps, these are the actions that were
        executed (``bc.previous_action = "executed"``, as the paper feeds the recorded
        action), so that the input agrees with what moved the readings. Pass it to
        ``call`` directly.

    Returns:
      ``(distribution, new_network_state)``.
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        output_tensor_spec: tensor_spec.BoundedTensorSpec,
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        count_scaling: bool = True,
        previous_action_noise: float = 0.0,
        name: str = "SensorActorNetwork",
    ):
        if not (previous_action_noise >= 0 and math.isfinite(previous_action_noise)):
            raise ValueError(
                f"previous_action_noise must be a finite number >= 0. Received: {previous_action_noise}"
            )
        observation_spec = single_spec(input_tensor_spec, "input_tensor_spec")
        action_spec = single_spec(output_tensor_spec, "output_tensor_spec")
        num_sensors = _vector_spec(observation_spec)
        discrete = tensor_spec.is_discrete(action_spec)
        if discrete and action_spec.shape.rank != 0:
            raise ValueError(f"Discrete actions must be scalars. Received: action_spec={action_spec}")
        with full_precision():  # float32 distribution parameters
            if discrete:
                projection = categorical_projection_network.CategoricalProjectionNetwork(action_spec)
            else:
                projection = normal_projection_network.NormalProjectionNetwork(action_spec)
        if discrete:
            action_dim = int(action_spec.maximum) - int(action_spec.minimum) + 1
        else:
            action_dim = max(int(action_spec.shape.num_elements()), 1)
        dtype = tf.as_dtype(tf_keras.backend.floatx())
        torso = SensorTorso(num_sensors, action_dim, encoder_kwargs, fc_layer_params, count_scaling,
                            name="torso")  # fmt: skip
        loss_scaling.attach(torso)
        state_spec = {
            **_sensor_state_spec(torso, num_sensors, dtype),
            "previous_action": tf.TensorSpec((action_dim,), dtype, name="previous_action"),
        }
        super().__init__(
            input_tensor_spec=input_tensor_spec,
            state_spec=state_spec,
            output_spec=projection.output_spec,
            name=name,
        )
        self._torso = torso
        self._state_dtype = dtype
        self._projection = projection
        self._action_spec = action_spec
        self._discrete = discrete
        self._action_dim = action_dim
        self._num_sensors = num_sensors
        self._previous_action_noise = float(previous_action_noise)

    def _noisy(self, previous_action: tf.Tensor, training: bool | None) -> tf.Tensor:
        """``a_{t-1}`` plus N(0, ``previous_action_noise``) while training (A.4.2), else unchanged."""
        if not training or not self._previous_action_noise:
            return previous_action
        noise = tf.random.normal(tf.shape(previous_action), stddev=self._previous_action_noise)
        return previous_action + tf.cast(noise, previous_action.dtype)

    def _previous_action(self, distribution) -> tf.Tensor:
        """The mode as the next ``a_{t-1}``, in the state dtype: one-hot for discrete actions; no gradient."""
        dtype = self._state_dtype
        if self._discrete:
            mode = tf.argmax(distribution.logits_parameter(), axis=-1)
            action = tf.one_hot(mode, self._action_dim, dtype=dtype)
        else:
            action = tf.reshape(tf.cast(distribution.mode(), dtype), [-1, self._action_dim])
        return tf.stop_gradient(action)

    def _step(self, observations, state, sensor_mask, training):
        previous_action = self._noisy(state["previous_action"], training)
        features, new_state = self._torso_step(observations, previous_action, state, sensor_mask, training)
        distribution, _ = self._projection(head_input(features, self._projection), 1, training=training)
        return features, distribution, {**new_state, "previous_action": self._previous_action(distribution)}

    def call(
        self, observations, step_type=None, network_state=(), training=False, sensor_mask=None,
        previous_actions=None,
    ):  # fmt: skip
        observations, step_type, state, sensor_mask = self._check_inputs(
            observations, step_type, network_state, sensor_mask
        )
        if previous_actions is not None:
            previous_actions = tf.convert_to_tensor(previous_actions)
            expected = (*observations.shape[:-1], self._action_dim)
            if observations.shape.rank != 3 or not previous_actions.shape.is_compatible_with(expected):
                raise ValueError(
                    f"{self.name} expects previous_actions of shape (B, T, A) = {expected} beside "
                    f"(B, T, N) observations. Received: previous_actions.shape={previous_actions.shape}, "
                    f"observations.shape={observations.shape}"
                )
        if observations.shape.rank == 2:
            state = self._reset(state, step_type)

            def one_step(observations, sensor_mask, previous_action, **state):
                previous_action = self._noisy(previous_action, training)
                return self._torso_step(observations, previous_action, state, sensor_mask, training)

            features, new_state = self._scaled(
                one_step, observations=observations, sensor_mask=sensor_mask, **state
            )
            distribution, _ = self._projection(head_input(features, self._projection), 1, training=training)
            return distribution, {**new_state, "previous_action": self._previous_action(distribution)}

        def step(obs, state, mask):
            features, _, new_state = self._step(obs, state, mask, training)
            return features, new_state

        def unroll(observations, step_type, sensor_mask, previous_actions, **state):
            zeros = self._no_features(observations)
            return self._scan(step, observations, step_type, state, sensor_mask, zeros, previous_actions)

        features, new_state = self._scaled(
            unroll, observations=observations, step_type=step_type, sensor_mask=sensor_mask,
            previous_actions=previous_actions, **state,
        )  # fmt: skip
        # The distribution of every step from its features, in one batch of B * T.
        distribution, _ = self._projection(head_input(features, self._projection), 2, training=training)
        return distribution, new_state


class SensorValueNetwork(_SensorNetwork, network.Network):
    """Permutation-invariant critic ``V(o_1..t)`` on AttentionNeuron (a zero previous action).

    Args:
      input_tensor_spec: the observation spec, a vector ``(D,)``.
      encoder_kwargs, fc_layer_params, count_scaling: as ``SensorActorNetwork``.
      name: network name.

    Call arguments: as ``SensorActorNetwork``; the state is ``{"hidden", "cell"}`` (and the
    code's memory, ``memory_hidden`` and ``memory_cell``, with ``memory_units``).

    Returns:
      ``(values (B,) or (B, T), new_network_state)``.
    """

    def __init__(
        self,
        input_tensor_spec: tf.TensorSpec,
        encoder_kwargs: Mapping[str, Any] | None = None,
        fc_layer_params: Sequence[int] = (),
        count_scaling: bool = True,
        name: str = "SensorValueNetwork",
    ):
        observation_spec = single_spec(input_tensor_spec, "input_tensor_spec")
        num_sensors = _vector_spec(observation_spec)
        dtype = tf.as_dtype(tf_keras.backend.floatx())
        # A value network gets observations only: its sensory neurons see a zero action of size 1.
        torso = SensorTorso(num_sensors, 1, encoder_kwargs, fc_layer_params, count_scaling, name="torso")
        loss_scaling.attach(torso)
        super().__init__(
            input_tensor_spec=input_tensor_spec,
            state_spec=_sensor_state_spec(torso, num_sensors, dtype),
            name=name,
        )
        self._torso = torso
        self._state_dtype = dtype
        with full_precision():  # float32 values
            self._value_head = tf_keras.layers.Dense(1, name="value")
        self._num_sensors = num_sensors

    def _step(self, observations, state, sensor_mask, training):
        """Features (the torso's compute dtype) and the new state of one step."""
        no_action = tf.zeros([tf.shape(observations)[0], 1], self._state_dtype)
        return self._torso_step(observations, no_action, state, sensor_mask, training)

    def call(self, observations, step_type=None, network_state=(), training=False, sensor_mask=None):
        observations, step_type, state, sensor_mask = self._check_inputs(
            observations, step_type, network_state, sensor_mask
        )
        if observations.shape.rank == 2:
            state = self._reset(state, step_type)

            def one_step(observations, sensor_mask, **state):
                return self._step(observations, state, sensor_mask, training)

            features, new_state = self._scaled(
                one_step, observations=observations, sensor_mask=sensor_mask, **state
            )
        else:

            def step(obs, state, mask):
                return self._step(obs, state, mask, training)

            def unroll(observations, step_type, sensor_mask, **state):
                zeros = self._no_features(observations)
                return self._scan(step, observations, step_type, state, sensor_mask, zeros)

            features, new_state = self._scaled(
                unroll, observations=observations, step_type=step_type, sensor_mask=sensor_mask, **state
            )
        # The value of every step from its features, (B,) or (B, T).
        values = self._value_head(head_input(features, self._value_head), training=training)
        return tf.squeeze(values, axis=-1), new_state
