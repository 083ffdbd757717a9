"""Redis as a primary and a replica, both real redis-servers: writes to the primary, reads
from the replica, a read after a write seeing it, and reads on the primary while the
replica is away or behind (issue 28, item 2)."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from socialbench.registry import Store
from socialbench.runtime import redis_replicated
from socialbench.runtime.pipelining import StoreReplyError
from socialbench.runtime.redis_client import RedisClient
from socialbench.runtime.redis_replicated import ReplicatedRedis
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_port,
    free_ports,
    redis_command,
    redis_replica_command,
    wait_replicas_linked,
)

BOUNDS = {"connect_timeout_s": 1.0, "call_timeout_s": 2.0}


def settings_of(primary: ServerCommand, replica: ServerCommand, **more: object) -> Settings:
    return Settings(redis_mode="replicated", redis_url=f"redis://{primary.address}/0",
                    redis_replica_urls=f"redis://{replica.address}/0",
                    store_connect_timeout_s=1.0, store_call_timeout_s=2.0,
                    **more)  # type: ignore[arg-type]


async def connect(settings: Settings) -> ReplicatedRedis:
    redis = Stores.connect(settings, (Store.REDIS,)).require_redis()
    assert isinstance(redis, ReplicatedRedis)
    return redis


def unique(name: str) -> str:
    return f"{name}:{uuid.uuid4().hex}"


async def calls(server: ServerCommand, command: str) -> int:
    """How many ``command``s ``server`` has run (INFO commandstats)."""
    client = RedisClient(server.host, server.port, max_connections=1, **BOUNDS)
    try:
        info = (await client.execute_command("INFO", "commandstats")).decode()
    finally:
        await client.close()
    for line in info.splitlines():
        if line.startswith(f"cmdstat_{command.lower()}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


@pytest.fixture
def own_pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A primary and a replica of this test's own (it stops and starts them)."""
    primary_port, replica_port = free_ports(2)
    primary = redis_command(primary_port, tmp_path / "primary")
    replica = redis_replica_command(replica_port, tmp_path / "replica", primary.address)
    with ExitStack() as stops:
        servers = []
        for command in (primary, replica):
            server = ServerProcess(command, tmp_path / f"{command.name}.log")
            stops.callback(server.stop)
            servers.append(server)
        for server in servers:
            server.wait_ready()
        wait_replicas_linked([replica.address])
        yield servers[0], servers[1]


@pytest.fixture
async def redis(
    redis_primary_and_replica: tuple[ServerCommand, ServerCommand],
) -> AsyncIterator[ReplicatedRedis]:
    # A WAIT that waits long enough for a busy machine's replica: no read leaves it.
    client = await connect(settings_of(*redis_primary_and_replica, redis_wait_timeout_ms=5000))
    yield client
    await client.close()


async def test_writes_go_to_the_primary_and_reads_to_the_replica(
    redis_primary_and_replica: tuple[ServerCommand, ServerCommand], redis: ReplicatedRedis,
) -> None:
    primary, replica = redis_primary_and_replica
    key, zset = unique("k"), unique("z")
    before = {server.address: (await calls(server, "zadd"), await calls(server, "zrevrange"))
              for server in (primary, replica)}
    for n in range(20):  # each read right after its write sees it
        await redis.zadd(zset, {f"post-{n}": n})
        assert (await redis.zrevrange(zset, 0, 0)) == [f"post-{n}".encode()]
        members, score, exists = await redis.pipeline(
            ("ZREVRANGE", zset, 0, -1), ("ZSCORE", zset, f"post-{n}"), ("EXISTS", zset))
        assert (len(members), float(score), exists) == (n + 1, n, 1)
    assert await calls(primary, "zrevrange") == before[primary.address][1]
    assert await calls(replica, "zrevrange") - before[replica.address][1] == 40
    assert await calls(primary, "zadd") - before[primary.address][0] == 20
    assert await calls(replica, "zadd") - before[replica.address][0] == 20  # replicated

    assert await redis.set(key, "v") and await redis.get(key) == b"v"
    assert not await redis.set(key, "w", nx=True)
    await redis.each_key([unique("a"), key + ":z"], ["ZADD", 1, "m"])
    assert await redis.zcard(key + ":z") == 1
    assert redis.counters() == {"short_waits": 0, "unconfirmed_writes": 0,
                                "replica_fallbacks": 0}
    assert redis.describe() == {"client": "socialbench",
                                "topology": "replicated: a primary and 1 replica(s)"}
    assert await redis.ping()


async def test_a_replica_behind_sends_reads_to_the_primary_until_a_wait_reaches_it(
    own_pair: tuple[ServerProcess, ServerProcess],
) -> None:
    primary, replica = own_pair
    redis = await connect(settings_of(primary.command, replica.command,
                                      redis_wait_timeout_ms=1000))
    key = unique("k")
    try:
        await redis.set(key, "one")
        replica.process.send_signal(signal.SIGSTOP)  # it gets no more writes for now
        try:
            assert await redis.set(key, "two")  # acknowledged: on the primary, not the replica
            assert redis.counters()["short_waits"] == 1
            assert redis.reads_on_primary
            gets = await calls(primary.command, "get")
            assert await redis.get(key) == b"two"
            assert await calls(primary.command, "get") == gets + 1
        finally:
            replica.process.send_signal(signal.SIGCONT)
        wait_replicas_linked([replica.command.address])
        assert await redis.set(key, "three")  # its WAIT reaches the replica: reads go back
        assert not redis.reads_on_primary
        gets = await calls(replica.command, "get")
        assert await redis.get(key) == b"three"
        assert await calls(replica.command, "get") == gets + 1
        assert redis.counters()["replica_fallbacks"] == 0
    finally:
        await redis.close()


async def test_a_replica_down_or_unlinked_sends_reads_to_the_primary(
    own_pair: tuple[ServerProcess, ServerProcess], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redis_replicated, "REPLICA_RETRY_S", 0.2)
    primary, replica = own_pair
    redis = await connect(settings_of(primary.command, replica.command,
                                      redis_wait_timeout_ms=1000))
    replica_client = RedisClient(replica.command.host, replica.command.port, max_connections=1,
                                 **BOUNDS)
    key = unique("k")
    try:
        await redis.set(key, "kept")
        # Unlinked: a replica told to follow a primary that is not there refuses reads.
        await replica_client.execute_command("REPLICAOF", "127.0.0.1", free_port())
        assert await redis.get(key) == b"kept"
        assert redis.counters()["replica_fallbacks"] == 1

        # Down: its reads go to the primary, its writes still succeed (their WAIT short).
        replica.process.send_signal(signal.SIGKILL)
        replica.stop()
        for n in range(3):
            assert await redis.set(key, f"write {n}")
            assert await redis.get(key) == f"write {n}".encode()
        assert redis.counters()["short_waits"] == 3
        assert redis.counters()["replica_fallbacks"] >= 1
        assert await redis.ping()

        # Back, synced: the next write's WAIT reaches it, and reads go to it again.
        back = ServerProcess(replica.command, tmp_path / "replica-again.log")
        try:
            back.wait_ready()
            wait_replicas_linked([replica.command.address])
            assert await redis.set(key, "after")
            assert not redis.reads_on_primary
            await asyncio.sleep(redis_replicated.REPLICA_RETRY_S)  # its reads' pause is over
            gets = await calls(replica.command, "get")
            assert await redis.get(key) == b"after"
            assert await calls(replica.command, "get") == gets + 1
        finally:
            back.stop()
    finally:
        await replica_client.close()
        await redis.close()


async def test_a_primary_and_replica_with_a_password_and_a_wrong_one(tmp_path: Path) -> None:
    primary_port, replica_port = free_ports(2)
    primary = redis_command(primary_port, tmp_path / "primary", password="replicated-secret")
    replica = redis_replica_command(replica_port, tmp_path / "replica", primary.address,
                                    password="replicated-secret")
    with ExitStack() as stops:
        for command in (primary, replica):
            server = ServerProcess(command, tmp_path / f"{command.name}.log")
            stops.callback(server.stop)
            server.wait_ready()
        wait_replicas_linked([replica.address], password="replicated-secret")

        def urls(replica_password: str) -> Settings:
            return Settings(redis_mode="replicated",
                            redis_url=f"redis://:replicated-secret@{primary.address}/0",
                            redis_replica_urls=f"redis://:{replica_password}@{replica.address}/0")

        right, wrong = await connect(urls("replicated-secret")), await connect(urls("not-it"))
        try:
            key = unique("k")
            assert await right.set(key, "v") and await right.get(key) == b"v"
            assert right.counters()["replica_fallbacks"] == 0
            with pytest.raises(StoreReplyError, match=r"^WRONGPASS"):
                await wrong.ping()  # the replica's refusal is not hidden behind the primary
        finally:
            await right.close()
            await wrong.close()
