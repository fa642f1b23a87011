"""``precision="auto"`` for ``sit-train``: the run's model timed in float32 and mixed_bfloat16 on this host.

bfloat16 pays on hosts with bfloat16 instructions (AMX, AVX512_BF16) and is
emulated, so possibly slower than float32, on hosts without them
(docs/speed.md). ``choose`` times one train step of the run's torso with a
value head (forward, backward and Adam, on random observations of the
environment's spec, at the algorithm's ``minibatch_size``) under each
policy, and returns ``sit_keras.measured_choice``'s choice: cached per host
and model, so only the first run of a model on a host pays for it (a few
seconds for small models, up to a minute for a SiT at a large batch).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf
import tf_keras
from tf_agents.specs import tensor_spec

from sit_keras import measured_choice, mixed_precision
from sit_keras.agents.networks import encoders
from sit_keras.agents.training.run_settings import RunSettings

QUESTION = "precision"


def _value_train_step(precision: str, observation_spec: Any, encoder: str, encoder_kwargs: Any, batch: int):
    """One compiled (graph) train step of the torso and a value head under ``precision``."""
    with mixed_precision.dtype_policy(precision):
        network = encoders.value_network(observation_spec, encoder, encoder_kwargs)
    observations = tensor_spec.sample_spec_nest(observation_spec, tf.random.Generator.from_seed(0), (batch,))
    state = network.get_initial_state(batch)
    network.create_variables()
    optimizer = tf_keras.optimizers.Adam(1e-4)

    @tf.function(autograph=False)  # plain Python control flow; autograph warns on TF-Agents' code
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            values, _ = network(observations, network_state=state, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(values, tf.float32)))
        variables = network.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return step


def choose(run_settings: RunSettings, observation_spec: Any, minibatch_size: int) -> measured_choice.Choice:
    """float32 or mixed_bfloat16, whichever trains this run's model faster here (measured or cached)."""
    model = {
        "encoder": run_settings.encoder,
        "encoder_kwargs": dict(run_settings.encoder_kwargs or {}),
        "observation_spec": repr(observation_spec),
        "minibatch_size": minibatch_size,
    }
    candidates = {
        precision: functools.partial(
            _value_train_step,
            precision,
            observation_spec,
            run_settings.encoder,
            run_settings.encoder_kwargs,
            minibatch_size,
        )
        for precision in mixed_precision.AUTO_CANDIDATES
    }
    return measured_choice.fastest(QUESTION, model, candidates, default="float32")
