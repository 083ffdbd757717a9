"""One load at a time per key: concurrent cache misses of one key share one MongoDB read.

After Redis or memcached lose their data, many requests for the same hot user miss at
once; without this, each would read MongoDB (under FerretDB, a scan of the collection)
and write the same entries back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

KeyT = TypeVar("KeyT", bound=Hashable)
ValueT = TypeVar("ValueT")


class SingleFlight(Generic[KeyT, ValueT]):
    """Runs ``load`` once for concurrent :meth:`run` calls of one key; all get its result.

    A call that arrives after the load finished starts a new one (nothing is cached
    here). The load runs as its own task, so a caller that is cancelled does not cancel
    it for the others; its error, if any, is every waiting caller's.
    """

    def __init__(self) -> None:
        self._running: dict[KeyT, asyncio.Future[ValueT]] = {}

    async def run(self, key: KeyT, load: Callable[[], Awaitable[ValueT]]) -> ValueT:
        """``load()``'s result, shared with every concurrent call of ``key``."""
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(load())
            self._running[key] = running
            running.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(running)

    def _finished(self, key: KeyT, done: asyncio.Future[ValueT]) -> None:
        self._running.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: no "never retrieved" warning if every caller left

    def __len__(self) -> int:
        """Loads in flight."""
        return len(self._running)
