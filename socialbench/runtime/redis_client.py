"""The services' Redis client: RESP over pipelining connections, replies parsed by hiredis.

Why our own: a service's Redis commands are on its hot path, and redis-py's cost was
measured (``socialbench bench store-clients``: a timeline read, ``ZREVRANGE`` of 10
members, under uvloop, CPU of the client process, three runs). redis-py 8.1 with the
blocking pool the services need: 136-182 µs per command from 1 caller, 117-143 from 8
(its plain pool, 77 µs, fails a burst beyond the pool instead of waiting; coredis 6.9:
177). This client: 35-42 and 18-23 µs. redis-py was 22% of home-timeline's CPU on
timeline reads (py-spy).

Connections, bounds and errors are :mod:`~socialbench.runtime.pipelining`'s. A command
lost with its connection is sent once more, which is safe for every command the services
send: reads, ``ZADD`` of a score, ``ZREM``, ``SET NX``, the fan-out script of ``ZADD``
or ``ZREM``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Self
from urllib.parse import unquote, urlsplit

import hiredis

from socialbench.runtime.pipelining import (
    INCOMPLETE,
    PipelinedClient,
    PipelinedConnection,
    StoreConnectionError,
    StoreReplyError,
)

Arg = bytes | str | int | float
Command = Sequence[Arg]


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


class RedisConnection(PipelinedConnection):
    """A connection whose replies hiredis reads; a pipeline of n commands expects n."""

    store = "Redis"

    def __init__(self, client: PipelinedClient) -> None:
        super().__init__(client)
        self._reader = hiredis.Reader(replyError=StoreReplyError)
        self._replies: list[Any] = []  # a pipeline's replies so far

    def feed(self, data: bytes) -> None:
        self._reader.feed(data)

    def read_reply(self, expect: int) -> Any:
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError as exc:
                raise StoreConnectionError(f"Redis sent an unreadable reply: {exc}") from None
            if reply is False:
                return INCOMPLETE
            if expect == 1:
                return reply
            self._replies.append(reply)
            if len(self._replies) == expect:
                replies, self._replies = self._replies, []
                return replies

    def has_unread(self) -> bool:
        return bool(self._reader.has_data())


class Script:
    """A Lua script, run by its SHA1 (``EVALSHA``); sent whole once Redis lacks it."""

    def __init__(self, client: RedisClient, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        try:
            return await self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except StoreReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self.client.execute_command("EVAL", self.source, len(keys), *keys, *args)


class RedisClient(PipelinedClient):
    """Commands to one Redis server over up to ``max_connections`` pipelining connections.

    The methods are the commands the services and their tests use, answering as Redis
    does (members and values as bytes); :meth:`execute_command` sends any other, and
    :meth:`pipeline` several in one round trip.
    """

    connection_class = RedisConnection

    def __init__(self, host: str, port: int, *, db: int = 0, password: str | None = None,
                 **options: Any) -> None:
        super().__init__(host, port, **options)
        self.db, self.password = db, password

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

    async def execute_command(self, *args: Arg) -> Any:
        """One command's reply; a refusal raises :class:`StoreReplyError`."""
        reply = await self.send(encode_command(args), 1)
        if isinstance(reply, StoreReplyError):
            raise reply
        return reply

    async def pipeline(self, *commands: Command) -> list[Any]:
        """The replies of ``commands``, sent in one write; the first refusal raises."""
        if not commands:
            return []
        replies: list[Any] = await self.send(
            b"".join(encode_command(command) for command in commands), len(commands))
        for reply in replies:
            if isinstance(reply, StoreReplyError):
                raise reply
        return replies

    def script(self, source: str) -> Script:
        return Script(self, source)

    async def handshake(self, connection: PipelinedConnection) -> None:
        """``AUTH`` and ``SELECT`` as the URL says."""
        commands: list[Command] = []
        if self.password is not None:
            commands.append(("AUTH", self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        if commands:
            payload = b"".join(encode_command(command) for command in commands)
            replies = await connection.send(payload, len(commands))
            refused = [reply for reply in replies if isinstance(reply, StoreReplyError)]
            if refused:
                connection.abort(refused[0])
                raise refused[0]

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
        args: list[Arg] = ["ZADD", key, "NX"] if nx else ["ZADD", key]
        for member, score in mapping.items():
            args += (score, member)
        return int(await self.execute_command(*args))

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

