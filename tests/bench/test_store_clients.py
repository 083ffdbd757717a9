"""bench store-clients: each client sends every command to a real store, its CPU measured."""

from __future__ import annotations

import json
from pathlib import Path

from socialbench.bench.store_clients import StoreClientsBench, run


def test_every_client_is_measured_at_each_caller_count(tmp_path: Path) -> None:
    config = StoreClientsBench(commands=300, callers=(1, 4), warmup_commands=10,
                               results_dir=tmp_path)

    rows = json.loads(run(config).read_text())["rows"]

    assert [(row["store"], row["client"], row["callers"]) for row in rows] == [
        ("redis", "redis-py (blocking pool)", 1), ("redis", "socialbench RedisClient", 1),
        ("redis", "redis-py (blocking pool)", 4), ("redis", "socialbench RedisClient", 4),
        ("memcached", "aiomcache", 1), ("memcached", "socialbench MemcachedClient", 1),
        ("memcached", "aiomcache", 4), ("memcached", "socialbench MemcachedClient", 4),
    ]
    for row in rows:
        assert row["commands"] == 300, row
        assert row["cpu_us_per_command"] > 0 and row["commands_per_s"] > 0, row
