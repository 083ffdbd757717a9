"""A minimal HTTP/1.1 keep-alive client connection: pre-built request bytes out, httptools in.

One request at a time per connection (no pipelining, as wrk). The connection knows
nothing of schedules or outcomes: it tells its pool about responses, failures and loss.
"""

from __future__ import annotations

import asyncio
import socket
from enum import IntEnum
from typing import TYPE_CHECKING

import httptools

from socialbench.workloads.definitions.core import Request
from socialbench.workloads.driver.config import Target

if TYPE_CHECKING:
    from socialbench.workloads.driver.pool import Pool


class RequestEncoder:
    """Turns a :class:`Request` into the bytes wrk2's ``wrk.format`` sends.

    ``METHOD <target> HTTP/1.1``, the request's headers in order, ``Host`` (unless given),
    ``Content-Length`` when there is a body, a blank line, the body. The target is
    absolute-form (``http://host:port/path``, as the DeathStarBench Lua scripts write it)
    or origin-form (``/path``).
    """

    def __init__(self, target: Target, absolute_form: bool = True) -> None:
        self.prefix = f"http://{target.authority}" if absolute_form else ""
        self.host = target.authority

    def __call__(self, request: Request) -> bytes:
        lines = [f"{request.method} {self.prefix}{request.path} HTTP/1.1"]
        names = set()
        for name, value in request.headers:
            lines.append(f"{name}: {value}")
            names.add(name.lower())
        if "host" not in names:
            lines.append(f"Host: {self.host}")
        if request.body is not None and "content-length" not in names:
            lines.append(f"Content-Length: {len(request.body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        return head + request.body if request.body else head


class State(IntEnum):
    DOWN = 0
    CONNECTING = 1
    IDLE = 2
    BUSY = 3
    CLOSING = 4


class Connection(asyncio.Protocol):
    """One keep-alive connection slot of a :class:`Pool`; reconnects reuse the slot."""

    __slots__ = (
        "connect_task",
        "intended_ns",
        "measured",
        "parser",
        "pool",
        "sent_ns",
        "served",
        "started_ns",
        "state",
        "transport",
    )

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.state = State.DOWN
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.connect_task: asyncio.Task[object] | None = None
        self.started_ns = 0  # when the current connect attempt began
        self.intended_ns = 0
        self.sent_ns = 0
        self.measured = False
        self.served = 0  # responses on the current connection

    def close(self) -> None:
        """Close after what is written; :meth:`connection_lost` follows."""
        self.state = State.CLOSING
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now, discarding what is unsent; :meth:`connection_lost` follows."""
        self.state = State.CLOSING
        if self.transport is not None:
            self.transport.abort()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = httptools.HttpResponseParser(self)
        self.served = 0
        self.pool.on_connected(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)  # type: ignore[union-attr]
        except httptools.HttpParserError:
            self.pool.on_broken(self)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.pool.on_lost(self)

    # httptools callbacks

    def on_message_complete(self) -> None:
        parser = self.parser
        self.pool.on_response(self, parser.get_status_code(), parser.should_keep_alive())  # type: ignore[union-attr]
