"""The services' Redis client: RESP over asyncio protocols, replies parsed by hiredis.

Why our own: a service's Redis commands are on its hot path, and redis-py's cost was
measured (``socialbench bench redis-client``: a timeline read, ``ZREVRANGE`` of 10
members, under uvloop, CPU of the client process). redis-py 8.1 with the blocking pool
the services need: 153 µs per command from 1 caller, 143 from 8 (its plain pool, 77 µs,
fails a burst beyond the pool instead of waiting; coredis 6.9: 177). This client: 42 and
18 µs. redis-py was 22% of home-timeline's CPU on timeline reads (py-spy).

Each connection pipelines: a command is written at once, and its reply is the next one
the connection reads (Redis answers in order). A command goes to an idle connection,
else to a new one while fewer than ``max_connections`` are open, else to the open one
with the fewest commands in flight. So a burst never waits for a free connection, and a
caller that goes away (its task cancelled) leaves a connection that stays in step: its
reply is read and dropped.

Bounds: connecting takes at most ``connect_timeout_s``; a command is answered within
``call_timeout_s`` of being sent, or its connection is closed and every command in flight
on it fails (one timer per connection checks the oldest, not one per command). A command
whose connection was lost before its reply (Redis restarted) is sent once more on a new
connection: every command the services send is safe to repeat (reads, ``ZADD`` of a
score, ``ZREM``, ``SET NX``, the fan-out script of ``ZADD`` or ``ZREM``).

Errors::

    RedisError
    ├── RedisConnectionError  could not connect, or the connection was lost
    │   └── RedisTimeout      no connection or no reply within its bound
    └── RedisReplyError       Redis answered an error (``WRONGTYPE``, ``NOSCRIPT``, ...)
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, cast
from urllib.parse import unquote, urlsplit

import hiredis

Arg = bytes | str | int | float
Command = Sequence[Arg]


class RedisError(Exception):
    """Any failure of a Redis command."""


class RedisConnectionError(RedisError):
    """Redis could not be reached, or the connection was lost before the reply."""


class RedisTimeout(RedisConnectionError):
    """No connection, or no reply, within its bound."""


class RedisReplyError(RedisError):
    """An error Redis answered (the command reached Redis and was refused)."""


class _ConnectionLost(RedisConnectionError):
    """An open connection closed before the reply: the command is worth one more try."""


def encode_command(args: Command) -> bytes:
    """``args`` as one RESP array of bulk strings (floats as Redis reads them: ``-inf``)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, bool) or not isinstance(arg, (bytes, int, float)):
            raise TypeError(f"a Redis argument must be bytes, str, int or float, not {arg!r}")
        elif isinstance(arg, int):
            arg = b"%d" % arg
        elif isinstance(arg, float):
            arg = repr(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class _Waiter:
    """A command (or pipeline) in flight: its future, how many replies it takes, its deadline."""

    __slots__ = ("count", "deadline", "future", "replies")

    def __init__(self, future: asyncio.Future[Any], count: int, deadline: float) -> None:
        self.future = future
        self.count = count
        self.replies: list[Any] = []
        self.deadline = deadline


class _Connection(asyncio.Protocol):
    """One connection to Redis: commands written in order, replies matched in order."""

    def __init__(self, call_timeout_s: float,
                 on_closed: Callable[[_Connection], None]) -> None:
        self.loop = asyncio.get_running_loop()
        self.call_timeout_s = call_timeout_s
        self.on_closed = on_closed
        self.pending: deque[_Waiter] = deque()
        self.closed = False
        self._reader = hiredis.Reader(replyError=RedisReplyError)
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)

    def send(self, payload: bytes, count: int) -> asyncio.Future[Any]:
        """Write ``payload`` (``count`` commands); the future is their reply (or list)."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise _ConnectionLost("the connection to Redis is closed")
        future = self.loop.create_future()
        waiter = _Waiter(future, count, self.loop.time() + self.call_timeout_s)
        self.pending.append(waiter)
        if self._timer is None:
            self._timer = self.loop.call_at(waiter.deadline, self._check_deadline)
        self._transport.write(payload)
        return future

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self.abort(RedisConnectionError(f"Redis sent an unreadable reply: {exc}"))
                return
            if reply is False:
                return
            if not self.pending:
                self.abort(RedisConnectionError("Redis sent a reply to no command"))
                return
            waiter = self.pending[0]
            if waiter.count == 1:
                self.pending.popleft()
                if not waiter.future.done():
                    waiter.future.set_result(reply)
                continue
            waiter.replies.append(reply)
            if len(waiter.replies) == waiter.count:
                self.pending.popleft()
                if not waiter.future.done():
                    waiter.future.set_result(waiter.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(_ConnectionLost("the connection to Redis was lost"
                                       + (f": {exc}" if exc else "")))

    def abort(self, error: RedisError) -> None:
        """Close the connection and fail every command in flight on it with ``error``."""
        self._fail_all(error)
        if self._transport is not None:
            self._transport.abort()

    def _fail_all(self, error: RedisError) -> None:
        if not self.closed:
            self.closed = True
            self.on_closed(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self.pending:
            future = self.pending.popleft().future
            if not future.done():
                future.set_exception(error)

    def _check_deadline(self) -> None:
        """The oldest command in flight is past its deadline: Redis is stuck or gone."""
        self._timer = None
        if not self.pending:
            return
        deadline = self.pending[0].deadline
        if deadline <= self.loop.time():
            self.abort(RedisTimeout(f"Redis did not answer within {self.call_timeout_s:g} s"))
        else:
            self._timer = self.loop.call_at(deadline, self._check_deadline)


class Script:
    """A Lua script, run by its SHA1 (``EVALSHA``); sent whole once Redis lacks it."""

    def __init__(self, client: RedisClient, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        try:
            return await self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except RedisReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self.client.execute_command("EVAL", self.source, len(keys), *keys, *args)


class RedisClient:
    """Commands to one Redis server over up to ``max_connections`` pipelining connections.

    The methods are the commands the services and their tests use, answering as Redis
    does (members and values as bytes); :meth:`execute_command` sends any other, and
    :meth:`pipeline` several in one round trip.
    """

    def __init__(self, host: str, port: int, *, db: int = 0, password: str | None = None,
                 max_connections: int, connect_timeout_s: float, call_timeout_s: float) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.host, self.port, self.db, self.password = host, port, db, password
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self._connections: list[_Connection] = []
        self._connecting: list[asyncio.Task[_Connection]] = []

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A client of ``redis://[[user]:password@]host[:port][/db]``."""
        parts = urlsplit(url)
        if parts.scheme != "redis" or not parts.hostname:
            raise ValueError(f"not a redis://host[:port][/db] URL: {url!r}")
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise ValueError(f"the database of {url!r} must be a number, got {path!r}")
        password = unquote(parts.password) if parts.password else None
        return cls(parts.hostname, parts.port or 6379, db=int(path or 0), password=password,
                   **options)

    # ------------------------------------------------------------------ sending

    async def execute_command(self, *args: Arg) -> Any:
        """One command's reply; a refusal raises :class:`RedisReplyError`."""
        reply = await self._send(encode_command(args), 1)
        if isinstance(reply, RedisReplyError):
            raise reply
        return reply

    async def pipeline(self, *commands: Command) -> list[Any]:
        """The replies of ``commands``, sent in one write; the first refusal raises."""
        if not commands:
            return []
        replies: list[Any] = await self._send(
            b"".join(encode_command(command) for command in commands), len(commands))
        for reply in replies:
            if isinstance(reply, RedisReplyError):
                raise reply
        return replies

    def script(self, source: str) -> Script:
        return Script(self, source)

    async def _send(self, payload: bytes, count: int) -> Any:
        try:
            connection = self._ready_connection() or await self._new_connection()
            return await connection.send(payload, count)
        except _ConnectionLost:
            connection = self._ready_connection() or await self._new_connection()
            return await connection.send(payload, count)

    def _ready_connection(self) -> _Connection | None:
        """An idle connection; else, with no room for a new one, the least busy."""
        least_busy: _Connection | None = None
        for connection in self._connections:
            if not connection.pending:
                return connection
            if least_busy is None or len(connection.pending) < len(least_busy.pending):
                least_busy = connection
        if len(self._connections) + len(self._connecting) < self.max_connections:
            return None
        return least_busy

    async def _new_connection(self) -> _Connection:
        """A connection opened now, or (no room for one) the first being opened."""
        if len(self._connections) + len(self._connecting) < self.max_connections:
            opening = asyncio.ensure_future(self._open())
            self._connecting.append(opening)
            opening.add_done_callback(self._opened)
        else:
            opening = self._connecting[0]
        return await asyncio.shield(opening)

    def _opened(self, opening: asyncio.Task[_Connection]) -> None:
        self._connecting.remove(opening)
        if not opening.cancelled() and opening.exception() is None:
            connection = opening.result()
            if not connection.closed:  # (lost during its handshake)
                self._connections.append(connection)

    def _closed(self, connection: _Connection) -> None:
        if connection in self._connections:
            self._connections.remove(connection)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self.call_timeout_s, self._closed), self.host, self.port)
                handshake: list[Command] = []
                if self.password is not None:
                    handshake.append(("AUTH", self.password))
                if self.db:
                    handshake.append(("SELECT", self.db))
                if handshake:
                    payload = b"".join(encode_command(command) for command in handshake)
                    replies = await connection.send(payload, len(handshake))
                    refused = [reply for reply in replies if isinstance(reply, RedisReplyError)]
                    if refused:
                        connection.abort(refused[0])
                        raise refused[0]
        except TimeoutError:
            raise RedisTimeout(f"could not connect to Redis at {self.host}:{self.port} "
                               f"within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise RedisConnectionError(
                f"could not connect to Redis at {self.host}:{self.port}: {exc}") from None
        return connection

    async def close(self) -> None:
        """Close every connection; commands in flight fail."""
        for opening in self._connecting:
            opening.cancel()
        for connection in list(self._connections):
            connection.abort(RedisConnectionError("the Redis client was closed"))

    # ------------------------------------------------------------------ commands

    async def ping(self) -> bool:
        return bool(await self.execute_command("PING") == b"PONG")

    async def get(self, key: Arg) -> bytes | None:
        reply: bytes | None = await self.execute_command("GET", key)
        return reply

    async def set(self, key: Arg, value: Arg, *, nx: bool = False) -> bool:
        """True once set; False if ``nx`` and the key exists."""
        args: tuple[Arg, ...] = ("SET", key, value, "NX") if nx else ("SET", key, value)
        return await self.execute_command(*args) is not None

    async def delete(self, *keys: Arg) -> int:
        return int(await self.execute_command("DEL", *keys))

    async def exists(self, *keys: Arg) -> int:
        return int(await self.execute_command("EXISTS", *keys))

    async def zadd(self, key: Arg, mapping: Mapping[Any, float], *,
                   nx: bool = False) -> int:
        """Add members with their scores; ``nx``: keep members that exist as they are."""
        return int(await self.execute_command(*zadd_command(key, mapping, nx=nx)))

    async def zrem(self, key: Arg, *members: Arg) -> int:
        return int(await self.execute_command("ZREM", key, *members))

    async def zrange(self, key: Arg, start: int, stop: int) -> list[bytes]:
        reply: list[bytes] = await self.execute_command("ZRANGE", key, start, stop)
        return reply

    async def zrevrange(self, key: Arg, start: int, stop: int) -> list[bytes]:
        reply: list[bytes] = await self.execute_command("ZREVRANGE", key, start, stop)
        return reply

    async def zscore(self, key: Arg, member: Arg) -> float | None:
        reply = await self.execute_command("ZSCORE", key, member)
        return None if reply is None else float(reply)

    async def zcard(self, key: Arg) -> int:
        return int(await self.execute_command("ZCARD", key))


def zadd_command(key: Arg, mapping: Mapping[Any, float], *, nx: bool = False
                 ) -> tuple[Arg, ...]:
    """``ZADD key [NX] score member ...`` of ``mapping`` (member: score)."""
    args: list[Arg] = ["ZADD", key, "NX"] if nx else ["ZADD", key]
    for member, score in mapping.items():
        args += (score, member)
    return tuple(args)
