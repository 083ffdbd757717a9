"""Async clients for the three stores, created once per process at start-up.

- Redis and memcached: our own clients (:mod:`~socialbench.runtime.redis_client`,
  :mod:`~socialbench.runtime.memcached_client`: redis-py and aiomcache spent 2-5 times
  their CPU per command), over pipelining connections whose every wait is bounded
  (:mod:`~socialbench.runtime.pipelining`).
- MongoDB: PyMongo's native async client (``AsyncMongoClient``), one pool.

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
from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.pipelining import StoreClientError
from socialbench.runtime.redis_client import RedisClient
from socialbench.runtime.settings import Settings
from socialbench.runtime.store_spans import MongoSpans, TracedMemcachedClient, TracedRedisClient

T = TypeVar("T")

DUPLICATE_KEY = 11000  # MongoDB's error code of a unique index's duplicate

STORE_ERRORS: tuple[type[Exception], ...] = (StoreClientError, PyMongoError)

# What the services cache under a key: 1-250 bytes, no whitespace or control characters,
# C1 controls (U+0080-U+009F) included.
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


@dataclass
class Stores:
    """The store clients one service uses; the ones it does not use stay ``None``."""

    mongodb: AsyncMongoClient[dict[str, Any]] | None = None
    redis: RedisClient | None = None
    memcached: MemcachedClient | None = None

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
            memcached_options: dict[str, Any] = {
                "max_connections": settings.memcached_pool_size,
                "connect_timeout_s": settings.store_connect_timeout_s,
                "call_timeout_s": settings.store_call_timeout_s,
            }
            stores.memcached = (
                TracedMemcachedClient(host, port, tracer=tracer, **memcached_options) if tracer
                else MemcachedClient(host, port, **memcached_options)
            )
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

    def require_memcached(self) -> MemcachedClient:
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
