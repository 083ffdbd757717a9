"""Redis Cluster: each command to the master of its key's slot, redirects and failover
followed by redis-py's cluster client.

redis-py's ``RedisCluster`` keeps the slot map and follows ``MOVED``, ``ASK``,
``TRYAGAIN``, ``CLUSTERDOWN`` and failovers; a command whose slot's master is known and
answers goes over our pipelining :class:`~socialbench.runtime.redis_client.RedisClient`
of that master, anything else to redis-py (``counters()["fallbacks"]``). Ours costs a
third of redis-py's CPU a read and a thirteenth a fan-out (docs/stores.md, "Cluster").

:meth:`ClusterRedis.each_key` (the fan-out, ``EACH_KEY_BATCH`` keys a round) and the
services' pipelines are split by master, one pipeline each, replies in the order of the
commands. Reads go to masters. A failover can lose the writes a master acknowledged last;
with ``wait_replicas`` each pipeline of writes ends in ``WAIT`` (short waits and writes
that went through redis-py are counted): docs/stores.md, "What a failover loses".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis.crc import key_slot

from socialbench.runtime.pipelining import (
    StoreClientError,
    StoreConnectionError,
    StoreReplyError,
    StoreTimeout,
)
from socialbench.runtime.redis_client import (
    EACH_KEY_BATCH,
    Arg,
    Command,
    Redis,
    RedisAddress,
    RedisClient,
    encode_command,
    encode_each_key,
)
from socialbench.runtime.redis_replicated import READ_COMMANDS

if TYPE_CHECKING:
    from redis.asyncio.cluster import RedisCluster

# Commands this module sends itself, their key first; any other goes to redis-py.
KEYED_COMMANDS = READ_COMMANDS | {
    "SET", "DEL", "INCR", "EXPIRE", "ZADD", "ZREM", "ZINCRBY", "SADD", "SREM", "HSET",
    "HDEL", "LPUSH", "RPUSH",
}
SCRIPT_COMMANDS = frozenset({"EVAL", "EVALSHA"})
# Refusals that mean "not here, not now": redis-py sends the command again where it goes.
CLUSTER_REFUSALS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN",
                    "READONLY")
NODE_RETRY_S = 1.0  # a master that could not be reached is left to redis-py this long


class ClusterRedis(Redis):
    """The commands of :class:`~socialbench.runtime.redis_client.Redis` on a Redis Cluster
    found from ``seeds``."""

    def __init__(self, seeds: Sequence[RedisAddress], *, max_connections: int,
                 connect_timeout_s: float, call_timeout_s: float, wait_replicas: int = 0,
                 wait_timeout_ms: int = 500) -> None:
        if not seeds:
            raise ValueError("a Redis Cluster needs at least one seed node")
        if any(seed.db for seed in seeds):
            raise ValueError("a Redis Cluster has only database 0")
        if wait_replicas < 0:
            raise ValueError(f"wait_replicas cannot be negative, got {wait_replicas}")
        self.seeds = list(seeds)
        self.password = seeds[0].password
        self.options: dict[str, Any] = {
            "max_connections": max_connections, "connect_timeout_s": connect_timeout_s,
            "call_timeout_s": call_timeout_s, "reconnect_for_s": 0.0}
        self.cluster = self._redis_py_client()
        # redis-py fails a command beyond max_connections instead of waiting.
        self._redis_py_slots = asyncio.Semaphore(max_connections)
        self.wait_command: Command | None = (
            ("WAIT", wait_replicas, wait_timeout_ms) if wait_replicas else None)
        self.wait_replicas = wait_replicas
        self._masters: dict[str, RedisClient] = {}
        self._away_until: dict[str, float] = {}
        self.fallbacks = 0
        self.short_waits = 0
        self.unconfirmed_writes = 0

    # ------------------------------------------------------------------ commands

    async def execute_command(self, *args: Arg) -> Any:
        await self._ready()
        master = self._master_of(_key_of(args))
        if master is not None:
            write = self.wait_command is not None and _name(args[0]) not in READ_COMMANDS
            payload, count = encode_command(args), 1
            if write:
                payload, count = payload + encode_command(self.wait_command or ()), 2
            try:
                replies = await self._masters[master].replies(payload, count)
            except StoreTimeout:
                raise
            except StoreConnectionError:
                self._away_until[master] = time.monotonic() + NODE_RETRY_S
            else:
                if write:
                    self._count_wait(replies.pop())
                reply = replies[0]
                if not _refused_here(reply):
                    if isinstance(reply, StoreReplyError):
                        raise reply
                    return reply
        return await self._by_redis_py(args)

    async def pipeline(self, *commands: Command) -> list[Any]:
        replies = await self._on_masters(
            [_key_of(command) for command in commands],
            lambda indexes: b"".join(encode_command(commands[i]) for i in indexes),
            lambda index: commands[index],
            lambda indexes: any(_name(commands[i][0]) not in READ_COMMANDS for i in indexes))
        for reply in replies:
            if isinstance(reply, StoreReplyError):
                raise reply
        return replies

    async def each_key(self, keys: Sequence[Arg], command: Command) -> None:
        """``command`` on each of ``keys``: one pipeline per master of their slots,
        ``EACH_KEY_BATCH`` keys at a time; the first refusal raises once all are sent."""
        if not command:
            raise ValueError("no command to send on each key")
        for start in range(0, len(keys), EACH_KEY_BATCH):
            await self._each_key_batch(keys[start:start + EACH_KEY_BATCH], command)

    async def _each_key_batch(self, keys: Sequence[Arg], command: Command) -> None:
        write = _name(command[0]) not in READ_COMMANDS
        replies = await self._on_masters(
            keys,
            lambda indexes: encode_each_key([keys[i] for i in indexes], command),
            lambda index: (command[0], keys[index], *command[1:]),
            lambda _: write, independent=True)
        for reply in replies:
            if isinstance(reply, StoreReplyError):
                raise reply

    async def delete(self, *keys: Arg) -> int:
        """Keys of any slots (one ``DEL`` per key)."""
        return sum(await self.pipeline(*(("DEL", key) for key in keys)))

    async def exists(self, *keys: Arg) -> int:
        """Keys of any slots (one ``EXISTS`` per key)."""
        return sum(await self.pipeline(*(("EXISTS", key) for key in keys)))

    async def ping(self) -> bool:
        """Whether a master answers and sees the cluster serving (``cluster_state:ok``)."""
        await self._ready()
        error: StoreClientError | None = None
        for master in self._known_masters():
            try:
                info = await self._masters[master].execute_command("CLUSTER", "INFO")
            except StoreClientError as exc:
                error = exc
                continue
            return b"cluster_state:ok" in info
        raise error or StoreConnectionError("Redis Cluster: no master is known")

    async def close(self) -> None:
        for client in self._masters.values():
            await client.close()
        await self.cluster.aclose()

    def describe(self) -> dict[str, str]:
        slots = self.cluster.nodes_manager.slots_cache.values()
        masters = len({nodes[0].name for nodes in slots if nodes})
        return {"client": "socialbench, with redis-py's slot map and redirects",
                "topology": f"cluster of {masters} masters" if masters else "cluster"}

    def counters(self) -> dict[str, int]:
        return {"fallbacks": self.fallbacks, "short_waits": self.short_waits,
                "unconfirmed_writes": self.unconfirmed_writes}

    # ------------------------------------------------------------------ routing

    def _redis_py_client(self) -> RedisCluster:
        """redis-py's cluster client of the seeds, replies left as Redis sends them (as our
        client gives them; it keeps the parsers it needs itself: COMMAND, CLUSTER ...)."""
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        cluster = RedisCluster(
            startup_nodes=[ClusterNode(seed.host, seed.port) for seed in self.seeds],
            password=self.password, max_connections=self.options["max_connections"],
            socket_connect_timeout=self.options["connect_timeout_s"],
            socket_timeout=self.options["call_timeout_s"], require_full_coverage=False)
        callbacks = cluster.response_callbacks
        for name in [name for name in callbacks if not name.startswith(("COMMAND", "CLUSTER"))]:
            del callbacks[name]
        return cluster

    async def _ready(self) -> None:
        """The slot map, read once at the first command (redis-py refreshes it). A first
        read that fails (the nodes not yet formed into a cluster, as while a chart's Job
        forms it) leaves redis-py's client unable to try again: a new one tries next time."""
        if not self.cluster.nodes_manager.slots_cache:
            try:
                await self.cluster.initialize()
            except Exception as exc:
                failed, self.cluster = self.cluster, self._redis_py_client()
                await failed.aclose()
                raise _store_error(exc) from None

    def _master_of(self, key: bytes | None) -> str | None:
        """``host:port`` of the master of ``key``'s slot, if known and not away; its client
        in ``_masters``. (The slot map read by :meth:`_ready` first.)"""
        if key is None:
            return None
        nodes = self.cluster.nodes_manager.slots_cache.get(key_slot(key))
        if not nodes:
            return None
        master = nodes[0]
        name: str = master.name
        if name not in self._masters:
            self._masters[name] = RedisClient(master.host, int(master.port),
                                              password=self.password, **self.options)
        elif self._away_until.get(name, 0.0) > time.monotonic():
            return None
        return name

    def _known_masters(self) -> list[str]:
        masters = dict.fromkeys(nodes[0].name for nodes
                                in self.cluster.nodes_manager.slots_cache.values() if nodes)
        for name in masters:
            if name not in self._masters:
                host, _, port = name.rpartition(":")
                self._masters[name] = RedisClient(host, int(port), password=self.password,
                                                  **self.options)
        return list(masters)

    async def _on_masters(
        self,
        keys: Sequence[Arg | bytes | None],
        encode: Callable[[list[int]], bytes],
        command_at: Callable[[int], Command],
        writes: Callable[[list[int]], bool],
        *, independent: bool = False,
    ) -> list[Any]:
        """The replies of commands on ``keys`` (``command_at(i)`` is the i-th), one
        pipeline per master (``encode`` of the commands' indexes), concurrently; a
        command refused there or of a master out of reach, then, through redis-py: in
        order, or all at once when the commands are ``independent`` (a fan-out's, one
        per key: a master away must not cost one round trip per follower in a row)."""
        await self._ready()
        groups: dict[str, list[int]] = {}
        by_redis_py: list[int] = []
        for index, key in enumerate(keys):
            master = self._master_of(_encoded(key))
            if master is None:
                by_redis_py.append(index)
            else:
                groups.setdefault(master, []).append(index)
        replies: list[Any] = [None] * len(keys)

        async def on_master(master: str, indexes: list[int]) -> None:
            payload, count = encode(indexes), len(indexes)
            wait = self.wait_command is not None and writes(indexes)
            if wait:
                payload, count = payload + encode_command(self.wait_command or ()), count + 1
            try:
                answered = await self._masters[master].replies(payload, count)
            except StoreTimeout:
                raise
            except StoreConnectionError:
                self._away_until[master] = time.monotonic() + NODE_RETRY_S
                by_redis_py.extend(indexes)
                return
            if wait:
                self._count_wait(answered.pop())
            for index, reply in zip(indexes, answered, strict=True):
                if _refused_here(reply):
                    by_redis_py.append(index)
                else:
                    replies[index] = reply

        if len(groups) == 1:
            await on_master(*next(iter(groups.items())))
        elif groups:
            await asyncio.gather(*(on_master(master, indexes)
                                   for master, indexes in groups.items()))

        async def by_redis_py_at(index: int) -> None:
            try:
                replies[index] = await self._by_redis_py(command_at(index))
            except StoreReplyError as exc:
                replies[index] = exc

        if independent:
            failed = await asyncio.gather(*(by_redis_py_at(index) for index in by_redis_py),
                                          return_exceptions=True)
            for error in failed:
                if isinstance(error, BaseException):
                    raise error
        else:
            for index in sorted(by_redis_py):
                await by_redis_py_at(index)
        return replies

    async def _by_redis_py(self, args: Command) -> Any:
        """``args`` sent by redis-py's cluster client (it follows redirects and failover)."""
        self.fallbacks += 1
        if self.wait_command is not None and _name(args[0]) not in READ_COMMANDS:
            self.unconfirmed_writes += 1
        try:
            async with self._redis_py_slots:
                return await self.cluster.execute_command(*args)
        except Exception as exc:
            raise _store_error(exc) from None

    def _count_wait(self, acknowledged: Any) -> None:
        if not isinstance(acknowledged, int) or acknowledged < self.wait_replicas:
            self.short_waits += 1


def _name(command: Arg) -> str:
    return (command.decode() if isinstance(command, bytes) else str(command)).upper()


def _encoded(key: Arg | bytes | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    return key.encode() if isinstance(key, str) else str(key).encode()


def _key_of(args: Command) -> bytes | None:
    """The key a command is routed by (its first), or None to leave it to redis-py."""
    name = _name(args[0])
    if name in SCRIPT_COMMANDS:
        if len(args) > 3 and str(args[2]) != "0":
            return _encoded(args[3])
        return None
    if name in KEYED_COMMANDS and len(args) > 1:
        return _encoded(args[1])
    return None


def _refused_here(reply: Any) -> bool:
    """A refusal redis-py deals with (a redirect, or a node not serving now)."""
    return isinstance(reply, StoreReplyError) and str(reply).startswith(CLUSTER_REFUSALS)


def _store_error(exc: Exception) -> StoreClientError:
    """redis-py's error as the services' store errors (their 5xx and counts)."""
    import redis.exceptions as redis_errors

    message = f"Redis Cluster: {exc}"
    if isinstance(exc, StoreClientError):
        return exc
    refused = next((error for error in (exc, exc.__cause__)
                    if isinstance(error, redis_errors.AuthenticationError)), None)
    if refused is not None:  # Redis's refusal, as our client reports it
        code = "NOAUTH" if "required" in str(refused).lower() else "WRONGPASS"
        return StoreReplyError(f"{code} {refused} (Redis Cluster)")
    if isinstance(exc, redis_errors.TimeoutError):
        return StoreTimeout(message)
    if isinstance(exc, (redis_errors.ClusterDownError, redis_errors.TryAgainError,
                        redis_errors.AskError)):
        return StoreConnectionError(message)
    if isinstance(exc, redis_errors.ResponseError):
        return StoreReplyError(str(exc))
    if isinstance(exc, (redis_errors.RedisError, redis_errors.RedisClusterException,
                        OSError)):
        return StoreConnectionError(message)
    return StoreConnectionError(f"{message} ({type(exc).__name__})")
