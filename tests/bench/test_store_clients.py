"""bench store-clients: each client sends every command to a real store, its CPU measured."""

from __future__ import annotations

import json
from pathlib import Path

from socialbench.bench.store_clients import StoreClientsBench, run


def test_every_client_is_measured_at_each_caller_count(tmp_path: Path) -> None:
    config = StoreClientsBench(commands=300, callers=(1, 4), warmup_commands=10,
                               results_dir=tmp_path)

    rows = json.loads(run(config).read_text())["rows"]

    redis, memcached = "redis-py (blocking pool)", "aiomcache"
    ours, pymongo = "socialbench MongoClient", "PyMongo AsyncMongoClient"
    client, pool = "socialbench MemcachedClient", "socialbench MemcachedPool of 3"
    assert [(row["store"], row["command"], row["client"], row["callers"]) for row in rows] == [
        ("redis", "zrevrange", redis, 1), ("redis", "zrevrange", "socialbench RedisClient", 1),
        ("redis", "zrevrange", redis, 4), ("redis", "zrevrange", "socialbench RedisClient", 4),
        ("memcached", "get", memcached, 1), ("memcached", "get", client, 1),
        ("memcached", "get", pool, 1),
        ("memcached", "get", memcached, 4), ("memcached", "get", client, 4),
        ("memcached", "get", pool, 4),
        ("memcached", "get 1", client, 1), ("memcached", "get 1", pool, 1),
        ("memcached", "get 1", client, 4), ("memcached", "get 1", pool, 4),
        ("mongodb", "insert", pymongo, 1), ("mongodb", "insert", ours, 1),
        ("mongodb", "insert", pymongo, 4), ("mongodb", "insert", ours, 4),
        ("mongodb", "find", pymongo, 1), ("mongodb", "find", ours, 1),
        ("mongodb", "find", pymongo, 4), ("mongodb", "find", ours, 4),
    ]
    for row in rows:
        assert row["commands"] == 300, row
        assert row["cpu_us_per_command"] > 0 and row["commands_per_s"] > 0, row
