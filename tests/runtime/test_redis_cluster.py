"""The services' Redis Cluster client on a real cluster of Debian's redis-server: 3 masters
and 3 replicas on free ports (issue 28, item 3)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from redis.crc import key_slot

from socialbench.registry import Store
from socialbench.runtime.pipelining import StoreConnectionError, StoreReplyError
from socialbench.runtime.redis_client import RedisClient, parse_redis_urls
from socialbench.runtime.redis_cluster import ClusterRedis
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    form_redis_cluster,
    free_port,
    free_ports,
    redis_cluster_commands,
)
from tests.conftest import redis_cluster_running

BOUNDS = {"connect_timeout_s": 1.0, "call_timeout_s": 2.0}


def cluster_url(nodes: list[ServerCommand]) -> str:
    return ",".join(f"redis://{node.address}" for node in nodes)


def client_of(nodes: list[ServerCommand], **options: object) -> ClusterRedis:
    """A client that knows of the cluster's first node only (it finds the others)."""
    return ClusterRedis(parse_redis_urls(cluster_url(nodes[:1])), max_connections=8,
                        **BOUNDS, **options)  # type: ignore[arg-type]


@pytest.fixture
async def cluster(redis_cluster: list[ServerCommand]) -> AsyncIterator[ClusterRedis]:
    client = client_of(redis_cluster)
    yield client
    await client.close()


@pytest.fixture
async def nodes(redis_cluster: list[ServerCommand]) -> AsyncIterator[dict[str, RedisClient]]:
    """A plain client of each node, by address."""
    clients = {node.address: RedisClient(node.host, node.port, max_connections=2, **BOUNDS)
               for node in redis_cluster}
    yield clients
    for client in clients.values():
        await client.close()


def unique(name: str) -> str:
    return f"{name}:{uuid.uuid4().hex}"


async def cluster_nodes(node: RedisClient) -> list[dict[str, str]]:
    """``CLUSTER NODES`` of ``node``: each node's id, address, flags and master's id."""
    lines = (await node.execute_command("CLUSTER", "NODES")).decode().splitlines()
    found = []
    for line in lines:
        node_id, address, flags, master = line.split()[:4]
        found.append({"id": node_id, "address": address.split("@")[0],
                      "flags": flags, "master": master})
    return found


async def slot_owners(node: RedisClient) -> dict[int, str]:
    """The address of the master of each slot, as ``node`` sees it."""
    owners = {}
    for start, end, master, *_ in await node.execute_command("CLUSTER", "SLOTS"):
        owners.update(dict.fromkeys(range(start, end + 1), f"{master[0].decode()}:{master[1]}"))
    return owners


async def owner_of(node: RedisClient, key: str) -> str:
    """The address of the master that serves ``key``'s slot, as ``node`` sees it."""
    return (await slot_owners(node))[key_slot(key.encode())]


async def test_the_services_commands_answer_as_on_one_server(cluster: ClusterRedis) -> None:
    key, zset, other = unique("k"), unique("z"), unique("o")
    assert await cluster.ping()
    assert await cluster.set(key, "v")
    assert not await cluster.set(key, "other", nx=True)
    assert await cluster.get(key) == b"v"
    assert await cluster.zadd(zset, {b"~marker": float("-inf"), "a": 1, "b": 2}) == 3
    assert await cluster.zadd(zset, {"a": 5}, nx=True) == 0
    assert await cluster.zrevrange(zset, 0, -1) == [b"b", b"a", b"~marker"]
    assert await cluster.zrange(zset, 0, 0) == [b"~marker"]
    assert await cluster.zscore(zset, "a") == 1.0
    assert await cluster.zscore(zset, "~marker") == float("-inf")
    assert await cluster.zscore(zset, "missing") is None
    assert await cluster.zcard(zset) == 3
    assert await cluster.zrem(zset, "a", "missing") == 1
    # Keys of several slots in one call: split by slot, answered as one server would.
    assert await cluster.exists(key, zset, other) == 2
    assert await cluster.delete(key, zset, other) == 2
    assert await cluster.get(key) is None
    fan_out = cluster.script("return redis.call('SET', KEYS[1], ARGV[1])")
    assert await fan_out([key], ["by script"]) == b"OK"
    assert await cluster.get(key) == b"by script"
    assert cluster.counters()["fallbacks"] == 0  # every command went to its master directly


async def test_a_pipeline_over_several_masters_answers_in_order(
    cluster: ClusterRedis, nodes: dict[str, RedisClient],
) -> None:
    # user-timeline's and social-graph's pipelines: a user's key and a flag of its own. A
    # random user's keys all fall on one master one time in nine: one whose do not is found.
    node = next(iter(nodes.values()))
    for _ in range(50):
        user = unique("user")
        commands = [("ZADD", f"{user}:followees", "NX", 1, "a"), ("ZADD", user, 2, "p"),
                    ("ZREVRANGE", user, 0, -1), ("ZSCORE", user, "missing"),
                    ("EXISTS", "user-timeline:whole"), ("ZRANGE", f"{user}:followees", 0, -1)]
        if len({await owner_of(node, str(command[1])) for command in commands}) > 1:
            break
    else:
        pytest.fail("no user of 50 had keys on several masters")
    assert await cluster.pipeline(*commands) == [1, 1, [b"p"], None, 0, [b"a"]]
    await cluster.set(f"{user}:string", "s")
    with pytest.raises(StoreReplyError, match="WRONGTYPE"):
        await cluster.pipeline(("ZADD", f"{user}:string", 1, "x"), ("SET", f"{user}:after", 1))
    assert await cluster.get(f"{user}:after") == b"1"  # the pipeline's others were run


async def test_each_key_reaches_keys_on_every_master(
    redis_cluster: list[ServerCommand], cluster: ClusterRedis, nodes: dict[str, RedisClient],
) -> None:
    post = unique("post")
    timelines = [f"{unique('u')}:home-timeline" for _ in range(1207)]  # 3 batches of 500
    await cluster.each_key(timelines, ["ZADD", 1_700_000_000_000, post])
    # Read back from each master itself: every key is there, and every master has some.
    stored_on: dict[str, int] = {}
    owners = await slot_owners(nodes[redis_cluster[0].address])
    for master in redis_cluster[:3]:
        own = [key for key in timelines if owners[key_slot(key.encode())] == master.address]
        scores = await nodes[master.address].pipeline(*(("ZSCORE", key, post) for key in own))
        stored_on[master.address] = sum(score is not None for score in scores)
    assert sum(stored_on.values()) == len(timelines)
    assert all(count > 0 for count in stored_on.values()), stored_on
    assert cluster.counters()["fallbacks"] == 0

    await cluster.each_key(timelines, ["ZREM", post])
    assert [await cluster.zcard(key) for key in timelines[::100]] == [0] * 13
    await cluster.set(timelines[0], "not a sorted set")
    with pytest.raises(StoreReplyError, match="WRONGTYPE"):
        await cluster.each_key(timelines[:3], ["ZADD", 1, post])
    assert await cluster.zscore(timelines[2], post) == 1.0  # the other keys were done


async def test_a_fan_out_to_a_master_away_goes_through_redis_py_at_once_a_pipeline_in_order(
    redis_cluster: list[ServerCommand], cluster: ClusterRedis, nodes: dict[str, RedisClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_flight, most = 0, {"each_key": 0, "pipeline": 0}
    sent_by_redis_py = cluster._by_redis_py
    phase = "each_key"

    async def counted(args: Any) -> Any:
        nonlocal in_flight
        in_flight += 1
        most[phase] = max(most[phase], in_flight)
        try:
            await asyncio.sleep(0.001)  # a round trip: the others may start meanwhile
            return await sent_by_redis_py(args)
        finally:
            in_flight -= 1

    monkeypatch.setattr(cluster, "_by_redis_py", counted)
    await cluster.ping()
    away = redis_cluster[0].address
    monkeypatch.setitem(cluster._away_until, away, time.monotonic() + 60)  # as after an error
    owners = await slot_owners(nodes[away])
    timelines = [f"{unique('u')}:home-timeline" for _ in range(60)]
    there = [key for key in timelines if owners[key_slot(key.encode())] == away]
    assert len(there) > 2, "the test needs several keys on the master away"
    await cluster.each_key(timelines, ["ZADD", 1, "post"])
    assert [await nodes[away].zscore(key, "post") for key in there] == [1.0] * len(there)
    assert most["each_key"] > 1
    phase = "pipeline"
    user = there[0]
    assert await cluster.pipeline(("ZADD", user, 2, "p"), ("ZREM", user, "post"),
                                  ("ZREVRANGE", user, 0, -1)) == [1, 1, [b"p"]]
    assert most["pipeline"] == 1  # one after the other: the same key's commands in order


async def test_a_slot_moved_to_another_master_is_followed(
    redis_cluster: list[ServerCommand], cluster: ClusterRedis, nodes: dict[str, RedisClient],
) -> None:
    key = unique("moving")
    await cluster.set(key, "before")  # the client has read the slot map
    first = nodes[redis_cluster[0].address]
    slot, source = key_slot(key.encode()), await owner_of(first, key)
    target = next(m.address for m in redis_cluster[:3] if m.address != source)
    ids = {node["address"]: node["id"] for node in await cluster_nodes(first)}
    target_host, _, target_port = target.rpartition(":")
    await nodes[target].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
    await nodes[source].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
    await nodes[source].execute_command("MIGRATE", target_host, target_port, "", 0, 5000,
                                        "KEYS", key)

    # Midway, the source answers ASK for the key: it is asked of the target.
    fallbacks = cluster.counters()["fallbacks"]
    assert await cluster.get(key) == b"before"
    assert await cluster.set(key, "during")
    assert cluster.counters()["fallbacks"] == fallbacks + 2
    with pytest.raises(StoreReplyError, match="MOVED"):  # the target's, without ASKING
        await nodes[target].get(key)

    for master in (target, source, *(m.address for m in redis_cluster[:3])):
        await nodes[master].execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])
    fallbacks = cluster.counters()["fallbacks"]
    assert await cluster.get(key) == b"during"  # MOVED: redis-py follows, learns the slot
    assert cluster.counters()["fallbacks"] == fallbacks + 1
    assert await cluster.pipeline(("GET", key), ("SET", key, "after")) == [b"during", b"OK"]
    await cluster.each_key([key + ":z", unique("other")], ["ZADD", 1, "m"])
    assert await cluster.get(key) == b"after"
    assert cluster.counters()["fallbacks"] == fallbacks + 1  # now to the new master directly


async def test_settings_in_cluster_mode_give_the_services_a_cluster_client(
    redis_cluster: list[ServerCommand],
) -> None:
    settings = Settings(redis_mode="cluster", redis_url=cluster_url(redis_cluster[:2]),
                        store_connect_timeout_s=1.0, store_call_timeout_s=1.0)
    stores = Stores.connect(settings, (Store.REDIS,))
    unreachable = Stores.connect(
        Settings(redis_mode="cluster", redis_url=f"redis://127.0.0.1:{free_port()}",
                 store_connect_timeout_s=1.0, store_call_timeout_s=1.0), (Store.REDIS,))
    try:
        redis = stores.require_redis()
        assert isinstance(redis, ClusterRedis)
        assert await stores.health() == {"redis": "ok"}
        await redis.each_key([unique("a"), unique("b")], ["ZADD", 1, "m"])
        assert (await unreachable.health())["redis"].startswith("error")
        with pytest.raises(StoreConnectionError, match="Redis Cluster"):
            await unreachable.require_redis().get("k")
    finally:
        await stores.close()
        await unreachable.close()


async def test_a_cluster_with_a_password_is_used_with_it_and_refuses_a_wrong_one(
    tmp_path: Path,
) -> None:
    with redis_cluster_running(tmp_path, masters=1, replicas_per_master=0,
                               password="cluster-secret") as servers:
        node = servers[0].command
        right = ClusterRedis(parse_redis_urls(f"redis://:cluster-secret@{node.address}"),
                             max_connections=2, **BOUNDS)
        wrong = ClusterRedis(parse_redis_urls(f"redis://:not-it@{node.address}"),
                             max_connections=2, **BOUNDS)
        try:
            assert await right.ping()
            await right.each_key([unique("a"), unique("b")], ["ZADD", 1, "m"])
            with pytest.raises(StoreReplyError, match=r"^WRONGPASS"):
                await wrong.ping()
        finally:
            await right.close()
            await wrong.close()


async def test_a_traced_cluster_client_makes_spans_and_its_counts_reach_stats(
    redis_cluster: list[ServerCommand],
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    settings = Settings(redis_mode="cluster", redis_url=cluster_url(redis_cluster[:1]),
                        store_connect_timeout_s=1.0, store_call_timeout_s=1.0)
    stores = Stores.connect(settings, (Store.REDIS,), tracer=tracer)
    try:
        redis = stores.require_redis()
        with tracer.start_as_current_span("request", kind=SpanKind.SERVER):
            await redis.each_key([unique("a"), unique("b")], ["ZADD", 1, "m"])
            await redis.zrevrange(unique("a"), 0, 9)
            await redis.execute_command("DBSIZE")  # no key: sent by redis-py
        assert stores.counters() == {"redis": {"fallbacks": 1, "short_waits": 0,
                                               "unconfirmed_writes": 0}}
        assert (await stores.describe())["redis"] == {
            "client": "socialbench, with redis-py's slot map and redirects",
            "topology": "cluster of 3 masters"}
    finally:
        await stores.close()
        exporter.shutdown()
    names = [span.name for span in exporter.get_finished_spans()]
    assert {"redis each_key ZADD", "redis ZREVRANGE", "redis DBSIZE", "request"} <= set(names)


async def test_a_client_started_before_the_cluster_is_formed_serves_once_it_is(
    tmp_path: Path,
) -> None:
    """As in a chart's install: the services start while the Job still forms the cluster."""
    ports = free_ports(12)
    commands = redis_cluster_commands(ports[:6], tmp_path, bus_ports=ports[6:])
    servers = [ServerProcess(command, tmp_path / f"{command.name}.log") for command in commands]
    client = client_of(commands)
    try:
        for server in servers:
            server.wait_ready()
        for _ in range(2):
            with pytest.raises(StoreConnectionError):
                await client.ping()

        form_redis_cluster([command.address for command in commands], 1)

        assert await client.ping()
        key = unique("formed")
        await client.execute_command("SET", key, b"1")
        assert await client.execute_command("GET", key) == b"1"
    finally:
        await client.close()
        for server in servers:
            server.stop()
