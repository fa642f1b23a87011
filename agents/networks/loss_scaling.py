"""Dynamic loss scaling for float16 torsos, inside any TF-Agents train step.

Under ``mixed_float16`` the torso of a network (encoder and dense layers)
computes in float16, whose smallest normal number is 6e-5: the gradients that
flow back through it underflow to zero unless the loss is scaled up first.
Keras does that with ``LossScaleOptimizer``, which scales the loss before
``tape.gradient`` and unscales the gradients inside ``apply_gradients``. That
cannot be used here: TF-Agents' agents (PPO, SAC, DQN, C51) compute
``tape.gradient(loss, variables)`` themselves, clip the gradients (by global
norm or per tensor) and only then call ``optimizer.apply_gradients``; the
optimizer never sees the loss, and the clipping would see scaled gradients.

So the scaling is done at the boundary of the float16 computation instead,
agent-agnostically: ``DynamicLossScale.call(fn, *inputs)`` runs ``fn`` (the
torso) under ``tf.custom_gradient``:

- forward: ``fn`` runs under an inner ``GradientTape``; its floating outputs
  leave the region cast to float32 (the heads read float32);
- backward: the incoming (float32) gradient of the outputs is multiplied by
  the loss scale ``S`` before it enters float16, the inner tape gives the
  gradients with respect to the region's floating inputs and every variable
  that ``fn`` read, and these are divided by ``S`` in float32 before they are
  returned. The agent's clipping and optimizer therefore see true gradients;
  the float32 heads outside the region are not scaled at all.

The scale is dynamic, as Keras' ``LossScaleOptimizer``'s: it starts at
``2**15``; a backward pass whose scaled gradients are not all finite returns
zero gradients for the region (its inputs and variables) and halves ``S``
(not below 1); after ``2000`` finite passes in a row ``S`` doubles. ``S`` and
the count are non-trainable float32 / int64 variables of a
``DynamicLossScale``, attached to the layer that it scales as its
``loss_scale`` attribute (``attach``). They are saved in the network's
checkpoints (e.g. ``.../_torso/loss_scale/scale``), so a resumed run goes on
with its scale, but are not in the network's ``variables``: the variable
lists, names and dtypes of a network are the same under every precision,
and target-network updates leave the scale alone. A checkpoint written in
``mixed_float16`` restores into a network built in another precision (its
loss scales are then unmatched entries: ``expect_partial``); one written in
another precision restores into a float16 network, whose scales then start
at ``2**15``.

Use: nothing beyond the networks. The network classes of ``sit_keras.agents``
attach a scale to each float16 region when built under ``mixed_float16``
(``mixed_precision.dtype_policy``) and run it through ``scaled_call``; an
agent's ordinary ``tape.gradient``, clipping and ``apply_gradients`` then get
unscaled gradients. Keep the optimizer plain (no ``LossScaleOptimizer``).

Limits:

- An overflowing pass gives the region's variables *zero* gradients; it does
  not skip the optimizer. SGD then leaves them unchanged, but optimizers with
  momentum (Adam) still move them by their momentum, as for any zero
  gradient. The variables outside the region (the float32 heads) get their
  true gradients in that step.
- ``S`` is updated per backward pass through a region: a torso run twice in
  one loss (DrAC's ``pi(s)`` and ``pi(f(s))``) updates it twice per train
  step, and a pass that overflows zeroes only its own contribution. A region
  behind another (SAC's encoder behind a critic's dense layers) gets zero
  incoming gradients when the one in front overflows: a finite pass for it.
- Under a ``tf.distribute`` strategy each replica keeps its own scale
  (``ON_READ`` variables, as Keras'); a replica that overflows contributes zero
  gradients to the aggregate.
- XLA (``jit_compile=True``, ``sit_keras.xla.compile_with_xla``) compiles it,
  ``tf.scan`` inside the region included: the region is ordinary TensorFlow
  ops and the scale updates are variable assignments (tested, with the
  train steps of PPO, SAC, DQN and C51).

>>> from sit_keras.mixed_precision import dtype_policy
>>> with dtype_policy("mixed_float16"):
...     dense = tf_keras.layers.Dense(2)
>>> scale = attach(dense)
>>> float(scale.scale.numpy())
32768.0
>>> dense.build((None, 3))
>>> x = tf.ones((1, 3))
>>> with tf.GradientTape() as tape:
...     y = scale.call(lambda z: dense(z), x)  # float16 inside, float32 out
...     loss = tf.reduce_sum(y) * 1e-8  # a gradient far below float16's range
>>> gradients = tape.gradient(loss, dense.trainable_variables)
>>> [g.dtype.name for g in gradients], round(float(gradients[1][0]) * 1e8, 2)  # unscaled: 0 in float16
(['float32', 'float32'], 1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

INITIAL_SCALE = 2.0**15
"""The loss scale ``S`` at the start (Keras' ``LossScaleOptimizer`` default)."""

GROWTH_INTERVAL = 2000
"""Finite backward passes in a row after which ``S`` doubles (Keras' default)."""

MULTIPLIER = 2.0
"""The factor ``S`` grows and shrinks by."""


def needs_loss_scaling(compute_dtype: tf.DType | str) -> bool:
    """Whether a region that computes in ``compute_dtype`` needs loss scaling: float16 only.

    bfloat16 has float32's exponent range (its gradients do not underflow);
    float32 and float64 need none.
    """
    return tf.as_dtype(compute_dtype) == tf.float16


def _variable(initial_value: Any, dtype: tf.DType, name: str) -> tf.Variable:
    # ON_READ + ONLY_FIRST_REPLICA, as Keras' loss scale: assignable from a replica context
    # (the backward pass of a train step under a tf.distribute strategy), one value per replica.
    return tf.Variable(
        initial_value,
        dtype=dtype,
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


class DynamicLossScale(tf.__internal__.tracking.AutoTrackable):
    """The loss scale ``S`` of one float16 region and the backward pass that applies it.

    A plain trackable (checkpointed with the object it is attached to), not a
    Keras layer or ``tf.Module``, which Keras would add to the network's
    ``variables`` (see the module docstring).

    Args:
      initial_scale: ``S`` at the start.
      growth_interval: finite backward passes in a row after which ``S`` doubles.
      name: prefix of the variable names.
    """

    def __init__(
        self,
        initial_scale: float = INITIAL_SCALE,
        growth_interval: int = GROWTH_INTERVAL,
        name: str = "loss_scale",
    ):
        if not initial_scale >= 1 or not growth_interval >= 1:
            raise ValueError(
                "initial_scale and growth_interval must be >= 1. "
                f"Received: initial_scale={initial_scale}, growth_interval={growth_interval}"
            )
        self.growth_interval = int(growth_interval)
        with tf.init_scope():  # variables are made eagerly, even when a network is built in a tf.function
            self.scale = _variable(float(initial_scale), tf.float32, f"{name}/scale")
            self.good_steps = _variable(0, tf.int64, f"{name}/good_steps")

    def update(self, finite: tf.Tensor) -> tf.Operation:
        """Keras' rule, after one backward pass whose scaled gradients were ``finite`` or not.

        Not finite: ``S / 2`` (not below 1), and the count restarts. Finite:
        the count goes up; when it reaches ``growth_interval``, ``S`` doubles
        (unless that overflows float32) and the count restarts. Returns the
        assignments (run in program order inside a ``tf.function``).
        """
        good = tf.where(finite, self.good_steps + 1, tf.zeros_like(self.good_steps))
        grow = good >= self.growth_interval
        grown = self.scale * MULTIPLIER
        grown = tf.where(tf.math.is_finite(grown), grown, self.scale)
        shrunk = tf.maximum(self.scale / MULTIPLIER, 1.0)
        new_scale = tf.where(finite, tf.where(grow, grown, self.scale), shrunk)
        new_good = tf.where(grow, tf.zeros_like(good), good)
        return tf.group(self.scale.assign(new_scale), self.good_steps.assign(new_good))

    def call(self, fn: Callable[..., Any], *inputs: tf.Tensor) -> Any:
        """``fn(*inputs)`` with its floating outputs cast to float32 and its gradients loss-scaled.

        Args:
          fn: a function of tensors that returns a nest of tensors (the
            torso; float16 inside). Python arguments (``training``, masks
            that may be None) go in through a closure.
          *inputs: tensors. Floating ones get gradients (float32 ones are the
            region's boundary: the gradient is unscaled in float32 before it
            leaves); others (uint8 images, bool masks, int step types) none.

        Returns:
          ``fn``'s outputs, floating ones as float32.
        """
        inputs = tuple(tf.convert_to_tensor(x) for x in inputs)
        structure: list[Any] = []

        @tf.custom_gradient
        def region(*args: tf.Tensor):
            # The floating inputs, each tensor once: a tensor passed twice gets its gradient once.
            differentiable = list({id(x): x for x in args if x.dtype.is_floating}.values())
            with tf.GradientTape(persistent=True) as tape:  # persistent: a gradient may be taken twice
                tape.watch(differentiable)
                outputs = fn(*args)
                flat = [_to_float32(y) for y in tf.nest.flatten(outputs)]
            structure.append(outputs)

            def grad(*output_gradients: tf.Tensor, variables: Sequence[tf.Variable] | None = None):
                variables = list(variables or ())
                return self._backward(tape, flat, output_gradients, args, differentiable, variables)

            return flat, grad

        flat_outputs = region(*inputs)
        return tf.nest.pack_sequence_as(structure[-1], list(flat_outputs))

    def _backward(
        self,
        tape: tf.GradientTape,
        outputs: list[tf.Tensor],
        output_gradients: Sequence[tf.Tensor | None],
        args: Sequence[tf.Tensor],
        differentiable: list[tf.Tensor],
        variables: list[tf.Variable],
    ) -> tuple[list[tf.Tensor | None], list[tf.Tensor | None]]:
        scale = self.scale.read_value()
        targets, scaled = [], []
        for y, dy in zip(outputs, output_gradients, strict=True):
            if y.dtype.is_floating:
                targets.append(y)
                dy = tf.zeros_like(y) if dy is None else tf.cast(dy, tf.float32)
                scaled.append(dy * scale)  # in float32, before it enters float16
        gradients = tape.gradient(
            targets,
            differentiable + variables,
            output_gradients=scaled,
            unconnected_gradients=tf.UnconnectedGradients.NONE,
        )
        gradients = [_unscale(g, scale) for g in gradients]
        finite = tf.reduce_all([_all_finite(g) for g in gradients if g is not None] or [tf.constant(True)])
        with tf.control_dependencies([self.update(finite)]):
            gradients = [None if g is None else _zero_unless(finite, g) for g in gradients]
        by_input = dict(zip((id(x) for x in differentiable), gradients[: len(differentiable)], strict=True))
        input_gradients = [by_input.pop(id(x), None) for x in args]  # pop: a repeated tensor's once
        return input_gradients, gradients[len(differentiable) :]


def _to_float32(y: tf.Tensor) -> tf.Tensor:
    return tf.cast(y, tf.float32) if y.dtype.is_floating else y


def _unscale(gradient: Any, scale: tf.Tensor) -> Any:
    """``gradient / scale`` in float32 (dense or ``IndexedSlices``), in the dtype of the gradient."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        values = tf.cast(tf.cast(gradient.values, tf.float32) / scale, gradient.values.dtype)
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return tf.cast(tf.cast(gradient, tf.float32) / scale, gradient.dtype)


def _all_finite(gradient: Any) -> tf.Tensor:
    values = gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient
    return tf.reduce_all(tf.math.is_finite(values))


def _zero_unless(finite: tf.Tensor, gradient: Any) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        values = tf.where(finite, gradient.values, tf.zeros_like(gradient.values))
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return tf.where(finite, gradient, tf.zeros_like(gradient))


def attach(layer: tf_keras.layers.Layer) -> DynamicLossScale | None:
    """Sets ``layer.loss_scale``: a ``DynamicLossScale`` when ``layer`` computes in float16, else None.

    The scale travels with the layer: a torso shared by several networks (SAC's
    encoder) is scaled by one ``S``. Call before the network is first called.
    """
    loss_scale = DynamicLossScale() if needs_loss_scaling(layer.compute_dtype) else None
    layer.loss_scale = loss_scale
    return loss_scale


def scaled_call(loss_scale: DynamicLossScale | None, fn: Callable[..., Any], *inputs: tf.Tensor) -> Any:
    """``loss_scale.call(fn, *inputs)``, or ``fn(*inputs)`` unchanged when ``loss_scale`` is None."""
    if loss_scale is None:
        return fn(*inputs)
    return loss_scale.call(fn, *inputs)
