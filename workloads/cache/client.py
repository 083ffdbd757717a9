"""One connection of the cache generator: pre-built requests out, replies parsed as they come.

Up to ``pipeline`` requests are in flight on a connection; each is remembered by the
time it counts from (its send time in closed loop, its intended time in open loop), in
order, since replies come back in order. A read may hold any number of replies, or part
of one: the parser takes what is complete and the rest waits for the next read.
Every complete reply is recorded as ``(now - time) << 2 | code`` (one append).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import TYPE_CHECKING

from socialbench.workloads.cache.protocol import CODE_BITS, OpStream, ProtocolError

if TYPE_CHECKING:
    from socialbench.workloads.cache.worker import Phase

clock = time.perf_counter_ns
Parser = Callable[[bytes, int, bytearray], int]


class CacheConnection(asyncio.Protocol):
    """A connection slot; the current :class:`Phase` decides what to send after replies."""

    def __init__(self, index: int, parse: Parser) -> None:
        self.index = index
        self.parse = parse
        self.transport: asyncio.Transport | None = None
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.times: deque[int] = deque()
        self.pending = b""
        self.codes = bytearray()
        self.phase: Phase | None = None
        self.record: Callable[[int], object] = _discard
        self.window_start = 0
        self.remaining = 0  # requests still to send (request-count runs)
        self.done = False
        self.lost = False
        self._data = memoryview(b"")
        self._offsets: list[int] = [0]
        self._length = 0
        self.cursor = 0

    def use(self, phase: Phase, stream: OpStream, cursor: int) -> None:
        """Send from ``stream`` (starting at request ``cursor``) for ``phase`` from now on."""
        self.phase = phase
        self._data = memoryview(stream.data)
        self._offsets = stream.offsets
        self._length = stream.length
        self.cursor = cursor % stream.length
        self.record = phase.record
        self.window_start = phase.window_start_ns
        self.done = False

    def send(self, count: int, at_ns: int) -> None:
        """Write the next ``count`` requests of the stream; they count from ``at_ns``."""
        self.times.extend(repeat(at_ns, count))
        self._write(count)

    def send_at(self, times: Iterable[int], count: int) -> None:
        """Write the next ``count`` requests, each counting from its own (intended) time."""
        self.times.extend(times)
        self._write(count)

    def _write(self, count: int) -> None:
        transport = self.transport
        if transport is None:
            return
        start = self.cursor
        stop = start + count
        offsets, data, length = self._offsets, self._data, self._length
        if stop <= length:
            transport.write(data[offsets[start]:offsets[stop]])
            self.cursor = 0 if stop == length else stop
            return
        transport.write(data[offsets[start]:])
        stop -= length
        while stop > length:  # more than a whole stream at once (tiny streams only)
            transport.write(data)
            stop -= length
        transport.write(data[:offsets[stop]])
        self.cursor = 0 if stop == length else stop

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.connected.done():
            self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.pending:
            data = self.pending + data
        codes = self.codes
        try:
            pos = self.parse(data, 0, codes)
        except (ProtocolError, ValueError, IndexError) as exc:
            if self.phase is not None:
                self.phase.on_broken(self, str(exc))
            if self.transport is not None:
                self.transport.abort()
            return
        self.pending = data[pos:] if pos < len(data) else b""
        count = len(codes)
        if not count:
            return
        now = clock()
        popleft = self.times.popleft
        record = self.record
        window_start = self.window_start
        for code in codes:
            sent = popleft()
            if sent >= window_start:
                record(((now - sent) << CODE_BITS) | code)
        codes.clear()
        if self.phase is not None:
            self.phase.on_replies(self, count, now)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.lost = True
        if not self.connected.done():
            self.connected.set_exception(exc or ConnectionError("closed while connecting"))
        if self.phase is not None:
            self.phase.on_lost(self)


def _discard(_: int) -> None:
    return None
