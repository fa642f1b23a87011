"""The checkpoints of a training folder, shared by the trainers: ``checkpoints/`` and ``replay_buffer/``."""

from __future__ import annotations

import glob
import os

import tensorflow as tf
from tf_agents.utils import common

from sit_keras.agents.networks.policy_network import CHECKPOINT_DIR

REPLAY_BUFFER_DIR = "replay_buffer"


def restore_training(root_dir: str, env_steps: tf.Variable, unit: str, **objects) -> common.Checkpointer:
    """``<root_dir>/checkpoints`` over ``objects`` (``agent=``, ``train_step=``, ...) and the step counter.

    Restores the newest checkpoint, if any, and says so; the counter is saved
    as ``env_steps`` (``unit`` names what it counts in that message).

    Raises:
      ValueError: the folder holds checkpoints that cannot be read (a damaged
        or missing index, a truncated or missing data file), named with its
        path: a damaged run is never silently restarted from step 0.
    """
    folder = os.path.join(root_dir, CHECKPOINT_DIR)
    return _restore(folder, unit, max_to_keep=3, env_steps=env_steps, **objects)


def _restore(folder: str, unit: str, **kwargs) -> common.Checkpointer:
    """A ``common.Checkpointer`` on ``folder`` over ``kwargs``, restored; says where it resumed."""
    _check_index(folder)
    latest = tf.train.latest_checkpoint(folder)
    try:
        checkpointer = common.Checkpointer(folder, **kwargs)
        checkpointer.initialize_or_restore().expect_partial()
    except (IndexError, ValueError, tf.errors.OpError) as error:
        raise _unreadable(latest, error) from None
    if "env_steps" not in kwargs:
        return checkpointer
    steps = int(kwargs["env_steps"].numpy())
    if steps:
        print(f"Resumed from {checkpointer.manager.latest_checkpoint} at {steps} {unit}.")
    return checkpointer


def check_readable(root_dir: str) -> None:
    """Reads the newest training checkpoint whole, before a run builds anything that writes to its folder.

    The replay buffer's checkpoint (up to gigabytes) is only opened here; a
    damage that opening does not show is found when it is restored.

    Raises:
      ValueError: as ``restore_training``.
    """
    for folder, read_all in ((os.path.join(root_dir, CHECKPOINT_DIR), True),
                             (os.path.join(root_dir, REPLAY_BUFFER_DIR), False)):  # fmt: skip
        _check_index(folder)
        latest = tf.train.latest_checkpoint(folder)
        if latest is None:
            continue
        try:
            reader = tf.train.load_checkpoint(latest)
            if read_all:
                for name in reader.get_variable_to_shape_map():
                    reader.get_tensor(name)
        except (IndexError, ValueError, tf.errors.OpError) as error:
            raise _unreadable(latest, error) from None


def _unreadable(latest: str, error: Exception) -> ValueError:
    reason = getattr(error, "message", None) or str(error) or type(error).__name__
    return ValueError(
        f"The checkpoint {latest} cannot be read ({reason.strip().rstrip('.')}); it is damaged, "
        "incomplete or another run's, and nothing was changed: restore its files, or move the folder "
        "away to start again."
    )


def restore_replay_buffer(root_dir: str, replay_buffer) -> common.Checkpointer:
    """``<root_dir>/replay_buffer`` (newest only), restored if it exists: off-policy agents resume exactly.

    Raises:
      ValueError: as ``restore_training``.
    """
    folder = os.path.join(root_dir, REPLAY_BUFFER_DIR)
    return _restore(folder, "", max_to_keep=1, replay_buffer=replay_buffer)


def _check_index(folder: str) -> None:
    """Checkpoint files without a readable ``checkpoint`` index would be ignored by TensorFlow: refuse."""
    saved = glob.glob(os.path.join(glob.escape(folder), "ckpt-*.index"))
    if saved and tf.train.get_checkpoint_state(folder) is None:
        newest = max(saved, key=os.path.getmtime)[: -len(".index")]
        raise ValueError(
            f"{os.path.join(folder, 'checkpoint')} is missing or damaged although {folder} holds "
            f"checkpoints (the newest: {os.path.basename(newest)}); nothing was changed: restore the index "
            '(e.g. with the line `model_checkpoint_path: "' + os.path.basename(newest) + '"`), or move the '
            "folder away to start again."
        )
