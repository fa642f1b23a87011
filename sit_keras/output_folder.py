"""Can a command write its results to a folder? Answered in one sentence before anything is computed.

A training run or an export that fails on its output folder after minutes of
work (or with an ``OSError`` traceback) is the mistake this prevents:
``check(path, name)`` refuses an empty path, a file, a path under a file, a
folder that cannot be written, and the kernel's virtual file systems
(``/proc``, ``/sys``, ``/dev``), naming the path.
"""

from __future__ import annotations

import os

VIRTUAL = ("/proc", "/sys", "/dev")


def nearest_existing(path: str) -> str:
    """``path`` or its nearest ancestor that exists (absolute)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def check(path: str, name: str) -> None:
    """Raises ``ValueError`` if a folder cannot be created or written at ``path``; creates nothing.

    Args:
      path: the folder (it may not exist yet).
      name: how the user gave it, for the message (``"--root_dir"``).
    """
    if not path or not str(path).strip():
        raise ValueError(f"{name} is empty: give the folder to write to.")
    absolute = os.path.abspath(path)
    virtual = [root for root in VIRTUAL if absolute == root or absolute.startswith(root + os.sep)]
    if virtual:
        raise ValueError(
            f"{name} {path!r} lies in {virtual[0]}, a virtual file system: give a folder on disk."
        )
    if os.path.exists(absolute) and not os.path.isdir(absolute):
        raise ValueError(f"{name} {path!r} is a file, not a folder.")
    existing = nearest_existing(absolute)
    if not os.path.isdir(existing):
        raise ValueError(f"{name} {path!r} lies under {existing!r}, which is a file, not a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"Cannot write to {existing!r} (for {name} {path!r}): permission denied.")
