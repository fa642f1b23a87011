"""The checkpoints of a training folder, shared by the trainers: ``checkpoints/`` and ``replay_buffer/``."""

from __future__ import annotations

import glob
import os

import tensorflow as tf
from tf_agents.utils import common

from sit_keras.agents.networks.policy_network import CHECKPOINT_DIR

REPLAY_BUFFER_DIR = "replay_buffer"
KEPT = {CHECKPOINT_DIR: 3, REPLAY_BUFFER_DIR: 1}
"""How many checkpoints each folder keeps (the newest): a damaged newest one falls back to an older."""
DAMAGED_DIR = "damaged"


def has_checkpoint(root_dir: str) -> bool:
    """Whether ``<root_dir>/checkpoints`` names a training checkpoint: a run there resumes from it."""
    return tf.train.latest_checkpoint(os.path.join(root_dir, CHECKPOINT_DIR)) is not None


def restore_training(root_dir: str, env_steps: tf.Variable, unit: str, **objects) -> common.Checkpointer:
    """``<root_dir>/checkpoints`` over ``objects`` (``agent=``, ``train_step=``, ...) and the step counter.

    Restores the newest checkpoint, if any, and says so; the counter is saved
    as ``env_steps`` (``unit`` names what it counts in that message).
    ``check_readable`` first makes the newest intact checkpoint the newest.

    Raises:
      ValueError: the checkpoint cannot be restored (e.g. another run's), named with its path.
    """
    folder = os.path.join(root_dir, CHECKPOINT_DIR)
    return _restore(folder, unit, max_to_keep=KEPT[CHECKPOINT_DIR], env_steps=env_steps, **objects)


def _restore(folder: str, unit: str, **kwargs) -> common.Checkpointer:
    """A ``common.Checkpointer`` on ``folder`` over ``kwargs``, restored; says where it resumed."""
    latest = tf.train.latest_checkpoint(folder)
    try:
        checkpointer = common.Checkpointer(folder, **kwargs)
        checkpointer.initialize_or_restore().expect_partial()
    except (IndexError, ValueError, tf.errors.OpError) as error:
        # No newest checkpoint named: the index points at a missing file (e.g. rewritten by a run still
        # writing in this folder); name the folder rather than "None".
        raise _unreadable(latest or f"index of {folder}", error, older_tried=False) from None
    if "env_steps" not in kwargs:
        return checkpointer
    steps = int(kwargs["env_steps"].numpy())
    if steps:
        print(f"Resumed from {checkpointer.manager.latest_checkpoint} at {steps} {unit}.")
    return checkpointer


def check_readable(root_dir: str) -> None:
    """Before a run builds anything: the newest intact checkpoint becomes the one to resume from.

    Every training checkpoint the folder holds (listed by its ``checkpoint``
    index or found as ``ckpt-*.index`` files) is read whole, newest first.
    Damaged ones newer than the newest intact one (truncated or missing data,
    a missing index file), and a damaged ``checkpoint`` index, are moved to
    ``checkpoints/damaged/`` and named in a message; the index then lists the
    intact ones. The replay buffer's checkpoint (up to gigabytes; one kept)
    is only opened, and a damage that opening does not show is found when it
    is restored.

    Raises:
      ValueError: a folder holds checkpoints and none of them can be read (or
        its only replay buffer checkpoint cannot), named with its path;
        nothing is changed then. A damaged run is never restarted from step 0.
    """
    for folder, read_all in ((os.path.join(root_dir, CHECKPOINT_DIR), True),
                             (os.path.join(root_dir, REPLAY_BUFFER_DIR), False)):  # fmt: skip
        saved, state = _saved(folder)
        if not saved:
            continue
        damaged = []
        for prefix in saved:
            error = _read_error(prefix, read_all)
            if error is None:
                break
            damaged.append((prefix, error))
        else:
            raise _unreadable(*damaged[0], older_tried=len(damaged) > 1)
        intact = saved[len(damaged) :]
        if damaged or state is None or os.path.abspath(state.model_checkpoint_path) != intact[0]:
            _set_aside(folder, damaged, state is None, intact)


def _saved(folder: str) -> tuple[list[str], tf.train.CheckpointState | None]:
    """``folder``'s checkpoint prefixes (in its index or with an index file), newest first; and its index."""
    files = glob.glob(os.path.join(glob.escape(folder), "ckpt-*.index"))
    prefixes = {os.path.abspath(path[: -len(".index")]) for path in files}
    state = tf.train.get_checkpoint_state(folder)  # None for a missing or garbled index
    if state is not None:
        # get_checkpoint_state has already joined the index's relative names to ``folder``.
        listed = [*state.all_model_checkpoint_paths, state.model_checkpoint_path]
        prefixes.update(os.path.abspath(p) for p in listed)
    newest_first = sorted(prefixes, key=lambda p: int(p.rsplit("-", 1)[1]), reverse=True)
    return newest_first, state


def _read_error(prefix: str, read_all: bool) -> Exception | None:
    """Why the checkpoint ``prefix`` cannot be read, or ``None``; ``read_all`` reads every tensor."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        if read_all:
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
    except (IndexError, ValueError, tf.errors.OpError) as error:
        return error
    return None


def _set_aside(
    folder: str, damaged: list[tuple[str, Exception]], index_damaged: bool, intact: list[str]
) -> None:
    """Moves the damaged checkpoints (and a damaged index) to ``damaged/``; the index lists ``intact``."""
    aside = os.path.join(folder, DAMAGED_DIR)
    os.makedirs(aside, exist_ok=True)
    index = os.path.join(folder, "checkpoint")
    for prefix, error in damaged:
        files = glob.glob(glob.escape(prefix) + ".*")
        for path in files:
            os.replace(path, os.path.join(aside, os.path.basename(path)))
        where = f"moved to {aside}" if files else "it has no files left, so only the index forgets it"
        print(f"The checkpoint {prefix} cannot be read ({_reason(error)}): {where}.")
    if index_damaged and os.path.exists(index):
        os.replace(index, os.path.join(aside, "checkpoint"))
        print(f"The checkpoint index {index} cannot be read: moved to {aside}.")
    # Relative names, as tf.train.CheckpointManager writes them. The folder is made absolute: given a
    # relative one, TensorFlow would rewrite the names relative to the working directory.
    names = [os.path.basename(p) for p in intact]
    tf.compat.v1.train.update_checkpoint_state(
        os.path.abspath(folder), names[0], all_model_checkpoint_paths=names[::-1]
    )
    print(f"Resuming from {intact[0]}, the newest checkpoint that can be read.")


def _reason(error: Exception) -> str:
    reason = getattr(error, "message", None) or str(error) or type(error).__name__
    return reason.strip().splitlines()[0].rstrip(".")


def _unreadable(latest: str, error: Exception, older_tried: bool) -> ValueError:
    older = ", nor can the older ones" if older_tried else ""
    return ValueError(
        f"The checkpoint {latest} cannot be read ({_reason(error)}){older}; it is damaged, incomplete or "
        "another run's, and nothing was changed: restore its files, or move the folder away to start again."
    )


def restore_replay_buffer(root_dir: str, replay_buffer) -> common.Checkpointer:
    """``<root_dir>/replay_buffer`` (newest only), restored if it exists: off-policy agents resume exactly.

    Raises:
      ValueError: as ``restore_training``.
    """
    folder = os.path.join(root_dir, REPLAY_BUFFER_DIR)
    return _restore(folder, "", max_to_keep=KEPT[REPLAY_BUFFER_DIR], replay_buffer=replay_buffer)
