"""``sit-train``'s ``auto`` settings: the run's model timed both ways on this host, the faster kept.

- ``precision="auto"``: float32 or mixed_bfloat16. bfloat16 pays on hosts with
  bfloat16 instructions (AMX, AVX512_BF16) and is emulated, so possibly slower
  than float32, on hosts without them (docs/speed.md).
- ``jit_compile="auto"``: XLA or TensorFlow's graph executor. On a CPU XLA
  compiles convolutions and small batched matmuls badly (docs/speed.md, "XLA"),
  so it slows most of these models; the ViT's step at batch 96 it speeds up.

Each times one train step of the run's torso with a value head (forward,
backward and Adam, on random observations of the environment's spec, at the
algorithm's ``minibatch_size``) under each candidate, and returns
``sit_keras.measured_choice``'s choice: cached per host and model, so only the
first run of a model on a host pays for it (a few seconds for small models, up
to a minute for a SiT at a large batch, most of it XLA's compilation).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf
import tf_keras
from tf_agents.specs import tensor_spec

from sit_keras import measured_choice, mixed_precision, xla
from sit_keras.agents.networks import encoders
from sit_keras.agents.training.run_settings import RunSettings


def _value_train_step(
    precision: str, jit_compile: bool, observation_spec: Any, encoder: str, encoder_kwargs: Any, batch: int
):
    """One compiled train step of the torso and a value head under ``precision``, with XLA or not."""
    with mixed_precision.dtype_policy(precision):
        network = encoders.value_network(observation_spec, encoder, encoder_kwargs)
    observations = tensor_spec.sample_spec_nest(observation_spec, tf.random.Generator.from_seed(0), (batch,))
    state = network.get_initial_state(batch)
    network.create_variables()
    optimizer = tf_keras.optimizers.Adam(1e-4)

    # Plain Python control flow: autograph warns on TF-Agents' code.
    @tf.function(autograph=False, jit_compile=jit_compile)
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            values, _ = network(observations, network_state=state, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(values, tf.float32)))
        variables = network.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return step


def _model(run_settings: RunSettings, observation_spec: Any, minibatch_size: int) -> dict[str, Any]:
    """What the cache knows the run's model by (with the host)."""
    return {
        "encoder": run_settings.encoder,
        "encoder_kwargs": dict(run_settings.encoder_kwargs or {}),
        "observation_spec": tf.nest.map_structure(
            lambda spec: [list(spec.shape), spec.dtype.name], observation_spec
        ),
        "minibatch_size": minibatch_size,
    }


def choose_precision(
    run_settings: RunSettings, observation_spec: Any, minibatch_size: int
) -> measured_choice.Choice:
    """float32 or mixed_bfloat16, whichever trains this run's model faster here (measured or cached)."""
    candidates = {
        precision: functools.partial(
            _value_train_step,
            precision,
            False,
            observation_spec,
            run_settings.encoder,
            run_settings.encoder_kwargs,
            minibatch_size,
        )
        for precision in mixed_precision.AUTO_CANDIDATES
    }
    model = _model(run_settings, observation_spec, minibatch_size)
    return measured_choice.fastest("precision", model, candidates, default="float32")


def choose_jit_compile(
    run_settings: RunSettings, precision: str, observation_spec: Any, minibatch_size: int
) -> measured_choice.Choice:
    """``"on"`` (XLA) or ``"off"``, whichever trains this run's model in ``precision`` faster here."""
    model = {**_model(run_settings, observation_spec, minibatch_size), "precision": precision}

    def build(jit_compile: bool) -> measured_choice.Step:
        return _value_train_step(
            precision,
            jit_compile,
            observation_spec,
            run_settings.encoder,
            run_settings.encoder_kwargs,
            minibatch_size,
        )

    return xla.choose_jit_compile(model, build)
