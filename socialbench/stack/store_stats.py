"""What the local stack's stores hold and how they are doing, for ``ramp --grow``: posts
and users stored (MongoDB's collection statistics), the MongoDB server's files on disk,
Redis's memory and keys, memcached's counters, and whether post-storage's read of the
posts memcached misses searches an index (the server's explain)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from socialbench import registry
from socialbench.registry import Store
from socialbench.stack.launcher import StackConfig
from socialbench.workloads.probes.records import CacheCounters, StoreFigures

TIMEOUT_S = 600.0  # counting a collection of millions on a busy FerretDB
PLAN_CHARS = 400


def store_figures(config: StackConfig) -> StoreFigures:
    import pymongo

    posts_url = config.store_address(registry.get("post-storage"), Store.MONGODB)
    users_url = config.store_address(registry.get("user"), Store.MONGODB)
    timeout_ms = int(TIMEOUT_S * 1000)
    client: pymongo.MongoClient[dict[str, Any]]
    with pymongo.MongoClient(posts_url, serverSelectionTimeoutMS=10_000,
                             socketTimeoutMS=timeout_ms) as client:
        posts = _count(client["post"], "post")
        explained = client["post"].command(
            "explain", {"find": "post", "filter": {"post_id": {"$in": [1, 2]}}},
            verbosity="queryPlanner")
    with pymongo.MongoClient(users_url, serverSelectionTimeoutMS=10_000,
                             socketTimeoutMS=timeout_ms) as client:
        users = _count(client["user"], "user")
    indexed, plan = read_plan(explained)
    used, keys = redis_memory(config)
    return StoreFigures(posts=posts, users=users, mongodb_file_bytes=mongodb_files(config),
                        redis_used_memory_bytes=used, redis_keys=keys,
                        post_read_indexed=indexed, post_read_plan=plan)


def _count(database: Any, collection: str) -> int:
    """Documents in ``collection`` from its statistics (FerretDB's SQLite backend counts
    rows; a count command would read every document)."""
    if collection not in database.list_collection_names():
        return 0
    return int(database.command("collStats", collection)["count"])


def read_plan(explained: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether an explain says the query searched an index, and its plan, shortened:
    FerretDB's SQLite plan rows (``SEARCH … USING INDEX``), or mongod's winning plan."""
    planner = explained.get("queryPlanner") or {}
    rows = planner.get("Plan")
    if rows is not None:  # FerretDB: SQLite's EXPLAIN QUERY PLAN rows
        text = "; ".join(str(row) for row in rows)
        return "USING INDEX" in text or "USING COVERING INDEX" in text, text[:PLAN_CHARS]
    winning = planner.get("winningPlan")
    if winning is not None:
        text = json.dumps(winning, default=str)
        return "IXSCAN" in text or "EXPRESS" in text, text[:PLAN_CHARS]
    return None, json.dumps(explained, default=str)[:PLAN_CHARS]


def mongodb_files(config: StackConfig) -> int:
    """Bytes of every file in the MongoDB servers' data directories."""
    total = 0
    for instance in config.store_instances():
        if instance.store is Store.MONGODB:
            directory = config.data_dir / instance.name
            total += sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
    return total


def _redis_servers(config: StackConfig) -> list[int]:
    return [port for instance in config.store_instances() if instance.store is Store.REDIS
            for port in config.instance_ports(instance)]


def redis_memory(config: StackConfig) -> tuple[int, int]:
    """used_memory and keys of every redis-server of the stack, added."""
    import redis

    used = keys = 0
    for port in _redis_servers(config):
        with redis.Redis(config.host, port, socket_timeout=10) as client:
            used += int(client.info("memory")["used_memory"])
            keys += int(client.dbsize())
    return used, keys


def memcached_counters(config: StackConfig) -> CacheCounters:
    """Every memcached's ``stats``, added."""
    totals = dict.fromkeys(("get_hits", "get_misses", "evictions", "bytes", "limit_maxbytes"), 0)
    for port in config.memcached_ports:
        stats = memcached_stats(config.host, port)
        for key in totals:
            totals[key] += int(stats.get(key, 0))
    return CacheCounters(get_hits=totals["get_hits"], get_misses=totals["get_misses"],
                         evictions=totals["evictions"], bytes=totals["bytes"],
                         limit_bytes=totals["limit_maxbytes"])


def memcached_stats(host: str, port: int, timeout_s: float = 5.0) -> dict[str, str]:
    """One memcached's ``stats`` (text protocol)."""
    with socket.create_connection((host, port), timeout=timeout_s) as connection:
        connection.sendall(b"stats\r\n")
        answer = b""
        while not answer.endswith(b"END\r\n"):
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
    stats = {}
    for line in answer.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT":
            stats[parts[1]] = parts[2]
    return stats
