"""Async clients for the three stores, created once per process at start-up.

- Redis: our own client (:mod:`~socialbench.runtime.redis_client`: redis-py cost ten
  times its CPU per command), pipelining connections, hiredis's parser.
- MongoDB: PyMongo's native async client (``AsyncMongoClient``), one pool.
- memcached: aiomcache, a pool of asyncio connections (never blocks the event loop),
  whose waits are bounded here (:class:`BoundedMemcachePool`): aiomcache itself has none.

Library errors of all three are turned into :class:`~socialbench.runtime.errors.StoreError`
by the app factory's exception handlers, so the happy path pays nothing for the mapping.
With a tracer, the clients are :mod:`~socialbench.runtime.store_spans`' (spans of store
calls in traced requests).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiomcache
from aiomcache.pool import Connection, MemcachePool
from opentelemetry.trace import Tracer
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    NetworkTimeout,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from socialbench.registry import Store
from socialbench.runtime.errors import StoreError
from socialbench.runtime.redis_client import RedisClient, RedisError
from socialbench.runtime.settings import Settings
from socialbench.runtime.store_spans import MongoSpans, TracedMemcached, TracedRedisClient

T = TypeVar("T")

DUPLICATE_KEY = 11000  # MongoDB's error code of a unique index's duplicate

STORE_ERRORS: tuple[type[Exception], ...] = (
    RedisError,
    PyMongoError,
    aiomcache.exceptions.ClientException,
    OSError,  # aiomcache surfaces a dead memcached as a plain OSError
)

# What memcached accepts as a key: 1-250 bytes, no whitespace or control characters,
# C1 controls (U+0080-U+009F) included: aiomcache refuses those too (a ValidationException).
_MEMCACHED_KEY = re.compile(r"[^\s\x00-\x20\x7f-\x9f]{1,250}")


def memcached_key(key: str) -> bytes | None:
    """``key`` encoded for memcached, or ``None`` when memcached cannot hold such a key."""
    if _MEMCACHED_KEY.fullmatch(key) is None:
        return None
    encoded = key.encode()
    return encoded if len(encoded) <= 250 else None


def user_id_cache_key(username: str) -> bytes | None:
    """The memcached key of ``username``'s id, shared by user and user-mention."""
    return memcached_key(f"{username}:user_id")


class MemcachedTimeout(TimeoutError):
    """memcached gave no connection or no answer within its bound (a ``StoreError``, 503)."""


class _BoundedReader(asyncio.StreamReader):
    """A memcached connection's reader: every read ends by the command's deadline, and the
    end of the stream is an error (aiomcache's line loop would spin on it forever).

    A read the buffer already holds waits for nothing and is not bounded: most of a
    ``get`` of many keys (one line and one value per key) is read from the buffer, and a
    timeout per read was a sixth of post-storage's CPU (py-spy, timeline reads).
    """

    deadline = 0.0  # loop time by which the command in progress must be answered

    async def readline(self) -> bytes:
        if b"\n" in self._buffer:  # type: ignore[attr-defined]
            line = await super().readline()
        else:
            line = await self.bounded(super().readline())
        if not line.endswith(b"\n"):
            raise ConnectionResetError("memcached closed the connection")
        return line

    async def readexactly(self, n: int) -> bytes:
        try:
            if len(self._buffer) >= n:  # type: ignore[attr-defined]
                return await super().readexactly(n)
            return await self.bounded(super().readexactly(n))
        except asyncio.IncompleteReadError:
            raise ConnectionResetError("memcached closed the connection") from None

    async def bounded(self, wait: Awaitable[T]) -> T:
        """``wait`` awaited by the command's deadline, else :class:`MemcachedTimeout`."""
        try:
            async with asyncio.timeout_at(self.deadline):
                return await wait
        except TimeoutError:
            raise MemcachedTimeout("memcached did not answer in time") from None


class _BoundedWriter(asyncio.StreamWriter):
    """A memcached connection's writer: waiting for room to write ends by the deadline."""

    def __init__(self, transport: asyncio.WriteTransport, protocol: asyncio.StreamReaderProtocol,
                 reader: _BoundedReader, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(transport, protocol, reader, loop)
        self.bounded_reader = reader

    async def drain(self) -> None:
        await self.bounded_reader.bounded(super().drain())


class BoundedMemcachePool(MemcachePool):
    """aiomcache's pool with every wait bounded by the store settings.

    aiomcache has no timeout of its own: a memcached that is down, stuck or restarting
    would hold a request forever (and a connection at end of stream spins the event loop).
    Here connecting takes at most ``store_connect_timeout_s``, waiting for a free
    connection ``store_wait_timeout_s``, and a command ``store_call_timeout_s`` from the
    moment it has its connection; each failure is an ``OSError`` (a ``StoreError``, 503).
    A connection that failed, or whose command was cancelled half-way, is closed rather
    than reused, and new ones are opened on demand: a restarted memcached is found again.
    """

    def __init__(self, host: str, port: int, *, size: int, settings: Settings) -> None:
        super().__init__(host, port, minsize=size, maxsize=size)
        self.connect_timeout_s = settings.store_connect_timeout_s
        self.call_timeout_s = settings.store_call_timeout_s
        self.wait_timeout_s = settings.store_wait_timeout_s

    async def acquire(self) -> Connection:
        try:
            async with asyncio.timeout(self.wait_timeout_s):
                conn = await super().acquire()
        except MemcachedTimeout:
            raise  # connecting took too long
        except TimeoutError:
            raise MemcachedTimeout(
                f"no memcached connection free within {self.wait_timeout_s:g} s") from None
        assert isinstance(conn.reader, _BoundedReader)
        conn.reader.deadline = asyncio.get_running_loop().time() + self.call_timeout_s
        return conn

    def release(self, conn: Connection) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # Cancelled mid-command (aiomcache marks only an Exception): its answer may
            # still come, and would be read as the next command's.
            conn.reader.set_exception(ConnectionAbortedError("memcached command cancelled"))
        super().release(conn)

    async def _create_new_conn(self) -> Connection | None:
        if self.size() >= self._maxsize:
            return None
        loop = asyncio.get_running_loop()
        reader = _BoundedReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                transport, _ = await loop.create_connection(
                    lambda: protocol, self._host, self._port)
        except TimeoutError:
            raise MemcachedTimeout(f"could not connect to memcached at {self._host}:"
                                   f"{self._port} within {self.connect_timeout_s:g} s") from None
        conn = Connection(reader, _BoundedWriter(transport, protocol, reader, loop))
        if self.size() >= self._maxsize:  # others filled the pool while this one connected
            self._do_close(conn)
            return None
        return conn


@dataclass
class Stores:
    """The store clients one service uses; the ones it does not use stay ``None``."""

    mongodb: AsyncMongoClient[dict[str, Any]] | None = None
    redis: RedisClient | None = None
    memcached: aiomcache.Client | None = None

    @classmethod
    def connect(
        cls, settings: Settings, needed: tuple[Store, ...], *, tracer: Tracer | None = None
    ) -> Stores:
        """Create the clients of the stores in ``needed`` (connections open lazily)."""
        stores = cls()
        if Store.MONGODB in needed:
            stores.mongodb = AsyncMongoClient(
                settings.mongodb_url,
                maxPoolSize=settings.mongodb_pool_size,
                waitQueueTimeoutMS=int(settings.store_wait_timeout_s * 1000),
                serverSelectionTimeoutMS=int(settings.store_connect_timeout_s * 1000),
                connectTimeoutMS=int(settings.store_connect_timeout_s * 1000),
                socketTimeoutMS=int(settings.store_call_timeout_s * 1000),
                tz_aware=False,
                event_listeners=[MongoSpans(tracer)] if tracer else [],
            )
        if Store.REDIS in needed:
            redis_options: dict[str, Any] = {
                "max_connections": settings.redis_pool_size,
                "connect_timeout_s": settings.store_connect_timeout_s,
                "call_timeout_s": settings.store_call_timeout_s,
            }
            stores.redis = (
                TracedRedisClient.from_url(settings.redis_url, tracer=tracer, **redis_options)
                if tracer else RedisClient.from_url(settings.redis_url, **redis_options)
            )
        if Store.MEMCACHED in needed:
            host, port = settings.memcached_host_port
            size = settings.memcached_pool_size
            memcached = (
                TracedMemcached(host, port, pool_size=size, tracer=tracer) if tracer
                else aiomcache.Client(host, port, pool_size=size)
            )
            memcached._pool = BoundedMemcachePool(host, port, size=size, settings=settings)
            stores.memcached = memcached
        return stores

    async def health(self) -> dict[str, str]:
        """``ok`` or the error, for each store this service uses."""
        checks: dict[str, Any] = {}
        if self.mongodb is not None:
            checks["mongodb"] = self.mongodb.admin.command("ping")
        if self.redis is not None:
            checks["redis"] = self.redis.ping()
        if self.memcached is not None:
            checks["memcached"] = self.memcached.version()
        results = await asyncio.gather(
            *(asyncio.wait_for(check, 2.0) for check in checks.values()), return_exceptions=True
        )
        return {
            name: "ok" if not isinstance(result, BaseException) else f"error: {result!r}"
            for name, result in zip(checks, results, strict=True)
        }

    async def close(self) -> None:
        if self.mongodb is not None:
            await self.mongodb.close()
        if self.redis is not None:
            await self.redis.close()
        if self.memcached is not None:
            await self.memcached.close()

    def require_mongodb(self) -> AsyncMongoClient[dict[str, Any]]:
        if self.mongodb is None:
            raise StoreError("this service was not configured with MongoDB")
        return self.mongodb

    def require_redis(self) -> RedisClient:
        if self.redis is None:
            raise StoreError("this service was not configured with Redis")
        return self.redis

    def require_memcached(self) -> aiomcache.Client:
        if self.memcached is None:
            raise StoreError("this service was not configured with memcached")
        return self.memcached


async def flag_fresh_cache(
    redis: RedisClient, collection: AsyncCollection[dict[str, Any]], flag: str
) -> None:
    """Set the key ``flag`` in Redis if ``collection`` is empty (called at start-up).

    For services that write MongoDB then Redis: while the flag exists, Redis has seen
    every write since the collection was empty, so a key missing from Redis is an empty
    list, not a cache miss. The flag goes with Redis's data when Redis restarts, and
    never comes back while MongoDB holds data. (It assumes Redis does not evict keys:
    no ``maxmemory`` eviction policy.)
    """
    if await collection.find_one({}, {"_id": 1}) is None:
        await redis.set(flag, b"1", nx=True)


def _connection_was_dropped(exc: AutoReconnect) -> bool:
    """A pooled connection the server had closed (it restarted), not a server that does
    not answer: a timeout or no server found is not worth a second wait."""
    return not isinstance(exc, (NetworkTimeout, ServerSelectionTimeoutError))


async def insert_one(collection: AsyncCollection[dict[str, Any]],
                     document: dict[str, Any]) -> None:
    """``collection.insert_one(document)``, once more after a dropped connection.

    pymongo retries no write on a standalone server (retryable writes need a replica
    set), so after the MongoDB server restarted, the first write on each pooled
    connection failed. The second try sends the same ``_id`` (pymongo set it in
    ``document`` the first time): a duplicate of it means the first try had landed,
    which is a success; any other duplicate key is the caller's, raised as usual.
    """
    await once_more_if_dropped(lambda: collection.insert_one(document),
                               again=lambda: insert_again(collection, document))


async def insert_again(collection: AsyncCollection[dict[str, Any]],
                       document: dict[str, Any]) -> None:
    """The second try of :func:`insert_one`: a duplicate of ``document``'s own ``_id``
    is the first try, landed."""
    try:
        await collection.insert_one(document)
    except DuplicateKeyError:
        if await collection.find_one({"_id": document["_id"]}, {"_id": 1}) is None:
            raise


async def insert_many(collection: AsyncCollection[dict[str, Any]],
                      documents: list[dict[str, Any]]) -> None:
    """``collection.insert_many(documents)``, once more after a dropped connection, as
    :func:`insert_one`: the first try may have stored some of them."""
    await once_more_if_dropped(lambda: collection.insert_many(documents),
                               again=lambda: insert_many_again(collection, documents))


async def insert_many_again(collection: AsyncCollection[dict[str, Any]],
                            documents: list[dict[str, Any]]) -> None:
    """The second try of :func:`insert_many`: a duplicate whose own ``_id`` (set by the
    first try) is stored is the first try's, landed; any other duplicate is raised."""
    try:
        await collection.insert_many(documents, ordered=False)
    except BulkWriteError as exc:
        errors: list[dict[str, Any]] = exc.details.get("writeErrors", [])
        if not errors or any(error.get("code") != DUPLICATE_KEY for error in errors):
            raise
        ids = {documents[error["index"]]["_id"] for error in errors}
        cursor = collection.find({"_id": {"$in": list(ids)}}, {"_id": 1})
        if {document["_id"] async for document in cursor} != ids:
            raise


async def once_more_if_dropped(write: Callable[[], Awaitable[T]],
                               again: Callable[[], Awaitable[T]] | None = None) -> T:
    """``write()``, and after a dropped connection ``again()`` (default: ``write()``) on a
    new one: for writes safe to repeat (deletes; inserts whose duplicates the caller takes
    as taken keys), or whose second try tells a landed first one apart."""
    try:
        return await write()
    except AutoReconnect as exc:
        if not _connection_was_dropped(exc):
            raise
        return await (again or write)()
