"""SIGTERM as Ctrl-C for the long commands: what they measured is kept either way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

Handler = Callable[[int, FrameType | None], None]


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt here, and reach the children's Python.

    ``kill``, ``timeout`` and a CI job's end send SIGTERM, which would otherwise end the
    process where it stands: no bundle, and driver processes left to themselves. A
    shell's background job starts with SIGINT ignored, and an ignored signal stays
    ignored across exec: with a handler installed, the children start with the default.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    with _handling(interrupt):
        yield


@contextmanager
def signals_as_stop(stop: threading.Event) -> Iterator[None]:
    """The first SIGTERM or SIGINT sets ``stop`` (the run ends early and keeps what it
    measured); a second raises KeyboardInterrupt (it ends where it stands)."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    with _handling(request_stop):
        yield


@contextmanager
def _handling(handler: Handler) -> Iterator[None]:
    """``handler`` for SIGTERM and SIGINT inside the block; the previous ones after it."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
