"""The services' Redis client: RESP over pipelining connections, replies parsed by hiredis.

Ours because redis-py cost a service's hot path 3-7 times this client's CPU per command
(docs/performance.md, ``bench store-clients``). Connections, bounds and errors are
:mod:`~socialbench.runtime.pipelining`'s; a command lost with its connection is sent once
more, which is safe for every command the services send (reads, ``ZADD`` of a score,
``ZREM``, ``SET NX``, the fan-out script). The services see :class:`Redis` whichever way
Redis is deployed: :class:`RedisClient` for one server,
:class:`~socialbench.runtime.redis_replicated.ReplicatedRedis` for a primary and its
replicas, :class:`~socialbench.runtime.redis_cluster.ClusterRedis` for a cluster. A
command on each of many keys (:meth:`Redis.each_key`, home-timeline's fan-out) is one Lua
script per ``EACH_KEY_BATCH`` keys on one server, a fifth of a pipeline's CPU a key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Self
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


class RedisAddress(NamedTuple):
    """Where a Redis server is, as a ``redis://`` URL says."""

    host: str
    port: int
    db: int
    password: str | None


def parse_redis_url(url: str) -> RedisAddress:
    """``redis://[[user]:password@]host[:port][/db]``; a clear ValueError otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or 6379
    except ValueError as exc:
        raise ValueError(f"not a redis://host[:port][/db] URL: {url!r} ({exc})") from None
    if parts.scheme != "redis" or not parts.hostname:
        raise ValueError(f"not a redis://host[:port][/db] URL: {url!r}")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"the database of {url!r} must be a number, got {path!r}")
    password = unquote(parts.password) if parts.password else None
    return RedisAddress(parts.hostname, port, int(path or 0), password)


def parse_redis_urls(urls: str) -> list[RedisAddress]:
    """A comma-separated list of ``redis://`` URLs: at least one, none twice."""
    addresses = [parse_redis_url(url) for url in urls.split(",") if url.strip()]
    if not addresses:
        raise ValueError("no redis:// URL given")
    places = [(address.host, address.port) for address in addresses]
    if len(set(places)) != len(places):
        raise ValueError(f"a Redis server is given twice: {urls}")
    return addresses


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


def encode_each_key(keys: Sequence[Arg], command: Command) -> bytes:
    """``command`` on each of ``keys`` as RESP: ``command[0] key command[1:]`` per key, the
    command's own parts encoded once."""
    if not command:
        raise ValueError("no command to send on each key")
    head = b"*%d\r\n%s" % (len(command) + 1, _bulk_strings(command[:1]))
    tail = _bulk_strings(command[1:])
    parts = []
    for key in keys:
        encoded = key if isinstance(key, bytes) else str(key).encode()
        parts.append(b"%s$%d\r\n%s\r\n%s" % (head, len(encoded), encoded, tail))
    return b"".join(parts)


def _bulk_strings(args: Command) -> bytes:
    """``args`` as RESP bulk strings, without the array's header."""
    return encode_command(args).split(b"\r\n", 1)[1]


class Script:
    """A Lua script, run by its SHA1 (``EVALSHA``); sent whole once Redis lacks it."""

    def __init__(self, client: Redis, source: str) -> None:
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


EACH_KEY_BATCH = 500  # keys per script or pipeline of each_key (docs/performance.md: hot-users)
# KEYS: the keys; ARGV: the command, then its arguments after the key.
EACH_KEY = """
for _, key in ipairs(KEYS) do redis.call(ARGV[1], key, unpack(ARGV, 2)) end
return #KEYS
"""


class Redis:
    """The Redis commands the services send, whichever way Redis is deployed.

    The methods answer as Redis does (members and values as bytes); a refusal raises
    :class:`StoreReplyError`, a Redis out of reach :class:`StoreConnectionError`.
    A deployment's client implements :meth:`execute_command`, :meth:`pipeline`,
    :meth:`ping` and :meth:`close`, and :meth:`each_key` when one script cannot reach
    every key.
    """

    async def execute_command(self, *args: Arg) -> Any:
        """One command's reply; a refusal raises :class:`StoreReplyError`."""
        raise NotImplementedError

    async def pipeline(self, *commands: Command) -> list[Any]:
        """The replies of ``commands``, in one round trip where the deployment allows;
        the first refusal raises."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def counters(self) -> dict[str, int]:
        """Events worth counting of this client since it started (none for one server)."""
        return {}

    def describe(self) -> dict[str, str]:
        """Which client and topology serve the commands (for a results manifest)."""
        return {"client": "socialbench", "topology": "standalone"}

    def script(self, source: str) -> Script:
        return Script(self, source)

    async def each_key(self, keys: Sequence[Arg], command: Command) -> None:
        """``command`` on each of ``keys``: ``command[0] key command[1:]``, e.g.
        ``each_key(timelines, ["ZADD", timestamp, post_id])``.

        One Lua script run per ``EACH_KEY_BATCH`` keys, one batch after the other, so
        that no run holds Redis long. Not atomic: use it for commands that are safe to
        repeat (a failure leaves some keys done).
        """
        script = self.script(EACH_KEY)
        for start in range(0, len(keys), EACH_KEY_BATCH):
            await script(keys[start:start + EACH_KEY_BATCH], command)

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


class RedisClient(PipelinedClient, Redis):
    """Commands to one Redis server over up to ``max_connections`` pipelining connections.

    :meth:`execute_command` sends any command, :meth:`pipeline` several in one round trip.
    """

    connection_class = RedisConnection

    def __init__(self, host: str, port: int, *, db: int = 0, password: str | None = None,
                 **options: Any) -> None:
        super().__init__(host, port, **options)
        self.db, self.password = db, password

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A client of ``redis://[[user]:password@]host[:port][/db]``."""
        address = parse_redis_url(url)
        return cls(address.host, address.port, db=address.db, password=address.password,
                   **options)

    async def execute_command(self, *args: Arg) -> Any:
        """One command's reply; a refusal raises :class:`StoreReplyError`."""
        reply = await self.send(encode_command(args), 1)
        if isinstance(reply, StoreReplyError):
            raise reply
        return reply

    async def pipeline(self, *commands: Command) -> list[Any]:
        """The replies of ``commands``, sent in one write; the first refusal raises."""
        replies = await self.replies(
            b"".join(encode_command(command) for command in commands), len(commands))
        for reply in replies:
            if isinstance(reply, StoreReplyError):
                raise reply
        return replies

    async def replies(self, payload: bytes, count: int) -> list[Any]:
        """The ``count`` replies of the commands encoded in ``payload``, sent in one
        write; a refusal is its reply (a :class:`StoreReplyError`), not raised."""
        if not count:
            return []
        if count == 1:
            return [await self.send(payload, 1)]
        replies: list[Any] = await self.send(payload, count)
        return replies

    async def handshake(self, connection: PipelinedConnection) -> None:
        """``AUTH`` and ``SELECT`` as the URL says."""
        commands: list[Command] = []
        if self.password is not None:
            commands.append(("AUTH", self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        if commands:
            payload = b"".join(encode_command(command) for command in commands)
            reply = await connection.send(payload, len(commands))
            replies = [reply] if len(commands) == 1 else reply
            refused = [reply for reply in replies if isinstance(reply, StoreReplyError)]
            if refused:
                connection.abort(refused[0])
                raise refused[0]
