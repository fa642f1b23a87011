"""One writer per folder: an exclusive lock that a training run or an export holds while it writes.

Two ``sit-train`` processes on one ``--root_dir`` would wipe each other's
results and interleave their event files; two ``sit-export`` runs into one
``--output_dir`` would race for the same version number. ``exclusive(folder,
command)`` takes an ``fcntl`` lock on ``<folder>/.lock`` without waiting and
writes who holds it (command, pid, host, start time) into that file:

- a second writer is refused with ``FolderInUse``, one sentence naming the
  holder;
- the kernel releases the lock when its process ends, however it ends; a
  holder that was killed leaves its record behind, and the next writer takes
  the folder over and says whose lock it was (``took_over``). A clean exit
  clears the record.

The lock is advisory and local: it holds between processes on one machine
(and on file systems whose ``flock`` reaches other machines).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

LOCK_FILE = ".lock"


class FolderInUse(ValueError):
    """Another process holds the folder's lock."""


def _record(command: str) -> dict[str, Any]:
    return {
        "command": command,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _read(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return {"command": "an unknown process"}
    return record if isinstance(record, dict) else {"command": "an unknown process"}


def describe(record: dict[str, Any] | None) -> str:
    """``"sit-train (pid 12, host h, since 2026-01-01T00:00:00+00:00)"``, or what of it the record has."""
    if not record:
        return "another process"
    details = [f"{key} {record[key]}" for key in ("pid", "host") if key in record]
    if "started" in record:
        details.append(f"since {record['started']}")
    return f"{record.get('command', 'another process')}" + (f" ({', '.join(details)})" if details else "")


@contextlib.contextmanager
def exclusive(folder: str, command: str, took_over: Callable[[str], None] | None = None) -> Iterator[None]:
    """Holds ``folder``'s lock for the ``with`` block; ``folder`` must exist.

    Args:
      folder: the run or export folder.
      command: who writes, for the messages (e.g. ``"sit-train"``).
      took_over: called with one sentence when a killed holder's record is
        found (default: nothing is said).

    Raises:
      FolderInUse: another process holds the lock.
      OSError: the lock file cannot be created (e.g. a read-only folder).
    """
    path = os.path.join(folder, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise FolderInUse(
                f"{folder} is in use by {describe(_read(fd))}: wait until it ends, or use another folder."
            ) from None
        left = _read(fd)
        if left and took_over is not None:
            took_over(f"took over {folder}, whose last writer, {describe(left)}, ended without releasing it.")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(_record(command)).encode("utf-8"))
        os.fsync(fd)
        try:
            yield
        finally:
            # A clean end clears the record, so the next writer has nothing to take over.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock
