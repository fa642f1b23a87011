"""sit-export's interruption: a signal sets a flag, and the export stops at its next safe point.

The SIGTERM / Ctrl-C handler used to raise ``KeyboardInterrupt`` wherever
Python was. Once that was inside TensorFlow's ``GroupLock``, while the TFLite
converter traced the policy: the lock stayed taken and the export never ended
(``tests/test_damaged_files.py``'s SIGTERM test waited for it for 35 minutes).
So the first signal only sets ``INTERRUPTED``, and the export checks it
between its steps, where stopping is safe: each rollout step, each
calibration and parity example, each conversion, and before it commits. A
second signal stops it at once (``export/cli.py``).
"""

from __future__ import annotations

import threading

INTERRUPTED = threading.Event()


def stop_if_interrupted() -> None:
    """Raises ``KeyboardInterrupt`` if a signal asked the export to stop (``INTERRUPTED``)."""
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt
