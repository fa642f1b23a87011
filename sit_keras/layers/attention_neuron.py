"""AttentionNeuron: the permutation-invariant sensory layer of Tang & Ha (NeurIPS 2021), eq. 1-2.

Every input ``o_t[i]`` is read by its own *sensory neuron*; all neurons share
the same key function ``f_k(o_t[i], a_{t-1})`` (an LSTM cell whose state is
kept per input) and value function ``f_v(o_t[i])``. A fixed bank of ``M``
sinusoidal queries attends over the ``N`` messages (eq. 2)::

    K = [f_k(o_t[1], a_{t-1}); ...; f_k(o_t[N], a_{t-1})]   (N, d_fk)   eq. 1
    V = [f_v(o_t[1]); ...; f_v(o_t[N])]                      (N, d_fv)   eq. 1
    m_t = sigma([Q W_q] [K W_k]^T / sqrt(d_q)) [V W_v]       (M, d_fv)   eq. 2

Reordering the inputs reorders the rows of ``K`` and ``V`` together, which
only reorders the sum over ``N`` in the product: ``m_t`` is invariant under
the symmetric group ``S_N`` for every ``N`` (appendix A.1).

The ops here are matmuls, elementwise functions, ``tf.where`` and
reductions (no einsum, no gather), so the layer converts to TFLite with
builtin ops only.

Under a mixed-precision policy the matmuls run in the compute dtype
(float16 / bfloat16) and the parts that carry or normalise values in float32
(``precision.stable_dtype``): the LSTM's gates, cell update and state, and
the attention ``sigma`` (softmax or tanh) with its scale; the attention
weights go back to the compute dtype for the sum over the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.xla_context import in_compiled_function
from sit_keras.symmetry import SENSORS, Symmetry

ATTENTIONS = ("tanh", "softmax")


# -- helpers shared with the vision variant and the sensor encoder ---------------------
def sinusoidal_queries(num_queries: int, query_dim: int) -> np.ndarray:
    """The fixed query bank ``Q`` of eq. 2: Transformer positional encodings of the rows ``0 .. M-1``.

    Section 3.3: a fixed positional encoding, rather than a learned ``Q``,
    encourages distinct codes. Even columns are ``sin(p / 10000^(2i/d))``,
    odd columns the matching ``cos``.

    Returns:
      ``(num_queries, query_dim)`` float64 array.
    """
    positions = np.arange(num_queries, dtype=np.float64)[:, None]
    columns = np.arange(query_dim)
    angles = positions / np.power(10000.0, 2.0 * (columns // 2) / query_dim)
    return np.where(columns % 2 == 0, np.sin(angles), np.cos(angles))


def shape_list(x: tf.Tensor) -> list[int | tf.Tensor]:
    """The static size of each axis where known, the dynamic one elsewhere.

    Reshapes built from it stay static when the shapes are fixed (a TFLite
    export with a maximum number of sensors) and dynamic otherwise.
    """
    static = x.shape.as_list()
    if all(d is not None for d in static):
        return static
    dynamic = tf.shape(x)
    return [d if d is not None else dynamic[i] for i, d in enumerate(static)]


def apply_kernel(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``x @ kernel`` for ``x`` of shape ``(..., K)`` as one 2-D matmul (TFLite ``FULLY_CONNECTED``)."""
    leading = shape_list(x)[:-1]
    y = tf.matmul(tf.reshape(x, [-1, kernel.shape[0]]), kernel)
    return tf.reshape(y, [*leading, kernel.shape[1]])


def masked_attention(logits: tf.Tensor, mask: tf.Tensor | None, attention: str) -> tf.Tensor:
    """``sigma`` of eq. 2 on ``(B, N, M)`` scores; masked inputs get a weight of exactly 0.

    ``"tanh"`` acts elementwise (CartPole, Ant). ``"softmax"`` normalises each
    query's scores over the *inputs*, axis 1 (Pong, CarRacing), written out so
    that padded entries drop out exactly and the same formula runs with and
    without a mask. Runs in the dtype of ``logits``: the layers pass float32
    logits under a mixed policy.

    Args:
      logits: ``(B, N, M)`` scaled scores of the ``N`` inputs for the ``M`` queries.
      mask: ``(B, N)`` bool, ``True`` for real inputs, or ``None``.
      attention: ``"tanh"`` or ``"softmax"``.
    """
    if attention == "tanh":
        weights = tf.tanh(logits)
        return weights if mask is None else weights * tf.cast(mask, logits.dtype)[..., None]
    if mask is None:
        shifted = logits - tf.stop_gradient(tf.reduce_max(logits, axis=1, keepdims=True))
    else:
        valid = mask[..., None]
        lowest = tf.constant(logits.dtype.min, logits.dtype)
        peak = tf.reduce_max(tf.where(valid, logits, lowest), axis=1, keepdims=True)
        # The lowest float goes in *before* exp: exp gives an exact 0 and its
        # gradient (0 * exp) stays finite, which a later tf.where would not ensure.
        shifted = tf.where(valid, logits - tf.stop_gradient(peak), lowest)
    exponentials = tf.exp(shifted)
    total = tf.reduce_sum(exponentials, axis=1, keepdims=True)
    # The largest valid score gives exp(0) = 1, so total >= 1 whenever an input
    # is valid; the floor only turns a row with every input masked into zeros.
    return exponentials / tf.maximum(total, tf.ones_like(total))


def check_mask(mask: tf.Tensor | None, batch_and_count: Sequence[int | None], owner: str) -> tf.Tensor | None:
    """Converts ``mask`` to bool and checks that it is ``(B, N)``."""
    if mask is None:
        return None
    mask = tf.convert_to_tensor(mask)
    if mask.dtype != tf.bool:
        mask = tf.not_equal(mask, tf.zeros_like(mask))
    if mask.shape.rank != 2 or not _compatible(mask.shape, batch_and_count):
        b, n = (d if d is not None else name for d, name in zip(batch_and_count, "BN", strict=True))
        raise ValueError(
            f"{owner} expects a mask of shape ({b}, {n}) matching the inputs. "
            f"Received: mask.shape={mask.shape}"
        )
    return mask


def _compatible(shape: tf.TensorShape, expected: Sequence[int | None]) -> bool:
    pairs = zip(shape.as_list(), expected, strict=True)
    return all(got is None or want is None or got == want for got, want in pairs)


def lstm_step(
    gate_inputs: tf.Tensor, hidden: tf.Tensor, cell: tf.Tensor, recurrent_kernel: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """One LSTM step for every (batch, input) pair, in plain matmuls and elementwise ops.

    Precision: the recurrent matmul runs in the dtype of ``gate_inputs``
    (``hidden`` is cast to it); the pre-activations are summed, and the
    gates, the cell update and the new state computed, in the dtype of
    ``cell``. Under a mixed policy that is the compute dtype for the matmuls
    and float32 for the state, which a long episode would otherwise round
    at every step.

    Args:
      gate_inputs: ``(B, N, 4 H)``, the input and action parts of the gate
        pre-activations plus the bias, in the order input, forget, cell, output.
      hidden: ``(B, N, H)`` previous ``h``.
      cell: ``(B, N, H)`` previous ``c``.
      recurrent_kernel: ``(H, 4 H)``, in the dtype of ``gate_inputs``.

    Returns:
      ``(h', c')``, each ``(B, N, H)`` in the dtype of ``cell``.
    """
    recurrent = apply_kernel(tf.cast(hidden, gate_inputs.dtype), recurrent_kernel)
    z = tf.cast(gate_inputs, cell.dtype) + tf.cast(recurrent, cell.dtype)
    i, f, g, o = lstm_gates(z)
    cell = f * cell + i * g
    return o * tf.tanh(cell), cell


def lstm_gates(pre_activations: tf.Tensor, whole_sigmoid: bool | None = None) -> list[tf.Tensor]:
    """The LSTM's four gates, each ``(..., H)``, from their pre-activations ``(..., 4 H)``.

    ``sigmoid`` of the input, forget and output quarters, ``tanh`` of the cell
    quarter, in two forms of the same function, chosen by ``whole_sigmoid``
    (default: whether XLA compiles the caller, ``in_compiled_function``). In a
    graph the pre-activations are split and each quarter activated. Under XLA
    on a CPU the gradient of that split, a concatenation, was fused with the
    gates' derivatives and computed twice, and the AttentionNeuron's train step
    took about 1.7x its graph step. With ``whole_sigmoid`` the sigmoid runs on
    all ``4 H`` columns (its cell quarter unused) and the split takes activated
    values; the XLA step is then faster than the graph step (docs/speed.md,
    "The AttentionNeuron's LSTM under XLA").
    """
    if whole_sigmoid is None:
        whole_sigmoid = in_compiled_function()
    quarters = tf.split(pre_activations, 4, axis=-1)
    if whole_sigmoid:
        i, f, _, o = tf.split(tf.sigmoid(pre_activations), 4, axis=-1)
    else:
        i, f, o = (tf.sigmoid(quarters[k]) for k in (0, 1, 3))
    return [i, f, tf.tanh(quarters[2]), o]


def unit_forget_bias(hidden_size: int):
    """An LSTM bias initializer of ``4 * hidden_size`` zeros with the forget gate's quarter at 1.

    The LSTM convention (Jozefowicz et al. 2015): a forget bias of 1 keeps memories early in training.
    """

    def initializer(shape, dtype=None, **kwargs):
        del kwargs
        bias = np.zeros(shape)
        bias[hidden_size : 2 * hidden_size] = 1.0
        return tf.constant(bias, dtype=dtype)

    return initializer


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class AttentionNeuron(tf_keras.layers.Layer):
    """The permutation-invariant AttentionNeuron layer for vector observations (eq. 1-2).

    Tang & Ha, "The Sensory Neuron as a Transformer", NeurIPS 2021, section 3
    and the CartPole / Ant set-up of section 4 and Table 1:

    - eq. 1, keys: ``f_k(o_t[i], a_{t-1})`` is one LSTM cell shared by all
      inputs, fed ``[o_t[i], a_{t-1}]``; its state ``(h, c)`` is kept *per
      input*, so it travels with its input when the inputs are reshuffled;
      ``K = h'``, ``d_fk = hidden_size``;
    - eq. 1, values: the pass-through ``f_v(o_t[i]) = o_t[i]`` with
      ``W_v = I`` (the paper's vector tasks), or a learned ``W_v`` when
      ``value_dim`` is set;
    - eq. 2: ``m_t = sigma([Q W_q][K W_k]^T / sqrt(d_q)) [V W_v]`` with ``Q``
      the fixed sinusoidal bank of ``num_queries`` rows
      (``sinusoidal_queries``), ``W_q`` and ``W_k`` learned, and ``sigma``
      ``tanh`` (the paper's vector tasks) or a softmax over the inputs.

    Symmetry: the output is invariant under every permutation of the ``N``
    inputs (the symmetric group ``S_N``, for any ``N``) applied together with
    the same permutation of the per-input state; the new state is permuted
    the same way (equivariant). No weight depends on ``N``: a layer trained on
    5 inputs runs on 10. With ``tanh`` the code is a *sum* over inputs and
    grows with ``N`` (the paper halves it for doubled inputs, footnote 3);
    the softmax is a weighted mean.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32 and the matmuls (LSTM input, action and recurrent kernels,
    ``W_q``, ``W_k``, ``W_v``, the sum over the inputs) run in the compute
    dtype. The LSTM's gate nonlinearities, cell update and state ``[h, c]``
    are float32 (``precision.stable_dtype``): the state is returned, and
    expected, in float32; so are the logits' scale and ``sigma`` (softmax or
    tanh). The code ``m_t`` is in the compute dtype. The invariance then
    holds up to rounding (``sit_keras.testing.tolerance`` of the compute
    dtype).

    Masks: a ``mask`` marks padded inputs. They contribute exactly nothing:
    their readings are replaced by 0 before use (padding may hold anything,
    NaN included), their attention weights are exactly 0 and their state is
    returned unchanged. The real inputs' new state is bit-identical to the
    unpadded one; the code equals the unpadded code up to the rounding of the
    sum over ``N``, whose association TensorFlow picks from ``N`` (the same
    rounding a reordering of the inputs gives, <= 2e-15 relative in float64).
    This lets a fixed-size export take up to a documented maximum number of
    sensors.

    Args:
      action_dim: size ``|A|`` of the previous action (a one-hot vector for
        discrete actions).
      num_queries: ``M``, the rows of ``Q`` and of the output (16 CartPole, 32 Ant).
      query_dim: columns of the positional encoding ``Q`` (8 in Table 1).
      hidden_size: LSTM size ``d_fk`` (8 in Table 1).
      projection_dim: ``d_q``, columns of ``W_q`` and ``W_k`` (32 in Table 1).
      attention: ``"tanh"`` (default, the vector tasks) or ``"softmax"``.
      num_features: ``None`` for scalar inputs ``(B, N)`` (the paper); ``F``
        for inputs with ``F`` features each, ``(B, N, F)``.
      value_dim: ``None`` for pass-through values (``W_v = I``); otherwise the
        columns of a learned ``W_v``.
      kernel_initializer: initialiser of the input, action, query and key kernels.
      recurrent_initializer: initialiser of the LSTM's recurrent kernel.
      **kwargs: ``tf_keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
      inputs: ``(B, N)`` scalar readings, or ``(B, N, F)`` with ``num_features=F``.
      previous_action: ``(B, action_dim)``, the action ``a_{t-1}``.
      state: ``[h, c]``, each ``(B, N, hidden_size)``, or ``None`` for zeros
        (the first step of an episode); cast to ``state_dtype``.
      mask: ``(B, N)`` bool, ``True`` for real inputs, or ``None``.
      training: unused (no dropout); accepted for the Keras convention.

    Returns:
      ``(m_t, [h', c'])``: ``m_t`` is ``(B, M)`` for scalar pass-through
      inputs, ``(B, M, d)`` otherwise (``d = F`` or ``value_dim``), in the
      compute dtype; ``h', c'`` in ``state_dtype`` (float32 under a mixed
      policy, else the compute dtype).

    >>> import sit_keras
    >>> from sit_keras.layers.attention_neuron import AttentionNeuron
    >>> layer = AttentionNeuron(action_dim=1)
    >>> code, state = layer(tf.ones((2, 5)), tf.zeros((2, 1)))
    >>> code.shape, state[0].shape
    (TensorShape([2, 16]), TensorShape([2, 5, 8]))
    >>> layer(tf.ones((2, 10)), tf.zeros((2, 1)))[0].shape  # any number of inputs
    TensorShape([2, 16])
    """

    SYMMETRY: ClassVar[Symmetry] = SENSORS
    """The same for every configuration: no weight depends on the number or order of the inputs."""

    def __init__(
        self,
        action_dim: int,
        num_queries: int = 16,
        query_dim: int = 8,
        hidden_size: int = 8,
        projection_dim: int = 32,
        attention: str = "tanh",
        num_features: int | None = None,
        value_dim: int | None = None,
        kernel_initializer: Any = "glorot_uniform",
        recurrent_initializer: Any = "orthogonal",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        sizes = dict(
            action_dim=action_dim,
            num_queries=num_queries,
            query_dim=query_dim,
            hidden_size=hidden_size,
            projection_dim=projection_dim,
        )
        optional = dict(num_features=num_features, value_dim=value_dim)
        for key, value in [*sizes.items(), *((k, v) for k, v in optional.items() if v is not None)]:
            if int(value) != value or value < 1:
                raise ValueError(f"{key} must be a positive integer. Received: {key}={value!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}. Received: attention={attention!r}")
        self.action_dim = int(action_dim)
        self.num_queries = int(num_queries)
        self.query_dim = int(query_dim)
        self.hidden_size = int(hidden_size)
        self.projection_dim = int(projection_dim)
        self.attention = attention
        self.num_features = None if num_features is None else int(num_features)
        self.value_dim = None if value_dim is None else int(value_dim)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = tf_keras.initializers.get(recurrent_initializer)
        self.queries = sinusoidal_queries(self.num_queries, self.query_dim)

    @property
    def features_per_input(self) -> int:
        """``F``: 1 for scalar inputs."""
        return self.num_features or 1

    @property
    def state_dtype(self) -> tf.DType:
        """Dtype of the LSTM state ``[h, c]``: float32 under a mixed policy, else the compute dtype."""
        return stable_dtype(self.compute_dtype)

    @property
    def output_shape_per_example(self) -> tuple[int, ...]:
        """``(M,)`` for scalar pass-through inputs, ``(M, d)`` otherwise."""
        if self.num_features is None and self.value_dim is None:
            return (self.num_queries,)
        return (self.num_queries, self.value_dim or self.features_per_input)

    def _kernel_initializer(self):
        # A fresh initializer per weight: tf_keras gives one reused instance's weights equal values.
        return self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())

    def build(self, input_shape: tf.TensorShape) -> None:
        self._check_inputs_shape(tf.TensorShape(input_shape))
        gates = 4 * self.hidden_size
        self.input_kernel = self.add_weight(
            "input_kernel", (self.features_per_input, gates), initializer=self._kernel_initializer()
        )
        # W_a of section 4: the action's part of the LSTM input [o_t[i], a_{t-1}],
        # computed once per example instead of once per input.
        self.action_kernel = self.add_weight(
            "action_kernel", (self.action_dim, gates), initializer=self._kernel_initializer()
        )
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel", (self.hidden_size, gates), initializer=self.recurrent_initializer
        )
        self.lstm_bias = self.add_weight(
            "lstm_bias", (gates,), initializer=unit_forget_bias(self.hidden_size)
        )
        self.query_kernel = self.add_weight(
            "query_kernel", (self.query_dim, self.projection_dim), initializer=self._kernel_initializer()
        )
        self.key_kernel = self.add_weight(
            "key_kernel", (self.hidden_size, self.projection_dim), initializer=self._kernel_initializer()
        )
        self.value_kernel = None
        if self.value_dim is not None:
            self.value_kernel = self.add_weight(
                "value_kernel",
                (self.features_per_input, self.value_dim),
                initializer=self._kernel_initializer(),
            )
        super().build(input_shape)

    # -- input checks -----------------------------------------------------------
    def _expected_inputs(self) -> str:
        return "(B, N)" if self.num_features is None else f"(B, N, {self.num_features})"

    def _check_inputs_shape(self, shape: tf.TensorShape) -> None:
        rank = 2 if self.num_features is None else 3
        wrong_features = rank == 3 and shape.rank == 3 and shape[-1] not in (None, self.num_features)
        empty = shape.rank == rank and shape[1] == 0
        if shape.rank != rank or wrong_features or empty:
            raise ValueError(
                f"{self.name} expects inputs of shape {self._expected_inputs()} with N >= 1. "
                f"Received: inputs.shape={shape}"
            )

    def _check_action(self, previous_action: tf.Tensor, batch: int | None) -> tf.Tensor:
        previous_action = tf.cast(previous_action, self.compute_dtype)
        shape = previous_action.shape
        if shape.rank != 2 or shape[-1] != self.action_dim or not _compatible(shape[:1], [batch]):
            raise ValueError(
                f"{self.name} expects previous_action of shape ({batch or 'B'}, {self.action_dim}). "
                f"Received: previous_action.shape={shape}"
            )
        return previous_action

    def _check_state(
        self, state: Sequence[tf.Tensor] | None, readings: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        if state is None:
            return tuple(self.get_initial_state(*shape_list(readings)[:2]))
        expected = [readings.shape[0], readings.shape[1], self.hidden_size]
        parts = [tf.convert_to_tensor(s) for s in state] if isinstance(state, (list, tuple)) else [state]
        if len(parts) != 2 or not all(s.shape.rank == 3 and _compatible(s.shape, expected) for s in parts):
            b, n = (d if d is not None else name for d, name in zip(expected[:2], "BN", strict=True))
            raise ValueError(
                f"{self.name} expects state [h, c], each of shape ({b}, {n}, {self.hidden_size}). "
                f"Received: state shapes={[getattr(s, 'shape', None) for s in parts]}"
            )
        return tf.cast(parts[0], self.state_dtype), tf.cast(parts[1], self.state_dtype)

    # -- eq. 1 and 2 ------------------------------------------------------------
    def get_initial_state(self, batch_size: int | tf.Tensor, num_inputs: int | tf.Tensor) -> list[tf.Tensor]:
        """Zero LSTM state ``[h, c]``, each ``(batch_size, num_inputs, hidden_size)``, in ``state_dtype``."""
        zeros = tf.zeros([batch_size, num_inputs, self.hidden_size], dtype=self.state_dtype)
        return [zeros, zeros]

    def call(
        self,
        inputs: tf.Tensor,
        previous_action: tf.Tensor,
        state: Sequence[tf.Tensor] | None = None,
        mask: tf.Tensor | None = None,
        training: bool | None = None,
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        del training  # no dropout or batch statistics
        self._check_inputs_shape(inputs.shape)
        inputs = tf.cast(inputs, self.compute_dtype)
        readings = inputs if self.num_features is not None else inputs[..., None]  # (B, N, F)
        action = self._check_action(previous_action, readings.shape[0])
        mask = check_mask(mask, readings.shape[:2], self.name)
        hidden, cell = self._check_state(state, readings)
        if mask is not None:
            # tf.where, not a product: padding may hold anything, even NaN.
            readings = tf.where(mask[..., None], readings, tf.zeros_like(readings))
        new_hidden, new_cell = self.keys(readings, action, hidden, cell)
        weights = self.attention_weights(new_hidden, mask)  # (B, N, M)
        output = self.aggregate(weights, readings)
        if mask is not None:
            # A padded input's memory is kept as it was.
            new_hidden = tf.where(mask[..., None], new_hidden, hidden)
            new_cell = tf.where(mask[..., None], new_cell, cell)
        return output, [new_hidden, new_cell]

    def keys(
        self, readings: tf.Tensor, action: tf.Tensor, hidden: tf.Tensor, cell: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """eq. 1, ``f_k``: the shared LSTM on ``[o_t[i], a_{t-1}]``; returns ``(h', c')``, ``K = h'``.

        ``readings`` and ``action`` in the compute dtype, ``hidden`` and
        ``cell`` in ``state_dtype``, which ``h'`` and ``c'`` are returned in.
        """
        per_example = tf.matmul(action, self.action_kernel) + self.lstm_bias  # (B, 4 H)
        gate_inputs = apply_kernel(readings, self.input_kernel) + per_example[:, None, :]
        return lstm_step(gate_inputs, hidden, cell, self.recurrent_kernel)

    def attention_weights(self, keys: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
        """eq. 2, ``sigma([Q W_q][K W_k]^T / sqrt(d_q))`` stored transposed: ``(B, N, M)``.

        The products run in the compute dtype; the scale and ``sigma`` in
        ``state_dtype`` (float32 under a mixed policy), which the weights are
        returned in.
        """
        queries = tf.matmul(tf.constant(self.queries, self.compute_dtype), self.query_kernel)  # (M, d_q)
        projected = apply_kernel(tf.cast(keys, self.compute_dtype), self.key_kernel)  # (B, N, d_q)
        scale = tf.constant(1.0 / math.sqrt(self.projection_dim), self.state_dtype)
        logits = tf.cast(apply_kernel(projected, tf.transpose(queries)), self.state_dtype) * scale
        return masked_attention(logits, mask, self.attention)

    def aggregate(self, weights: tf.Tensor, readings: tf.Tensor) -> tf.Tensor:
        """eq. 2, the sum over the inputs: ``(B, N, M)`` weights and ``(B, N, F)`` readings -> ``m_t``.

        Runs in the compute dtype (the weights are cast to it).
        """
        weights = tf.cast(weights, self.compute_dtype)
        if self.value_kernel is None and self.num_features is None:
            return tf.reduce_sum(weights * readings, axis=1)  # W_v = I on scalars: (B, M)
        values = readings if self.value_kernel is None else apply_kernel(readings, self.value_kernel)
        return tf.matmul(weights, values, transpose_a=True)  # (B, M, d)

    def compute_mask(self, inputs: tf.Tensor, mask: tf.Tensor | None = None) -> None:
        # The mask marks padded *inputs*; the fixed-size code has no padding.
        del inputs, mask
        return None

    @property
    def declared_symmetry(self) -> Symmetry:
        """``S_N``: the code is invariant, the per-input state permutes with the inputs (eq. 1-2)."""
        return self.SYMMETRY

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            action_dim=self.action_dim,
            num_queries=self.num_queries,
            query_dim=self.query_dim,
            hidden_size=self.hidden_size,
            projection_dim=self.projection_dim,
            attention=self.attention,
            num_features=self.num_features,
            value_dim=self.value_dim,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
            recurrent_initializer=tf_keras.initializers.serialize(self.recurrent_initializer),
        )
        return config
