"""bench store-clients: each client sends every command to a real store, its CPU measured."""

from __future__ import annotations

import json
from pathlib import Path

from socialbench.bench.store_clients import StoreClientsBench, run

ONE_SERVER = "socialbench RedisClient, 1 server"
MEMCACHED = ["socialbench MemcachedClient", "socialbench MemcachedPool of 3"]
MONGODB = ["PyMongo AsyncMongoClient", "socialbench MongoClient", "PyMongoClient (adapter)",
           "socialbench MongoClient, SCRAM", "PyMongoClient (adapter), SCRAM"]
# Store -> command -> its clients, in the order they are measured.
CLIENTS = {
    "redis": {"zrevrange": ["redis-py (blocking pool)", "socialbench RedisClient"]},
    "redis-cluster": {
        "zrevrange": ["redis-py RedisCluster", "socialbench ClusterRedis", ONE_SERVER],
        "fan-out": ["redis-py ClusterPipeline", "socialbench ClusterRedis", ONE_SERVER]},
    "memcached": {"get": ["aiomcache", *MEMCACHED], "get 1": MEMCACHED},
    "mongodb": {"insert": MONGODB, "find": MONGODB},
}


def test_every_client_is_measured_at_each_caller_count(tmp_path: Path) -> None:
    config = StoreClientsBench(commands=300, callers=(1, 4), warmup_commands=10,
                               results_dir=tmp_path)

    rows = json.loads(run(config).read_text())["rows"]

    assert [(row["store"], row["command"], row["client"], row["callers"]) for row in rows] == [
        (store, command, client, callers) for store, commands in CLIENTS.items()
        for command, clients in commands.items() for callers in config.callers
        for client in clients]
    for row in rows:
        # A fan-out stands for 500 commands: 300 / 500 of them, at least one per caller.
        expected = row["callers"] if row["command"] == "fan-out" else 300
        assert row["commands"] == expected, row
        assert row["cpu_us_per_command"] > 0 and row["commands_per_s"] > 0, row
