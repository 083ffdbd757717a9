"""What the services' Redis and memcached clients share: pipelining connections, bounded.

Each connection pipelines: a command is written at once and its reply is the next one
the connection reads (both stores answer in order). A command goes to an idle
connection, else a new one while fewer than ``max_connections`` are open, else the one
with the fewest in flight; a cancelled caller's reply is read and dropped, so a
connection stays in step. Bounds: ``connect_timeout_s`` to connect; ``call_timeout_s``
for a reply, or the connection is closed and everything in flight on it fails (one timer
per connection). A command whose connection was lost is sent once more on a new one,
tried for up to ``reconnect_for_s``: the clients send only commands safe to repeat.
Errors: ``StoreClientError`` > ``StoreConnectionError`` (> ``StoreTimeout``) and
``StoreReplyError`` (the store answered an error). A store's client subclasses
:class:`PipelinedConnection` (reading replies) and :class:`PipelinedClient` (commands).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, ClassVar, cast

INCOMPLETE: Any = object()  # what a connection's read_reply gives until a reply is whole
RECONNECT_PAUSE_S = 0.05  # between tries to reach a store that closed a connection


class StoreClientError(Exception):
    """Any failure of a command of the services' store clients."""


class StoreConnectionError(StoreClientError):
    """The store could not be reached, or the connection was lost before the reply."""


class StoreTimeout(StoreConnectionError):
    """No connection, or no reply, within its bound."""


class StoreReplyError(StoreClientError):
    """An error the store answered (the command reached it and was refused)."""


class ConnectionLost(StoreConnectionError):
    """An open connection closed before the reply: the command is worth one more try."""


class Waiter:
    """A command (or several) in flight: its future, what its reply is, its deadline."""

    __slots__ = ("deadline", "expect", "future")

    def __init__(self, future: asyncio.Future[Any], expect: Any, deadline: float) -> None:
        self.future = future
        self.expect = expect
        self.deadline = deadline


class PipelinedConnection(asyncio.Protocol):
    """One connection: commands written in order, replies matched to them in order.

    A subclass reads replies: :meth:`feed` takes the bytes received, :meth:`read_reply`
    gives the next whole reply of a command (told what to expect), or ``INCOMPLETE``.
    """

    store: ClassVar[str]  # the store's name in messages

    def __init__(self, client: PipelinedClient) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = client
        self.pending: deque[Waiter] = deque()
        self.closed = False
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def read_reply(self, expect: Any) -> Any:
        """The next reply, for a command that expects ``expect``; ``INCOMPLETE`` if not
        all here. Raises :class:`StoreConnectionError` for bytes that are no reply."""
        raise NotImplementedError

    def has_unread(self) -> bool:
        """Bytes received that no command asked for."""
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)

    def send(self, payload: bytes, expect: Any) -> asyncio.Future[Any]:
        """Write ``payload``; the future is its reply, read as ``expect`` says."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise ConnectionLost(f"the connection to {self.store} is closed")
        future = self.loop.create_future()
        waiter = Waiter(future, expect, self.loop.time() + self.client.call_timeout_s)
        self.pending.append(waiter)
        if self._timer is None:
            self._timer = self.loop.call_at(waiter.deadline, self._check_deadline)
        self._transport.write(payload)
        return future

    def data_received(self, data: bytes) -> None:
        self.feed(data)
        pending = self.pending
        try:
            while pending:
                reply = self.read_reply(pending[0].expect)
                if reply is INCOMPLETE:
                    return
                future = pending.popleft().future
                if not future.done():
                    future.set_result(reply)
        except StoreConnectionError as exc:
            self.abort(exc)
            return
        if self.has_unread():
            self.abort(StoreConnectionError(f"{self.store} sent a reply to no command"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(ConnectionLost(f"the connection to {self.store} was lost"
                                      + (f": {exc}" if exc else "")))

    def abort(self, error: StoreClientError) -> None:
        """Close the connection and fail every command in flight on it with ``error``."""
        self._fail_all(error)
        if self._transport is not None:
            self._transport.abort()

    def _fail_all(self, error: StoreClientError) -> None:
        if not self.closed:
            self.closed = True
            self.client.forget(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self.pending:
            future = self.pending.popleft().future
            if not future.done():
                future.set_exception(error)

    def _check_deadline(self) -> None:
        """The oldest command in flight is past its deadline: the store is stuck or gone."""
        self._timer = None
        if not self.pending:
            return
        deadline = self.pending[0].deadline
        if deadline <= self.loop.time():
            self.abort(StoreTimeout(
                f"{self.store} did not answer within {self.client.call_timeout_s:g} s"))
        else:
            self._timer = self.loop.call_at(deadline, self._check_deadline)


class PipelinedClient:
    """Commands to one server over up to ``max_connections`` pipelining connections."""

    connection_class: ClassVar[type[PipelinedConnection]]

    def __init__(self, host: str, port: int, *, max_connections: int,
                 connect_timeout_s: float, call_timeout_s: float,
                 reconnect_for_s: float | None = None) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        # 0: one try (a pool's server, whose keys are misses meanwhile: memcached_pool.py).
        self.reconnect_for_s = connect_timeout_s if reconnect_for_s is None else reconnect_for_s
        self._connections: list[PipelinedConnection] = []
        self._connecting: list[asyncio.Task[PipelinedConnection]] = []

    async def send(self, payload: bytes, expect: Any) -> Any:
        """The reply to ``payload``; sent once more if its connection is lost first."""
        try:
            connection = self._ready_connection() or await self._new_connection()
            return await connection.send(payload, expect)
        except ConnectionLost:
            connection = self._ready_connection() or await self._connection_again()
            return await connection.send(payload, expect)

    async def _connection_again(self) -> PipelinedConnection:
        """A new connection after one was lost: the store may be restarting, so a refused
        connection is tried again until ``reconnect_for_s`` has passed."""
        deadline = asyncio.get_running_loop().time() + self.reconnect_for_s
        while True:
            try:
                return await self._new_connection()
            except StoreTimeout:
                raise
            except StoreConnectionError:
                if asyncio.get_running_loop().time() + RECONNECT_PAUSE_S >= deadline:
                    raise
            await asyncio.sleep(RECONNECT_PAUSE_S)

    async def handshake(self, connection: PipelinedConnection) -> None:
        """What a new connection sends before its first command (nothing by default)."""

    async def close(self) -> None:
        """Close every connection; commands in flight fail."""
        for opening in self._connecting:
            opening.cancel()
        for connection in list(self._connections):
            connection.abort(StoreConnectionError(f"the {connection.store} client was closed"))

    def forget(self, connection: PipelinedConnection) -> None:
        """``connection`` closed: no more commands go to it."""
        if connection in self._connections:
            self._connections.remove(connection)

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def _ready_connection(self) -> PipelinedConnection | None:
        """An idle connection; else, with no room for a new one, the least busy."""
        least_busy: PipelinedConnection | None = None
        for connection in self._connections:
            if not connection.pending:
                return connection
            if least_busy is None or len(connection.pending) < len(least_busy.pending):
                least_busy = connection
        if len(self._connections) + len(self._connecting) < self.max_connections:
            return None
        return least_busy

    async def _new_connection(self) -> PipelinedConnection:
        """A connection opened now, or (no room for one) the first being opened."""
        if len(self._connections) + len(self._connecting) < self.max_connections:
            opening = asyncio.ensure_future(self._open())
            self._connecting.append(opening)
            opening.add_done_callback(self._opened)
        else:
            opening = self._connecting[0]
        return await asyncio.shield(opening)

    def _opened(self, opening: asyncio.Task[PipelinedConnection]) -> None:
        self._connecting.remove(opening)
        if not opening.cancelled() and opening.exception() is None:
            connection = opening.result()
            if not connection.closed:  # (lost during its handshake)
                self._connections.append(connection)

    async def _open(self) -> PipelinedConnection:
        loop = asyncio.get_running_loop()
        store = self.connection_class.store
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: self.connection_class(self), self.host, self.port)
                await self.handshake(connection)
        except TimeoutError:
            raise StoreTimeout(f"could not connect to {store} at {self.host}:{self.port} "
                               f"within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise StoreConnectionError(
                f"could not connect to {store} at {self.host}:{self.port}: {exc}") from None
        return connection
