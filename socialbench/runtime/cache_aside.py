"""memcached as the services use it: a copy of what MongoDB holds, never its only home.

A cache that refuses a value (``SERVER_ERROR``) or cannot be reached costs only the
cache: a read is a miss (the caller reads MongoDB), a fill is skipped, the caller's
MongoDB write stands and is answered. Each failure is counted in ``/stats``
(:data:`CACHE_REFUSED`, :data:`CACHE_UNAVAILABLE`) and logged at most once per
:data:`LOG_INTERVAL_S`; of a pool of servers, one that fails costs only its own keys.
No stale value: what the services cache never changes once stored, but for a post
deleted to undo a failed compose. :meth:`Cache.delete` leaves a tombstone (an empty
value for :data:`TOMBSTONE_TTL_S`, read as a miss) and every fill is an ``add``, which a
tombstone refuses, so a late fill cannot bring the post back; a delete memcached does
not confirm raises :class:`StoreError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from socialbench.runtime.errors import StoreError
from socialbench.runtime.memcached_pool import Memcached, SomeServersFailed
from socialbench.runtime.pipelining import StoreClientError, StoreReplyError

CACHE_REFUSED = "CacheRefused"
CACHE_UNAVAILABLE = "CacheUnavailable"
LOG_INTERVAL_S = 10.0
TOMBSTONE = b""
# Longer than any fill can take between its MongoDB read and its add (bounded by the
# store and RPC timeouts, seconds).
TOMBSTONE_TTL_S = 300

log = logging.getLogger("socialbench")


class Cache:
    """One service's memcached (one server or a pool), failures counted in ``errors``
    (its ``/stats``)."""

    def __init__(self, client: Memcached, errors: Counter[str]) -> None:
        self.client = client
        self.errors = errors
        self._unlogged = 0
        self._next_log = 0.0

    async def get(self, key: bytes) -> bytes | None:
        """The value of ``key``; None when missing, deleted or memcached failed."""
        try:
            return await self.client.get(key) or None
        except StoreClientError as exc:
            self._failed("get", exc)
            return None

    async def multi_get(self, *keys: bytes) -> tuple[bytes | None, ...]:
        """The value of each key, as :meth:`get`, in one round trip (per server of a pool:
        the keys of a server that fails are misses, the others' are answered)."""
        try:
            found = await self.client.multi_get(*keys)
        except SomeServersFailed as exc:
            for error in exc.errors:
                self._failed("get", error)
            found = exc.values
        except StoreClientError as exc:
            self._failed("get", exc)
            return (None,) * len(keys)
        return tuple(value or None for value in found)

    async def fill(self, key: bytes, value: bytes) -> None:
        """Cache ``value`` (read from or just written to MongoDB) unless ``key`` holds one."""
        try:
            await self.client.add(key, value)
        except StoreClientError as exc:
            self._failed("add", exc)

    async def fill_many(self, items: dict[bytes, bytes]) -> None:
        await asyncio.gather(*(self.fill(key, value) for key, value in items.items()))

    async def delete(self, key: bytes) -> None:
        """Make ``key`` read as missing, and refuse fills for a while; StoreError if
        memcached cannot confirm it."""
        try:
            await self.client.set(key, TOMBSTONE, TOMBSTONE_TTL_S)
        except StoreReplyError:
            # Refused (no memory): memcached drops the old value of a refused set; the
            # delete makes sure of it.
            await self._delete(key)
        except StoreClientError as exc:
            raise _unconfirmed(key, exc) from exc

    async def _delete(self, key: bytes) -> None:
        try:
            await self.client.delete(key)
        except StoreClientError as exc:
            raise _unconfirmed(key, exc) from exc

    def _failed(self, operation: str, error: StoreClientError) -> None:
        refused = isinstance(error, StoreReplyError)
        self.errors[CACHE_REFUSED if refused else CACHE_UNAVAILABLE] += 1
        self._unlogged += 1
        now = time.monotonic()
        if now >= self._next_log:
            log.warning("memcached %s failed, MongoDB answers instead (%d cache failures "
                        "since the last message): %s", operation, self._unlogged, error)
            self._unlogged = 0
            self._next_log = now + LOG_INTERVAL_S


def _unconfirmed(key: bytes, error: StoreClientError) -> StoreError:
    return StoreError(f"memcached did not confirm the delete of {key[:60]!r}, which it may "
                      f"still serve: {type(error).__name__}: {error}")
