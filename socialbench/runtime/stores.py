"""Async clients for the three stores, created once per process at start-up.

Our own clients over bounded pipelining connections
(:mod:`~socialbench.runtime.pipelining`): Redis (:mod:`~socialbench.runtime.redis_client`;
one server, a primary with replicas or a cluster by ``redis_mode``, each behind
:class:`~socialbench.runtime.redis_client.Redis`), memcached
(:mod:`~socialbench.runtime.memcached_client`, or a pool:
:mod:`~socialbench.runtime.memcached_pool`) and MongoDB
(:mod:`~socialbench.runtime.mongodb_client`); why ours: docs/performance.md. Their errors
become :class:`~socialbench.runtime.errors.StoreError` in the app factory's exception
handlers, so the happy path pays nothing for the mapping. With a tracer, the clients are
:mod:`~socialbench.runtime.store_spans`'.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Tracer

from socialbench.registry import Store
from socialbench.runtime.errors import StoreError
from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.memcached_pool import Memcached, MemcachedPool
from socialbench.runtime.mongodb_pymongo import MongoCollection, MongoDB, mongodb_client
from socialbench.runtime.pipelining import StoreClientError
from socialbench.runtime.redis_client import Redis, RedisClient, parse_redis_urls
from socialbench.runtime.redis_cluster import ClusterRedis
from socialbench.runtime.redis_replicated import ReplicatedRedis
from socialbench.runtime.settings import Settings
from socialbench.runtime.store_spans import (
    TracedClusterRedis,
    TracedMemcachedClient,
    TracedRedisClient,
    TracedReplicatedRedis,
)

STORE_ERRORS: tuple[type[Exception], ...] = (StoreClientError,)

# What the services cache under a key: 1-250 bytes, no whitespace or control characters,
# C1 controls (U+0080-U+009F) included.
_MEMCACHED_KEY = re.compile(r"[^\s\x00-\x20\x7f-\x9f]{1,250}")


def _client_options(settings: Settings, pool_size: int) -> dict[str, Any]:
    """A store client's connections at most and its bounds."""
    return {"max_connections": pool_size, "connect_timeout_s": settings.store_connect_timeout_s,
            "call_timeout_s": settings.store_call_timeout_s}


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

    mongodb: MongoDB | None = None
    redis: Redis | None = None
    memcached: Memcached | None = None

    @classmethod
    def connect(
        cls, settings: Settings, needed: tuple[Store, ...], *, tracer: Tracer | None = None
    ) -> Stores:
        """Create the clients of the stores in ``needed`` (connections open lazily)."""
        stores = cls()
        if Store.MONGODB in needed:
            options = _client_options(settings, settings.mongodb_pool_size)
            stores.mongodb = mongodb_client(settings.mongodb_url, tracer=tracer, **options)
        if Store.REDIS in needed:
            stores.redis = _redis(settings, tracer)
        if Store.MEMCACHED in needed:
            stores.memcached = _memcached(settings, tracer)
        return stores

    async def health(self) -> dict[str, str]:
        """``ok`` or the error, for each store this service uses."""
        checks: dict[str, Any] = {}
        if self.mongodb is not None:
            checks["mongodb"] = self.mongodb.ping()
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

    async def describe(self) -> dict[str, dict[str, str]]:
        """Each store's client and topology (``/stats``, a results manifest), by store."""
        described = {}
        if self.mongodb is not None:
            described["mongodb"] = await self.mongodb.describe()
        if self.redis is not None:
            described["redis"] = self.redis.describe()
        if self.memcached is not None:
            described["memcached"] = self.memcached.describe()
        return described

    def counters(self) -> dict[str, dict[str, int]]:
        """Each store client's counts of events since start (``/stats``), by store; none
        for a client that counts nothing (one Redis server)."""
        counts = {"redis": self.redis.counters()} if self.redis is not None else {}
        return {store: count for store, count in counts.items() if count}

    @staticmethod
    def can_serve(health: dict[str, str]) -> bool:
        """Whether :meth:`health`'s report leaves the service able to answer: every store
        but memcached is ``ok`` (a cache that fails costs only itself, see ``cache``)."""
        return all(state == "ok" for name, state in health.items() if name != "memcached")

    async def close(self) -> None:
        if self.mongodb is not None:
            await self.mongodb.close()
        if self.redis is not None:
            await self.redis.close()
        if self.memcached is not None:
            await self.memcached.close()

    def require_mongodb(self) -> MongoDB:
        if self.mongodb is None:
            raise StoreError("this service was not configured with MongoDB")
        return self.mongodb

    def require_redis(self) -> Redis:
        if self.redis is None:
            raise StoreError("this service was not configured with Redis")
        return self.redis

    def require_memcached(self) -> Memcached:
        if self.memcached is None:
            raise StoreError("this service was not configured with memcached")
        return self.memcached


def _redis(settings: Settings, tracer: Tracer | None) -> Redis:
    """The client of Redis as ``settings.redis_mode`` says it is deployed."""
    options = _client_options(settings, settings.redis_pool_size)
    if settings.redis_mode == "cluster":
        seeds = parse_redis_urls(settings.redis_url)
        options.update(wait_replicas=settings.redis_cluster_wait_replicas,
                       wait_timeout_ms=settings.redis_wait_timeout_ms)
        return (TracedClusterRedis(seeds, tracer=tracer, **options) if tracer
                else ClusterRedis(seeds, **options))
    if settings.redis_mode == "replicated":
        primary = RedisClient.from_url(settings.redis_url, **options)
        # A replica fails fast: its reads go to the primary meanwhile.
        replicas = [RedisClient(replica.host, replica.port, db=replica.db,
                                password=replica.password, reconnect_for_s=0.0, **options)
                    for replica in parse_redis_urls(settings.redis_replica_urls)]
        wait_timeout_ms = settings.redis_wait_timeout_ms
        return (TracedReplicatedRedis(primary, replicas, wait_timeout_ms=wait_timeout_ms,
                                      tracer=tracer) if tracer
                else ReplicatedRedis(primary, replicas, wait_timeout_ms=wait_timeout_ms))
    return (TracedRedisClient.from_url(settings.redis_url, tracer=tracer, **options)
            if tracer else RedisClient.from_url(settings.redis_url, **options))


def _memcached(settings: Settings, tracer: Tracer | None) -> Memcached:
    """The client of the one memcached server, or a pool of one client per server."""
    options = _client_options(settings, settings.memcached_pool_size)
    servers = settings.memcached_servers
    if len(servers) > 1:
        # A pool's server fails fast: its keys are misses while it is away.
        options["reconnect_for_s"] = 0.0
    clients = [TracedMemcachedClient(host, port, tracer=tracer, **options) if tracer
               else MemcachedClient(host, port, **options) for host, port in servers]
    return clients[0] if len(clients) == 1 else MemcachedPool(clients)


async def flag_fresh_cache(redis: Redis, collection: MongoCollection, flag: str) -> None:
    """Set the key ``flag`` in Redis if ``collection`` is empty (called at start-up).

    For services that write MongoDB then Redis: while the flag exists, Redis has seen
    every write since the collection was empty, so a key missing from Redis is an empty
    list, not a cache miss. The flag goes with Redis's data when Redis restarts, and
    never comes back while MongoDB holds data. (It assumes Redis does not evict keys:
    no ``maxmemory`` eviction policy.)
    """
    if await collection.find_one({}, {"_id": 1}) is None:
        await redis.set(flag, b"1", nx=True)

