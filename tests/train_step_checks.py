"""A shared check: one XLA-compiled Adam step trains every weight of an encoder."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras


def assert_jit_train_step_updates_every_weight(encoder: tf_keras.Model, images: tf.Tensor) -> None:
    """Runs one ``jit_compile=True`` Adam step and checks each weight's gradient and update."""
    optimizer = tf_keras.optimizers.Adam(learning_rate=1e-3)
    # Slot variables are created up front: XLA cannot create variables.
    optimizer.build(encoder.trainable_variables)

    @tf.function(jit_compile=True)
    def train_step(images: tf.Tensor, targets: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(encoder(images, training=True) - targets))
        gradients = tape.gradient(loss, encoder.trainable_variables)
        optimizer.apply_gradients(zip(gradients, encoder.trainable_variables, strict=True))
        return gradients

    targets = tf.random.uniform((images.shape[0], encoder.output_dim), dtype=encoder.compute_dtype)
    before = [v.numpy() for v in encoder.trainable_variables]
    gradients = train_step(images, targets)
    assert len(gradients) == len(encoder.trainable_variables) > 0
    for variable, gradient, old in zip(encoder.trainable_variables, gradients, before, strict=True):
        assert gradient is not None, variable.name
        assert np.any(tf.convert_to_tensor(gradient).numpy() != 0), f"zero gradient for {variable.name}"
        assert np.any(variable.numpy() != old), f"{variable.name} was not updated"
