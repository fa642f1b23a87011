"""How a training loop stops early: a loss that is not finite, a lost worker, or Ctrl-C / SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np


class TrainingDiverged(RuntimeError):
    """The loss is not finite: the run stops before it checkpoints or saves that policy."""


def check_finite_loss(learned: Mapping[str, float], env_steps: int, train_step: int) -> None:
    """Raises ``TrainingDiverged`` if ``learned`` holds a ``loss`` that is not finite."""
    loss = learned.get("loss")
    if loss is not None and not np.isfinite(loss):
        raise TrainingDiverged(
            f"the loss became {loss} at {env_steps} environment steps (train step {train_step}), so the run "
            "stopped without checkpointing or saving that policy; the folder keeps what came before. Lower "
            "the learning rate or check the rewards and observations."
        )


class WorkerLost(RuntimeError):
    """Another worker of a cluster stopped answering: this one stops, with one sentence that says so."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the loop after an iteration, with a checkpoint; the message says where."""


class StopRequests:
    """SIGINT and SIGTERM ask the loop to stop after the iteration it is in; a second one stops at once.

    Python delivers signals to the main thread only: elsewhere (a training
    loop in a worker thread) the handlers stay as they are.
    """

    def __enter__(self) -> StopRequests:
        self.requested = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._request)
        return self

    def _request(self, number: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exception: Any) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
