"""The checkpoints of a training folder, shared by the trainers: ``checkpoints/`` and ``replay_buffer/``."""

from __future__ import annotations

import os

import tensorflow as tf
from tf_agents.utils import common

from sit_keras.agents.networks.policy_network import CHECKPOINT_DIR

REPLAY_BUFFER_DIR = "replay_buffer"


def restore_training(root_dir: str, env_steps: tf.Variable, unit: str, **objects) -> common.Checkpointer:
    """``<root_dir>/checkpoints`` over ``objects`` (``agent=``, ``train_step=``, ...) and the step counter.

    Restores the newest checkpoint, if any, and says so; the counter is saved
    as ``env_steps`` (``unit`` names what it counts in that message).
    """
    checkpointer = common.Checkpointer(
        os.path.join(root_dir, CHECKPOINT_DIR), max_to_keep=3, env_steps=env_steps, **objects
    )
    checkpointer.initialize_or_restore().expect_partial()
    steps = int(env_steps.numpy())
    if steps:
        print(f"Resumed from {checkpointer.manager.latest_checkpoint} at {steps} {unit}.")
    return checkpointer


def restore_replay_buffer(root_dir: str, replay_buffer) -> common.Checkpointer:
    """``<root_dir>/replay_buffer`` (newest only), restored if it exists: off-policy agents resume exactly."""
    checkpointer = common.Checkpointer(
        os.path.join(root_dir, REPLAY_BUFFER_DIR), max_to_keep=1, replay_buffer=replay_buffer
    )
    checkpointer.initialize_or_restore().expect_partial()
    return checkpointer
