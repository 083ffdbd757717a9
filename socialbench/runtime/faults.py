"""Faults injected on purpose, so a test can check that the suite's instruments find them.

``SOCIALBENCH_FAULT_BUSY_MS='{"home-timeline": 20}'`` makes each request a named service
serves (but ``/healthz`` and ``/stats``) first burn that many milliseconds of its own CPU
on the event loop, as a handler with heavy computation would: the service's CPU, its
exclusive time in traces and its queueing all show it. Unset, nothing is installed and a
request pays nothing.
"""

from __future__ import annotations

import time

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from socialbench.runtime.settings import Settings

OPERATIONAL_PATHS = frozenset({"/healthz", "/stats"})


def burn_cpu(seconds: float) -> None:
    """Keep this thread on the CPU for ``seconds`` of its own CPU time."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


class BusyRequests:
    """Burn ``busy_s`` of CPU before each request (not the operational routes)."""

    def __init__(self, app: ASGIApp, busy_s: float) -> None:
        self.app = app
        self.busy_s = busy_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPERATIONAL_PATHS:
            burn_cpu(self.busy_s)
        await self.app(scope, receive, send)


def fault_middleware(service: str, settings: Settings) -> list[Middleware]:
    """The middleware of the faults ``settings`` ask of ``service``: none if none."""
    busy_ms = settings.fault_busy_ms.get(service, 0.0)
    return [Middleware(BusyRequests, busy_s=busy_ms / 1000)] if busy_ms > 0 else []
