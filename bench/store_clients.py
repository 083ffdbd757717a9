"""The CPU per command of the services' store clients against the libraries they replaced.

    socialbench bench store-clients [--commands 20000] [--callers 1 --callers 8]

A redis-server, a memcached and a MongoDB server (``mongod`` if on PATH, else FerretDB) are
started on free ports. Each store gets the commands the services send it, from the
services' client and from the library it replaced, configured as the services configured
it:

- Redis: ``ZREVRANGE key 0 9`` of a sorted set of 100 members; redis-py's asyncio client
  with a blocking pool (the hiredis parser, the same bounds).
- memcached: a ``get`` of 10 keys of 270 bytes (post-storage's page of posts); aiomcache
  with its own pool (the services added bounds to it, which cost more). And the pool of
  servers (``runtime/memcached_pool.py``) over 3 memcached: the same ``get``, split over
  them, and a ``get`` of one key, beside the one server's client.
- MongoDB: an ``insert`` of a post (a new ``post_id`` under a unique index, as
  post-storage stores one), and a ``find`` of one post by that index; PyMongo's
  ``AsyncMongoClient`` with the services' old pool and bounds.

Each runs from 1 caller and from concurrent callers, under uvloop. The CPU seconds of this
process (user + system) over the run are divided by the commands; the stores' CPU is not
counted. Results go to ``results/bench-store-clients-<time>.json``. Not a test: the numbers
depend on the machine (the load average is printed).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.memcached_pool import MemcachedPool
from socialbench.runtime.mongodb_client import MongoClient
from socialbench.runtime.redis_client import RedisClient
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_port,
    free_ports,
    memcached_command,
    mongodb_command,
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
OUR_BOUNDS: dict[str, Any] = {"max_connections": POOL_SIZE, "connect_timeout_s": TIMEOUT_S,
                               "call_timeout_s": TIMEOUT_S}

Command = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class StoreClientsBench:
    """What to run: commands per measurement, the caller counts, warm-up commands."""

    commands: int = 20_000
    callers: tuple[int, ...] = (1, 8)
    warmup_commands: int = 1_000
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
    print(f"{store:9s} {name:9s} {client:27s} {callers:2d} callers  "
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
    server: ServerCommand,
) -> AsyncIterator[dict[tuple[str, str], Command]]:
    from pymongo import AsyncMongoClient

    ours = MongoClient(server.host, server.port, **OUR_BOUNDS)
    library: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        f"mongodb://{server.address}", maxPoolSize=POOL_SIZE,
        waitQueueTimeoutMS=int(TIMEOUT_S * 1000), serverSelectionTimeoutMS=int(TIMEOUT_S * 1000),
        connectTimeoutMS=int(TIMEOUT_S * 1000), socketTimeoutMS=int(TIMEOUT_S * 1000))
    posts, library_posts = ours["bench"]["post"], library["bench"]["post"]
    post_ids = itertools.count(1)
    try:
        await posts.create_index("post_id", unique=True)
        await posts.insert_one({**POST_DOCUMENT, "post_id": 0})
        yield {
            ("insert", "PyMongo AsyncMongoClient"):
            lambda: library_posts.insert_one({**POST_DOCUMENT, "post_id": next(post_ids)}),
            ("insert", "socialbench MongoClient"):
            lambda: posts.insert_one({**POST_DOCUMENT, "post_id": next(post_ids)}),
            ("find", "PyMongo AsyncMongoClient"):
            lambda: library_posts.find_one({"post_id": 0}, {"_id": 0}),
            ("find", "socialbench MongoClient"):
            lambda: posts.find_one({"post_id": 0}, {"_id": 0}),
        }
    finally:
        await ours.close()
        await library.close()


async def measure_all(redis: ServerCommand, memcached: list[ServerCommand],
                      mongodb: ServerCommand, config: StoreClientsBench) -> list[ClientRow]:
    """Each client's commands; ``memcached``: the one server, then the others of the pool."""
    rows = []
    for store, clients_of in (("redis", redis_clients(redis)),
                              ("memcached", memcached_clients(memcached[0], memcached)),
                              ("mongodb", mongodb_clients(mongodb))):
        async with clients_of as clients:
            commands = list(dict.fromkeys(name for name, _ in clients))
            for name in commands:
                for callers in config.callers:
                    for (command_name, client), command in clients.items():
                        if command_name == name:
                            rows.append(await measure_one(store, name, client, command,
                                                          callers, config))
    return rows


def run(config: StoreClientsBench) -> Path:
    """Start the stores, measure, print and write the rows; the file."""
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as data:
        redis = redis_command(free_port(), Path(data) / "redis")
        memcached = [memcached_command(port, memory_mb=64, threads=1)
                     for port in free_ports(POOL_SERVERS)]
        mongodb = mongodb_command(free_port(), Path(data) / "mongodb")
        servers = [ServerProcess(command, Path(data) / f"{command.name}-{command.port}.log")
                   for command in (redis, *memcached, mongodb)]
        try:
            for server in servers:
                server.wait_ready()
            rows = uvloop.run(measure_all(redis, memcached, mongodb, config))
        finally:
            for server in servers:
                server.stop()
    config.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = config.results_dir / f"bench-store-clients-{stamp}.json"
    path.write_text(json.dumps({
        "commands": {"redis": f"ZREVRANGE of 10 of {TIMELINE_MEMBERS} members",
                     "memcached": f"get of {len(POST_KEYS)} keys of {len(POST)} bytes (get 1: "
                                  f"of one key); the pool over {POOL_SERVERS} servers",
                     "mongodb": "insert of a post (a new post_id, unique index); find of one "
                                "post by post_id"},
        "pool_size": POOL_SIZE, "load_average_after": os.getloadavg(),
        "rows": [asdict(row) for row in rows],
    }, indent=1))
    print(f"written {path}")
    return path
