"""A stateful, permutation-invariant encoder of unordered sensor readings, built on AttentionNeuron.

::

    readings (B, N, F) --+                                   (types (B, N) -> Embedding (B, N, E))
                         +-- concat --> (B, N, F + E)
    previous action (B, A), state [h, c] (B, N, H), mask (B, N)
                         |
                 AttentionNeuron (eq. 1-2: shared LSTM keys per sensor, fixed queries)
                         |
               m_t (B, M, d) --> flatten (B, M d) --> Dense --> code (B, output_dim)

Each sensor is a sensory neuron of Tang & Ha (NeurIPS 2021): the key function
``f_k`` of eq. 1 is generalised from one scalar to ``F`` features plus an
embedding of the sensor's *type*, so that different kinds of sensors can be
mixed in one unordered set and still be permuted freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras

from sit_keras.layers.attention_neuron import ATTENTIONS, AttentionNeuron, check_mask, shape_list
from sit_keras.layers.indexing import row_gather
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import SENSORS, Symmetry


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class SensorSetEncoder(tf_keras.Model):
    """Unordered sensor readings and the previous action -> a fixed-size code.

    Built on ``AttentionNeuron`` (Tang & Ha, NeurIPS 2021, eq. 1-2): every
    sensor ``i`` is a sensory neuron whose key ``f_k([x_i, e(type_i)],
    a_{t-1})`` is a shared LSTM cell with its own state; values pass the
    readings (and type embedding) through, or go through a learned ``W_v``
    with ``value_dim``; ``M`` fixed sinusoidal queries attend over the
    sensors, and a dense layer maps the flattened ``(M, d)`` code to
    ``output_dim``. ``F = 1`` without types is the paper's AttentionNeuron
    followed by a linear layer (its CartPole / Ant policy's first layers).

    Symmetry: the code is invariant under every permutation of the ``N``
    sensors (the symmetric group ``S_N``, any ``N``) applied together to the
    readings, the type ids, the mask and the per-sensor state; the new state
    is permuted the same way. No weight depends on ``N``.

    Masks and export: a ``mask`` marks padded sensors. They contribute
    exactly nothing (readings and type ids are replaced before use, so any
    value, NaN or an invalid id, is allowed; their attention weights are
    exactly 0; their state is returned unchanged), so a model exported for a
    fixed maximum number of sensors gives, with a mask, the code of the
    sensors that are present: the real sensors' state bit for bit, the code
    up to the rounding of the sum over ``N`` (see ``AttentionNeuron``).
    ``serving_function`` fixes those shapes. All ops are TFLite builtins.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32, the readings, the type embedding, the AttentionNeuron's matmuls
    and the output Dense run in the compute dtype, and the code is returned
    in it; the LSTM state ``[h, c]`` (its gates and cell update) and the
    attention's scale and ``sigma`` run in float32, and the state is
    returned in float32 (``state_dtype``; see ``AttentionNeuron``). Under
    float32 / float64 everything runs in that dtype.

    Args:
      num_features: ``F``, features per sensor reading.
      action_dim: size ``|A|`` of the previous action.
      output_dim: size of the code.
      num_sensor_types: number of sensor kinds; ``None`` for no type ids.
      type_embedding_dim: ``E``, size of the type embedding.
      num_queries: ``M`` (16 in the paper's CartPole).
      query_dim: columns of the positional query bank (8).
      hidden_size: per-sensor LSTM size (8).
      projection_dim: ``d_q`` (32).
      value_dim: ``None`` for pass-through values (``W_v = I``, ``d = F + E``),
        or the columns of a learned ``W_v``.
      attention: ``"tanh"`` (the paper's vector tasks) or ``"softmax"``.
      activation: of the output dense layer, any Keras activation; ``None``
        for linear.
      **kwargs: ``tf_keras.Model`` arguments (``name``, ``dtype``).

    Call arguments:
      inputs: readings ``(B, N, F)``.
      previous_action: ``(B, action_dim)``.
      sensor_types: ``(B, N)`` integer ids in ``[0, num_sensor_types)``;
        required exactly when ``num_sensor_types`` is set.
      state: ``[h, c]``, each ``(B, N, hidden_size)``, or ``None`` for zeros.
      mask: ``(B, N)`` bool, ``True`` for present sensors, or ``None``.
      training: passed to the sublayers.

    Returns:
      ``(code, [h', c'])`` with ``code`` of shape ``(B, output_dim)`` in the
      compute dtype and ``h', c'`` in ``state_dtype``.

    >>> import sit_keras
    >>> from sit_keras.models.sensor_encoder import SensorSetEncoder
    >>> encoder = SensorSetEncoder(num_features=3, action_dim=2, output_dim=12, num_sensor_types=4)
    >>> code, state = encoder(tf.ones((5, 7, 3)), tf.zeros((5, 2)), sensor_types=tf.zeros((5, 7), tf.int32))
    >>> code.shape, state[0].shape
    (TensorShape([5, 12]), TensorShape([5, 7, 8]))
    """

    SYMMETRY: ClassVar[Symmetry] = SENSORS
    """The same for every configuration (``AttentionNeuron``'s)."""

    def __init__(
        self,
        num_features: int,
        action_dim: int,
        output_dim: int,
        num_sensor_types: int | None = None,
        type_embedding_dim: int = 4,
        num_queries: int = 16,
        query_dim: int = 8,
        hidden_size: int = 8,
        projection_dim: int = 32,
        value_dim: int | None = None,
        attention: str = "tanh",
        activation: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        sizes = dict(num_features=num_features, output_dim=output_dim, type_embedding_dim=type_embedding_dim)
        if num_sensor_types is not None:
            sizes["num_sensor_types"] = num_sensor_types
        for key, value in sizes.items():
            if int(value) != value or value < 1:
                raise ValueError(f"{key} must be a positive integer. Received: {key}={value!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}. Received: attention={attention!r}")
        self.num_features = int(num_features)
        self.action_dim = int(action_dim)
        self.output_dim = int(output_dim)
        self.num_sensor_types = None if num_sensor_types is None else int(num_sensor_types)
        self.type_embedding_dim = int(type_embedding_dim)
        self.num_queries = int(num_queries)
        self.query_dim = int(query_dim)
        self.hidden_size = int(hidden_size)
        self.projection_dim = int(projection_dim)
        self.value_dim = None if value_dim is None else int(value_dim)
        self.attention = attention
        self.activation = activation
        self.type_embedding = None
        neuron_features = self.num_features
        if self.num_sensor_types is not None:
            self.type_embedding = tf_keras.layers.Embedding(
                self.num_sensor_types, self.type_embedding_dim, dtype=self.dtype_policy, name="type_embedding"
            )
            neuron_features += self.type_embedding_dim
        self.neuron = AttentionNeuron(
            action_dim=action_dim,
            num_queries=num_queries,
            query_dim=query_dim,
            hidden_size=hidden_size,
            projection_dim=projection_dim,
            attention=attention,
            num_features=neuron_features,
            value_dim=value_dim,
            dtype=self.dtype_policy,
            name="attention_neuron",
        )
        self.projection = tf_keras.layers.Dense(
            self.output_dim, activation=activation, dtype=self.dtype_policy, name="projection"
        )

    @property
    def state_dtype(self) -> tf.DType:
        """Dtype of the LSTM state ``[h, c]``: float32 under a mixed policy, else the compute dtype."""
        return self.neuron.state_dtype

    @property
    def code_size(self) -> int:
        """``M * d``: the size of the flattened AttentionNeuron output."""
        m, d = self.neuron.output_shape_per_example
        return m * d

    def build(self, input_shape: tf.TensorShape) -> None:
        self._check_readings_shape(tf.TensorShape(input_shape))
        if self.type_embedding is not None:
            build_sublayer(self.type_embedding, (None, None))
        build_sublayer(self.neuron, (None, None, self.neuron.num_features))
        build_sublayer(self.projection, (None, self.code_size))
        # Not Model.build: it would trace `call` on the readings alone, without the previous action.
        tf_keras.layers.Layer.build(self, input_shape)

    def _check_readings_shape(self, shape: tf.TensorShape) -> None:
        if shape.rank != 3 or shape[-1] != self.num_features or shape[1] == 0:
            raise ValueError(
                f"{self.name} expects sensor readings of shape (B, N, {self.num_features}) with N >= 1. "
                f"Received: inputs.shape={shape}"
            )

    def _with_types(self, readings: tf.Tensor, sensor_types: tf.Tensor | None, mask: tf.Tensor | None):
        if self.type_embedding is None:
            if sensor_types is not None:
                raise ValueError(
                    f"{self.name} was built without sensor types (num_sensor_types=None) but received "
                    f"sensor_types of shape {tf.convert_to_tensor(sensor_types).shape}."
                )
            return readings
        if sensor_types is None:
            raise ValueError(
                f"{self.name} expects sensor_types of shape (B, N) with num_sensor_types="
                f"{self.num_sensor_types}. Received: sensor_types=None"
            )
        sensor_types = tf.convert_to_tensor(sensor_types)
        expected = readings.shape[:2]
        if not sensor_types.dtype.is_integer or not sensor_types.shape.is_compatible_with(expected):
            b, n = (d if d is not None else name for d, name in zip(expected, "BN", strict=True))
            raise ValueError(
                f"{self.name} expects integer sensor_types of shape ({b}, {n}). "
                f"Received: sensor_types.shape={sensor_types.shape}, dtype={sensor_types.dtype.name}"
            )
        sensor_types = tf.cast(sensor_types, tf.int32)
        if mask is not None:
            # A padded slot may hold any id, even an invalid one: read type 0 instead.
            sensor_types = tf.where(mask, sensor_types, tf.zeros_like(sensor_types))
        # The embedding layer's lookup, with a dense gradient: its rows are read once per sensor.
        table = tf.cast(self.type_embedding.embeddings, self.type_embedding.compute_dtype)
        return tf.concat([readings, row_gather(table, sensor_types)], axis=-1)

    def get_initial_state(self, batch_size: int | tf.Tensor, num_sensors: int | tf.Tensor) -> list[tf.Tensor]:
        """Zero LSTM state ``[h, c]``, each ``(batch_size, num_sensors, hidden_size)``, in ``state_dtype``."""
        return self.neuron.get_initial_state(batch_size, num_sensors)

    def state_spec(self, num_sensors: int) -> list[tf.TensorSpec]:
        """Spec of one example's state ``[h, c]``, each ``(num_sensors, hidden_size)`` (no batch axis).

        The form a TF-Agents network's ``state_spec`` takes; ``num_sensors`` is
        the maximum number of sensors of a fixed-size policy.
        """
        shape = (int(num_sensors), self.hidden_size)
        return [tf.TensorSpec(shape, self.state_dtype, name=name) for name in ("hidden", "cell")]

    def call(
        self,
        inputs: tf.Tensor,
        previous_action: tf.Tensor,
        sensor_types: tf.Tensor | None = None,
        state: Sequence[tf.Tensor] | None = None,
        mask: tf.Tensor | None = None,
        training: bool | None = None,
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        self._check_readings_shape(inputs.shape)
        readings = tf.cast(inputs, self.compute_dtype)
        mask = check_mask(mask, readings.shape[:2], self.name)
        readings = self._with_types(readings, sensor_types, mask)
        code_set, new_state = self.neuron(
            readings, previous_action, state=state, mask=mask, training=training
        )
        flat = tf.reshape(code_set, [shape_list(code_set)[0], self.code_size])
        return self.projection(flat, training=training), new_state

    def compute_mask(self, inputs: tf.Tensor, mask: tf.Tensor | None = None) -> None:
        # The mask marks padded *sensors*; the fixed-size code has no padding.
        del inputs, mask
        return None

    def serving_function(
        self, max_sensors: int, batch_size: int = 1
    ) -> tf.types.experimental.GenericFunction:
        """A ``tf.function`` with fixed shapes for export, e.g. to TFLite.

        Args:
          max_sensors: the documented maximum number of sensors ``N``; fewer
            sensors are padded and masked out.
          batch_size: fixed batch size ``B``.

        Returns:
          A function of ``(readings (B, N, F), previous_action (B, A), mask
          (B, N) bool, hidden (B, N, H), cell (B, N, H)[, sensor_types (B, N)
          int32])`` returning a dict ``{"code", "hidden", "cell"}``.
        """
        b, n, dtype = int(batch_size), int(max_sensors), self.compute_dtype
        signature = [
            tf.TensorSpec((b, n, self.num_features), dtype, name="readings"),
            tf.TensorSpec((b, self.action_dim), dtype, name="previous_action"),
            tf.TensorSpec((b, n), tf.bool, name="mask"),
            tf.TensorSpec((b, n, self.hidden_size), self.state_dtype, name="hidden"),
            tf.TensorSpec((b, n, self.hidden_size), self.state_dtype, name="cell"),
        ]
        if self.num_sensor_types is not None:
            signature.append(tf.TensorSpec((b, n), tf.int32, name="sensor_types"))

        def serve(readings, previous_action, mask, hidden, cell, sensor_types=None):
            code, (new_hidden, new_cell) = self(
                readings,
                previous_action,
                sensor_types=sensor_types,
                state=[hidden, cell],
                mask=mask,
                training=False,
            )
            return {"code": code, "hidden": new_hidden, "cell": new_cell}

        return tf.function(serve, input_signature=signature, autograph=False)

    @property
    def declared_symmetry(self) -> Symmetry:
        """``S_N``: the code is invariant, the per-sensor state permutes with the sensors."""
        return self.SYMMETRY

    def get_config(self) -> dict[str, Any]:
        # tf_keras gives subclassed models an empty base config: keep the name and the dtype policy.
        return dict(
            name=self.name,
            trainable=self.trainable,
            dtype=tf_keras.mixed_precision.Policy(self.dtype_policy.name).name,
            num_features=self.num_features,
            action_dim=self.action_dim,
            output_dim=self.output_dim,
            num_sensor_types=self.num_sensor_types,
            type_embedding_dim=self.type_embedding_dim,
            num_queries=self.num_queries,
            query_dim=self.query_dim,
            hidden_size=self.hidden_size,
            projection_dim=self.projection_dim,
            value_dim=self.value_dim,
            attention=self.attention,
            activation=tf_keras.activations.serialize(tf_keras.activations.get(self.activation)),
        )

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SensorSetEncoder:
        return cls(**config)
