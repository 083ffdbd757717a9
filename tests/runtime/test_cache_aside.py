"""The services' cache: a memcached that refuses or is down costs only the cache (issue 28)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from socialbench.runtime import cache_aside as cache_module
from socialbench.runtime.cache_aside import CACHE_REFUSED, CACHE_UNAVAILABLE, Cache
from socialbench.runtime.errors import StoreError
from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import ServerCommand, free_port

BOUNDS = {"connect_timeout_s": 1.0, "call_timeout_s": 1.0}


def unique(name: str) -> bytes:
    return f"{name}:{uuid.uuid4().hex}".encode()


@pytest.fixture
async def cache(memcached_server: ServerCommand) -> AsyncIterator[Cache]:
    client = MemcachedClient(memcached_server.host, memcached_server.port, max_connections=2,
                             **BOUNDS)
    yield Cache(client, Counter())
    await client.close()


@pytest.fixture
async def dead_cache() -> AsyncIterator[Cache]:
    client = MemcachedClient("127.0.0.1", free_port(), max_connections=2, **BOUNDS)
    yield Cache(client, Counter())
    await client.close()


async def test_fill_get_and_delete(cache: Cache) -> None:
    key, other = unique("k"), unique("other")
    await cache.fill(key, b"value")
    await cache.fill(key, b"another")  # a fill never replaces what is cached
    assert await cache.get(key) == b"value"
    assert await cache.multi_get(other, key) == (None, b"value")
    await cache.delete(key)
    assert await cache.get(key) is None
    assert await cache.multi_get(key) == (None,)
    assert cache.errors == Counter()


async def test_a_fill_that_lands_after_the_delete_cannot_bring_the_value_back(
    cache: Cache,
) -> None:
    key = unique("post")
    await cache.fill(key, b"the post")
    await cache.delete(key)  # e.g. undoing a compose while a reader had the post from MongoDB
    await cache.fill(key, b"the post")  # the reader's fill, late
    assert await cache.get(key) is None
    await cache.delete(unique("never-cached"))


async def test_a_refused_value_is_counted_not_raised(cache: Cache) -> None:
    key = unique("big")
    await cache.fill(key, b"x" * (2 << 20))  # over memcached's 1 MB item limit
    assert await cache.get(key) is None
    assert cache.errors == Counter({CACHE_REFUSED: 1})
    await cache.fill(key, b"small")  # the connection is still in step
    assert await cache.get(key) == b"small"


async def test_a_dead_memcached_is_a_miss_and_a_skipped_fill_but_an_unconfirmed_delete(
    dead_cache: Cache,
) -> None:
    key = unique("k")
    assert await dead_cache.get(key) is None
    assert await dead_cache.multi_get(key, unique("other")) == (None, None)
    await dead_cache.fill(key, b"value")
    await dead_cache.fill_many({key: b"value", unique("other"): b"value"})
    assert dead_cache.errors == Counter({CACHE_UNAVAILABLE: 5})
    with pytest.raises(StoreError, match="did not confirm the delete"):
        await dead_cache.delete(key)


async def test_failures_are_logged_at_most_once_per_interval(
    dead_cache: Cache, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "LOG_INTERVAL_S", 1e9)
    with caplog.at_level(logging.WARNING, logger="socialbench"):
        for _ in range(50):
            await dead_cache.get(unique("k"))
    [record] = [r for r in caplog.records if "memcached" in r.getMessage()]
    assert "memcached get failed, MongoDB answers instead (1 cache failures" in (
        record.getMessage())
    assert dead_cache.errors == Counter({CACHE_UNAVAILABLE: 50})


def test_a_service_serves_without_memcached_but_not_without_its_other_stores() -> None:
    assert Stores.can_serve({"mongodb": "ok", "memcached": "error: refused"})
    assert not Stores.can_serve({"mongodb": "error: refused", "memcached": "ok"})
    assert not Stores.can_serve({"redis": "error: refused"})
