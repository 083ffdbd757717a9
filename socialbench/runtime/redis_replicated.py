"""Redis as a primary and its replicas: writes to the primary, reads from the replicas.

As the original's ``use_replica``: reads (``READ_COMMANDS``, and pipelines of nothing
else) go to the replicas in turn, every other command to the primary. A read that
follows its own write sees it: each write is pipelined with ``WAIT <replicas>
<redis_wait_timeout_ms>``, so it is on every replica before the caller hears it
succeeded. A short WAIT leaves the write done and acknowledged, is counted
(``short_waits``), and sends this process's reads to the primary until a later WAIT
reaches every replica again (one write at a time carries it meanwhile). A replica that
cannot be reached or refuses (``LOADING``, ``MASTERDOWN``) has its reads sent to the
primary (``replica_fallbacks``) for ``REPLICA_RETRY_S``. A failover is not followed.
What WAIT costs: docs/stores.md, "Replicated".
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from socialbench.runtime.pipelining import StoreConnectionError, StoreReplyError
from socialbench.runtime.redis_client import Arg, Command, Redis, RedisClient

T = TypeVar("T")

# Commands a replica answers as the primary would, once it has the primary's writes.
READ_COMMANDS = frozenset({
    "GET", "MGET", "EXISTS", "TTL", "PTTL", "TYPE", "STRLEN",
    "ZRANGE", "ZREVRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZSCORE", "ZMSCORE",
    "ZCARD", "ZCOUNT", "ZRANK", "ZREVRANK",
    "SMEMBERS", "SISMEMBER", "SCARD", "HGET", "HGETALL", "HMGET", "LRANGE", "LLEN",
})
# A replica's refusals that say "not now, ask the primary".
REPLICA_UNREADY = ("LOADING", "MASTERDOWN")
REPLICA_RETRY_S = 1.0  # a replica that failed a read is not asked again for this long


class ReplicatedRedis(Redis):
    """Writes to ``primary`` (each followed by ``WAIT``), reads from ``replicas`` in turn."""

    def __init__(self, primary: RedisClient, replicas: list[RedisClient], *,
                 wait_timeout_ms: int) -> None:
        if not replicas:
            raise ValueError("a replicated Redis needs at least one replica")
        if wait_timeout_ms < 1:
            raise ValueError(f"the WAIT timeout must be at least 1 ms, got {wait_timeout_ms}")
        self.primary = primary
        self.replicas = replicas
        self.wait_command: Command = ("WAIT", len(replicas), wait_timeout_ms)
        self._next_replica = 0
        self._replica_away_until = [0.0] * len(replicas)
        # Whether reads go to the primary: some acknowledged write is not known to be on
        # every replica. Writes' replies are numbered; a write sent after the last one
        # not known to be on every replica, and whose WAIT reached them all, clears it.
        self.reads_on_primary = False
        self._replies_seen = 0
        self._last_unconfirmed = 0
        self._probing = False
        self.short_waits = 0
        self.unconfirmed_writes = 0
        self.replica_fallbacks = 0

    # ------------------------------------------------------------------ routing

    async def execute_command(self, *args: Arg) -> Any:
        if _name(args[0]) in READ_COMMANDS:
            return await self._read(lambda client: client.execute_command(*args))
        replies = await self._write((args,))
        return replies[0]

    async def pipeline(self, *commands: Command) -> list[Any]:
        if all(_name(command[0]) in READ_COMMANDS for command in commands):
            return await self._read(lambda client: client.pipeline(*commands))
        return await self._write(commands)

    async def _read(self, call: Callable[[RedisClient], Awaitable[T]]) -> T:
        """``call`` on the next replica that is not away; on the primary if none is, or
        if that one fails, or while reads must stay on the primary."""
        if not self.reads_on_primary:
            index = self._replica_to_read()
            if index is not None:
                try:
                    return await call(self.replicas[index])
                except StoreConnectionError:
                    self._replica_failed(index)
                except StoreReplyError as exc:
                    if not str(exc).startswith(REPLICA_UNREADY):
                        raise
                    self._replica_failed(index)
        return await call(self.primary)

    def _replica_to_read(self) -> int | None:
        now = time.monotonic()
        for _ in range(len(self.replicas)):
            index = self._next_replica
            self._next_replica = (index + 1) % len(self.replicas)
            if self._replica_away_until[index] <= now:
                return index
        return None

    def _replica_failed(self, index: int) -> None:
        self.replica_fallbacks += 1
        self._replica_away_until[index] = time.monotonic() + REPLICA_RETRY_S

    async def _write(self, commands: tuple[Command, ...]) -> list[Any]:
        """``commands`` on the primary, with a ``WAIT`` after them (see the module's
        docstring for when none is sent); the commands' replies."""
        wait = not self.reads_on_primary or not self._probing
        probe = wait and self.reads_on_primary
        if probe:
            self._probing = True
        sent_after = self._replies_seen
        try:
            if wait:
                *replies, acknowledged = await self.primary.pipeline(*commands,
                                                                     self.wait_command)
            else:
                replies, acknowledged = await self.primary.pipeline(*commands), None
        finally:
            if probe:
                self._probing = False
        self._replies_seen += 1
        if acknowledged is None or acknowledged < len(self.replicas):
            if acknowledged is None:
                self.unconfirmed_writes += 1
            else:
                self.short_waits += 1
            self._last_unconfirmed = self._replies_seen
            self.reads_on_primary = True
        elif sent_after >= self._last_unconfirmed:
            self.reads_on_primary = False
        return replies

    # ------------------------------------------------------------------ the rest

    async def ping(self) -> bool:
        """Whether the primary answers. A replica that is away costs only its reads, but
        one that refuses (its credentials) raises, as the primary's refusal would."""
        answered = await self.primary.ping()
        for replica in self.replicas:
            try:
                await replica.ping()
            except StoreConnectionError:
                continue
            except StoreReplyError as exc:
                if not str(exc).startswith(REPLICA_UNREADY):
                    raise
        return answered

    async def close(self) -> None:
        for client in (self.primary, *self.replicas):
            await client.close()

    def describe(self) -> dict[str, str]:
        return {"client": "socialbench",
                "topology": f"replicated: a primary and {len(self.replicas)} replica(s)"}

    def counters(self) -> dict[str, int]:
        return {"short_waits": self.short_waits, "unconfirmed_writes": self.unconfirmed_writes,
                "replica_fallbacks": self.replica_fallbacks}


def _name(command: Arg) -> str:
    return (command.decode() if isinstance(command, bytes) else str(command)).upper()
