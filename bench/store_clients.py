"""The CPU per command of the services' store clients against the libraries they replaced.

    socialbench bench store-clients [--commands 20000] [--callers 1 --callers 8]
                                    [--store redis --store memcached --store mongodb]

Starts a redis-server, a memcached and a MongoDB server (``mongod``, else FerretDB) on
free ports and sends each the commands the services send it, from the services' client
and from the library it replaced, configured as the services configured it: Redis
``ZREVRANGE`` (redis-py; ``--store redis-cluster``: 3 masters, reads and a 500-key
fan-out), memcached ``get`` of 10 keys (aiomcache; and the pool of 3 servers), MongoDB
``insert`` and ``find`` of a post (PyMongo, and our PyMongo adapter; plain and with
SCRAM). From 1 caller and concurrent ones, under uvloop, this process's CPU per command
(not the stores'). Results go to ``results/bench-store-clients-<time>.json``; what was
measured is in docs/stores.md and docs/performance.md.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import uvloop

from socialbench.bench.results import write_results
from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.memcached_pool import MemcachedPool
from socialbench.runtime.mongodb_client import Collection, MongoClient
from socialbench.runtime.mongodb_pymongo import MongoDB, PyMongoClient, PyMongoCollection
from socialbench.runtime.redis_client import RedisClient, parse_redis_urls
from socialbench.runtime.redis_cluster import ClusterRedis
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    form_redis_cluster,
    free_port,
    free_ports,
    memcached_command,
    mongodb_command,
    mongodb_flavour,
    redis_cluster_commands,
    redis_command,
)

TIMELINE_KEY = "bench:timeline"
TIMELINE_MEMBERS = 100
POST_KEYS = tuple(f"bench:post:{i}".encode() for i in range(10))
POST = b'{"post_id":"123","text":"' + b"x" * 245 + b'"}'
POST_DOCUMENT = {"creator": {"user_id": 5, "username": "username_5"}, "req_id": 1,
                 "text": "x" * 180, "user_mentions": [], "media": [], "urls": [],
                 "timestamp": 1_700_000_000_000, "post_type": 0}
TIMEOUT_S = 10.0
POOL_SIZE = 64
POOL_SERVERS = 3  # memcached servers of the pool's rows
CLUSTER_MASTERS = 3  # of the Redis Cluster's rows
FAN_OUT_KEYS = 500  # home timelines a fan-out row writes
# Commands that stand for many (a fan-out for its keys): run config.commands / weight times.
COMMAND_WEIGHTS = {"fan-out": FAN_OUT_KEYS}
OUR_BOUNDS: dict[str, Any] = {"max_connections": POOL_SIZE, "connect_timeout_s": TIMEOUT_S,
                               "call_timeout_s": TIMEOUT_S}

BENCH_USER = ("bench", "bench-password")  # FerretDB's user with authentication on
Command = Callable[[], Awaitable[object]]
ClientsOf = AbstractAsyncContextManager[dict[tuple[str, str], Command]]
STORES = ("redis", "redis-cluster", "memcached", "mongodb")


@dataclass(frozen=True)
class StoreClientsBench:
    """What to run: commands per measurement, the caller counts, warm-up commands, the
    stores whose clients are measured."""

    commands: int = 20_000
    callers: tuple[int, ...] = (1, 8)
    warmup_commands: int = 1_000
    stores: tuple[str, ...] = STORES
    results_dir: Path = field(default=Path("results"))


@dataclass(frozen=True)
class ClientRow:
    store: str
    command: str
    client: str
    callers: int
    commands: int
    cpu_us_per_command: float
    commands_per_s: float


async def measure_one(store: str, name: str, client: str, command: Command, callers: int,
                      config: StoreClientsBench) -> ClientRow:
    """``config.commands`` commands split over ``callers`` concurrent loops."""
    for _ in range(config.warmup_commands):
        await command()
    per_caller = config.commands // callers

    async def caller() -> None:
        for _ in range(per_caller):
            await command()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sent = per_caller * callers
    row = ClientRow(store, name, client, callers, sent, round(cpu / sent * 1e6, 2),
                    round(sent / wall))
    print(f"{store:9s} {name:9s} {client:31s} {callers:2d} callers  "
          f"{row.cpu_us_per_command:7.1f} µs CPU "
          f"per command  {row.commands_per_s:8.0f} commands/s", flush=True)
    return row


@asynccontextmanager
async def redis_clients(server: ServerCommand) -> AsyncIterator[dict[tuple[str, str], Command]]:
    import redis.asyncio as aioredis

    ours = RedisClient(server.host, server.port, **OUR_BOUNDS)
    library = aioredis.Redis.from_pool(aioredis.BlockingConnectionPool(
        host=server.host, port=server.port, max_connections=POOL_SIZE, timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S))
    try:
        await ours.delete(TIMELINE_KEY)
        await ours.zadd(TIMELINE_KEY, {f"{n}": n for n in range(TIMELINE_MEMBERS)})
        yield {("zrevrange", "redis-py (blocking pool)"):
               lambda: library.zrevrange(TIMELINE_KEY, 0, 9),
               ("zrevrange", "socialbench RedisClient"):
               lambda: ours.zrevrange(TIMELINE_KEY, 0, 9)}
    finally:
        await ours.close()
        await library.aclose()


@asynccontextmanager
async def redis_cluster_clients(
    nodes: list[ServerCommand], server: ServerCommand,
) -> AsyncIterator[dict[tuple[str, str], Command]]:
    """A timeline read and a fan-out on the cluster of ``nodes``, from redis-py's cluster
    client and ours, and from our client of one ``server``."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    library = RedisCluster(startup_nodes=[ClusterNode(node.host, node.port) for node in nodes],
                           max_connections=POOL_SIZE, socket_connect_timeout=TIMEOUT_S,
                           socket_timeout=TIMEOUT_S)
    ours = ClusterRedis(parse_redis_urls(",".join(f"redis://{node.address}" for node in nodes)),
                        **OUR_BOUNDS)
    one = RedisClient(server.host, server.port, **OUR_BOUNDS)
    timelines = [f"bench:{n}:home-timeline" for n in range(FAN_OUT_KEYS)]
    fan_out: tuple[str, int, int] = ("ZADD", 1_700_000_000_000, 123)  # a post, at its time

    async def library_fan_out() -> None:
        pipeline = library.pipeline()
        for key in timelines:
            pipeline.execute_command(fan_out[0], key, *fan_out[1:])
        await pipeline.execute()

    try:
        await library.initialize()
        for client in (ours, one):
            await client.zadd(TIMELINE_KEY, {f"{n}": n for n in range(TIMELINE_MEMBERS)})
        yield {("zrevrange", "redis-py RedisCluster"):
               lambda: library.zrevrange(TIMELINE_KEY, 0, 9),
               ("zrevrange", "socialbench ClusterRedis"):
               lambda: ours.zrevrange(TIMELINE_KEY, 0, 9),
               ("zrevrange", "socialbench RedisClient, 1 server"):
               lambda: one.zrevrange(TIMELINE_KEY, 0, 9),
               ("fan-out", "redis-py ClusterPipeline"): library_fan_out,
               ("fan-out", "socialbench ClusterRedis"):
               lambda: ours.each_key(timelines, fan_out),
               ("fan-out", "socialbench RedisClient, 1 server"):
               lambda: one.each_key(timelines, fan_out)}
    finally:
        await ours.close()
        await one.close()
        await library.aclose()


@asynccontextmanager
async def memcached_clients(
    server: ServerCommand, pool_servers: list[ServerCommand],
) -> AsyncIterator[dict[tuple[str, str], Command]]:
    import aiomcache

    ours = MemcachedClient(server.host, server.port, **OUR_BOUNDS)
    library = aiomcache.Client(server.host, server.port, pool_size=POOL_SIZE)
    pool = MemcachedPool([MemcachedClient(s.host, s.port, **OUR_BOUNDS, reconnect_for_s=0.0)
                          for s in pool_servers])
    one_key = POST_KEYS[0]
    pool_name = f"socialbench MemcachedPool of {len(pool_servers)}"
    try:
        for key in POST_KEYS:
            await ours.set(key, POST)
            await pool.set(key, POST)
        yield {("get", "aiomcache"): lambda: library.multi_get(*POST_KEYS),
               ("get", "socialbench MemcachedClient"): lambda: ours.multi_get(*POST_KEYS),
               ("get", pool_name): lambda: pool.multi_get(*POST_KEYS),
               ("get 1", "socialbench MemcachedClient"): lambda: ours.get(one_key),
               ("get 1", pool_name): lambda: pool.get(one_key)}
    finally:
        await ours.close()
        await library.close()
        await pool.close()


@asynccontextmanager
async def mongodb_clients(
    server: ServerCommand, auth_server: ServerCommand | None,
) -> AsyncIterator[dict[tuple[str, str], Command]]:
    """Each MongoDB client's ``insert`` and ``find``: PyMongo as the services once had it,
    then ours and the PyMongo adapter (runtime/mongodb_pymongo.py), on ``server`` and, with
    SCRAM-SHA-256 credentials, on ``auth_server`` (none with mongod: no user at start)."""
    from pymongo import AsyncMongoClient

    library: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        f"mongodb://{server.address}", maxPoolSize=POOL_SIZE,
        waitQueueTimeoutMS=int(TIMEOUT_S * 1000), serverSelectionTimeoutMS=int(TIMEOUT_S * 1000),
        connectTimeoutMS=int(TIMEOUT_S * 1000), socketTimeoutMS=int(TIMEOUT_S * 1000))
    clients: dict[str, MongoDB] = {
        "socialbench MongoClient": MongoClient.from_url(
            f"mongodb://{server.address}", **OUR_BOUNDS),
        "PyMongoClient (adapter)": PyMongoClient.from_url(
            f"mongodb://{server.address}", **OUR_BOUNDS),
    }
    if auth_server is not None:
        login = (f"mongodb://{BENCH_USER[0]}:{BENCH_USER[1]}@{auth_server.address}"
                 "/?authSource=admin&authMechanism=SCRAM-SHA-256")
        clients["socialbench MongoClient, SCRAM"] = MongoClient.from_url(login, **OUR_BOUNDS)
        clients["PyMongoClient (adapter), SCRAM"] = PyMongoClient.from_url(login, **OUR_BOUNDS)
    post_ids = itertools.count(1)
    library_posts = library["bench"]["post"]
    commands: dict[tuple[str, str], Command] = {}
    try:
        for name, client in clients.items():
            if not name.startswith("socialbench"):
                continue  # the same servers as ours
            await client["bench"]["post"].create_index("post_id", unique=True)
            await client["bench"]["post"].insert_one({**POST_DOCUMENT, "post_id": 0})
        commands[("insert", "PyMongo AsyncMongoClient")] = (
            lambda: library_posts.insert_one({**POST_DOCUMENT, "post_id": next(post_ids)}))
        commands[("find", "PyMongo AsyncMongoClient")] = (
            lambda: library_posts.find_one({"post_id": 0}, {"_id": 0}))
        for name, client in clients.items():
            posts = client["bench"]["post"]
            commands[("insert", name)] = functools.partial(_insert_post, posts, post_ids)
            commands[("find", name)] = functools.partial(posts.find_one, {"post_id": 0},
                                                         {"_id": 0})
        yield commands
    finally:
        for client in clients.values():
            await client.close()
        await library.close()


async def _insert_post(posts: Collection | PyMongoCollection,
                       post_ids: Iterator[int]) -> None:
    await posts.insert_one({**POST_DOCUMENT, "post_id": next(post_ids)})


async def measure_all(stores: dict[str, ClientsOf], config: StoreClientsBench) -> list[ClientRow]:
    """Each client's commands, store by store."""
    rows = []
    for store, clients_of in stores.items():
        async with clients_of as clients:
            commands = list(dict.fromkeys(name for name, _ in clients))
            for name in commands:
                weight = COMMAND_WEIGHTS.get(name, 1)
                for callers in config.callers:
                    count = replace(config, commands=max(callers, config.commands // weight),
                                    warmup_commands=config.warmup_commands // weight)
                    for (command_name, client), command in clients.items():
                        if command_name == name:
                            rows.append(await measure_one(store, name, client, command,
                                                          callers, count))
    return rows


def run(config: StoreClientsBench) -> Path:
    """Start the stores, measure, print and write the rows; the file."""
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as data:
        servers: list[ServerCommand] = []
        stores: dict[str, ClientsOf] = {}
        if "redis" in config.stores:
            redis = redis_command(free_port(), Path(data) / "redis")
            servers.append(redis)
            stores["redis"] = redis_clients(redis)
        cluster: list[ServerCommand] = []
        if "redis-cluster" in config.stores:
            ports = free_ports(2 * CLUSTER_MASTERS + 1)
            cluster = redis_cluster_commands(ports[:CLUSTER_MASTERS], Path(data) / "cluster",
                                             bus_ports=ports[CLUSTER_MASTERS:-1])
            one_server = redis_command(ports[-1], Path(data) / "redis-one")
            servers += [*cluster, one_server]
            stores["redis-cluster"] = redis_cluster_clients(cluster, one_server)
        if "memcached" in config.stores:
            memcached = [memcached_command(port, memory_mb=64, threads=1)
                         for port in free_ports(POOL_SERVERS)]
            servers += memcached
            stores["memcached"] = memcached_clients(memcached[0], memcached)
        if "mongodb" in config.stores:
            mongodb = mongodb_command(free_port(), Path(data) / "mongodb")
            servers.append(mongodb)
            with_user = None
            if mongodb_flavour() == "ferretdb":
                with_user = mongodb_command(free_port(), Path(data) / "mongodb-auth",
                                            user=BENCH_USER)
                servers.append(with_user)
            stores["mongodb"] = mongodb_clients(mongodb, with_user)
        processes = [ServerProcess(command, Path(data) / f"{command.name}-{command.port}.log")
                     for command in servers]
        try:
            for process in processes:
                process.wait_ready()
            if cluster:
                form_redis_cluster([node.address for node in cluster], 0)
            rows = uvloop.run(measure_all(stores, config))
        finally:
            for process in processes:
                process.stop()
    path = write_results(config.results_dir, "store-clients", {
        "commands": {"redis": f"ZREVRANGE of 10 of {TIMELINE_MEMBERS} members",
                     "redis-cluster": f"the same ZREVRANGE on {CLUSTER_MASTERS} masters (and "
                                      f"one server); fan-out: ZADD on {FAN_OUT_KEYS} keys, "
                                      "one row a fan-out",
                     "memcached": f"get of {len(POST_KEYS)} keys of {len(POST)} bytes (get 1: "
                                  f"of one key); the pool over {POOL_SERVERS} servers",
                     "mongodb": "insert of a post (a new post_id, unique index); find of one "
                                "post by post_id; SCRAM: FerretDB with authentication on, "
                                "SCRAM-SHA-256"},
        "pool_size": POOL_SIZE, "load_average_after": os.getloadavg(),
        "rows": [asdict(row) for row in rows],
    })
    print(f"written {path}")
    return path
