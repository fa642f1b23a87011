"""A switch of this thread that layers read while they are traced: benchmarks trace both forms of a step."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ThreadFlag:
    """Off unless this thread is inside ``on()``; nested uses restore the value before them."""

    def __init__(self) -> None:
        self._state = threading.local()

    def __bool__(self) -> bool:
        return getattr(self._state, "on", False)

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        previous = bool(self)
        self._state.on = True
        try:
            yield
        finally:
            self._state.on = previous
