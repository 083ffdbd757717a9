"""The store clients of the runtime, against the real servers."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import redis.exceptions
from pymongo.errors import PyMongoError

from socialbench.registry import Store
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import ServerCommand, free_port

ALL = (Store.REDIS, Store.MEMCACHED, Store.MONGODB)


def settings_for(redis: ServerCommand, memcached: ServerCommand, mongodb: ServerCommand,
                 pool_size: int) -> Settings:
    return Settings(
        redis_url=f"redis://{redis.address}/0", redis_pool_size=pool_size,
        memcached_address=memcached.address, memcached_pool_size=pool_size,
        mongodb_url=f"mongodb://{mongodb.address}", mongodb_pool_size=pool_size,
    )


async def test_a_burst_larger_than_the_pools_waits_instead_of_failing(
    redis_server: ServerCommand, memcached_server: ServerCommand, mongodb_server: ServerCommand
) -> None:
    stores = Stores.connect(settings_for(redis_server, memcached_server, mongodb_server, 4), ALL)
    redis, memcached = stores.require_redis(), stores.require_memcached()
    try:
        async def one(i: int) -> tuple[bool, bytes | None]:
            async with redis.pipeline(transaction=False) as pipe:
                pipe.set(f"burst:{i}", i)
                pipe.get(f"burst:{i}")
                _, value = await pipe.execute()
            await memcached.set(f"burst:{i}".encode(), str(i).encode())
            return value == str(i).encode(), await memcached.get(f"burst:{i}".encode())

        results = await asyncio.gather(*(one(i) for i in range(200)))
    finally:
        await stores.close()
    assert all(ok for ok, _ in results)
    assert [cached for _, cached in results] == [str(i).encode() for i in range(200)]


async def test_health_names_each_store_and_its_state(
    redis_server: ServerCommand, memcached_server: ServerCommand, mongodb_server: ServerCommand
) -> None:
    healthy = Stores.connect(settings_for(redis_server, memcached_server, mongodb_server, 2), ALL)
    dead_redis = ServerCommand("redis", [], "127.0.0.1", free_port())
    degraded = Stores.connect(
        settings_for(dead_redis, memcached_server, mongodb_server, 2), (Store.REDIS,)
    )
    try:
        assert await healthy.health() == {"mongodb": "ok", "redis": "ok", "memcached": "ok"}
        report = await degraded.health()
    finally:
        await healthy.close()
        await degraded.close()
    assert list(report) == ["redis"]
    assert report["redis"].startswith("error")


async def test_a_dead_or_stuck_store_fails_within_its_bounds_not_the_drivers_defaults() -> None:
    # A MongoDB that is down (PyMongo would look for a server for 30 s), and a Redis that
    # accepts connections and never answers (redis-py would wait forever).
    stuck = socket.create_server(("127.0.0.1", 0))
    stuck_port = stuck.getsockname()[1]
    settings = Settings(
        mongodb_url=f"mongodb://127.0.0.1:{free_port()}",
        redis_url=f"redis://127.0.0.1:{stuck_port}/0",
        store_connect_timeout_s=0.5, store_call_timeout_s=0.5,
    )
    stores = Stores.connect(settings, (Store.MONGODB, Store.REDIS))
    try:
        started = time.monotonic()
        with pytest.raises(PyMongoError):
            await stores.require_mongodb()["db"]["c"].find_one({"_id": 1})
        with pytest.raises(redis.exceptions.RedisError):
            await stores.require_redis().get("k")
        waited = time.monotonic() - started
    finally:
        await stores.close()
        stuck.close()
    assert waited < 10, f"waited {waited:.1f} s for a dead MongoDB and a stuck Redis"
