"""How fast is the cache generator? Against one memcached (-t 1) and one Redis, beside
redis-benchmark.

    socialbench bench cache [--duration 5] [--pipelines 1 --pipelines 16 --pipelines 126]

For each pipeline depth: our generator (closed loop, one process, ``--clients``
connections, 1:10 set:get, 128-byte values, random keys over a prefilled range) against
memcached ``-t 1`` and Redis, then ``redis-benchmark -P <depth> -c <clients> -d 128 -t
set,get`` against the same Redis with the same connections (it runs its SETs, then its
GETs; its 1:10 figure is the mix's harmonic mean: 11 / (1/set + 10/get)). The generator
(and redis-benchmark) run on ``--client-cpu``, the servers on ``--server-cpu``. Each
tool's client CPU time gives ops/s per client core: the generator's own process time,
redis-benchmark's from ``getrusage(RUSAGE_CHILDREN)``. memcached's ``stats`` counters
(cmd_get, cmd_set, get_hits) around each run prove the mix and the hit rate. Prints a
table and writes ``results/bench-cache-<time>.json``. Not a test.
"""

from __future__ import annotations

import csv
import io
import os
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from socialbench.bench.results import write_results
from socialbench.workloads.cache import CacheConfig, CacheProtocol, run_cache
from socialbench.workloads.cache.servers import ServerKind, server_stats, start_instance


@dataclass(frozen=True)
class CacheBench:
    duration_s: float = 5.0
    pipelines: tuple[int, ...] = (1, 16, 126)
    clients: int = 4
    key_maximum: int = 99_999
    client_cpu: int = 0
    server_cpu: int = (os.cpu_count() or 1) - 1
    results_dir: Path = field(default=Path("results"))


@dataclass
class Row:
    server: str
    tool: str
    pipeline: int
    ops_per_s: float
    p99_ms: float | None
    client_cpu_cores: float | None  # client CPU seconds / wall seconds
    ops_per_client_core: float | None
    detail: dict[str, float | int | None]


def _ours(config: CacheBench, kind: ServerKind, port: int, depth: int,
          prefill: bool) -> Row:
    protocol = CacheProtocol.REDIS if kind is ServerKind.REDIS else CacheProtocol.MEMCACHE_TEXT
    before = server_stats("127.0.0.1", port, kind)
    result = run_cache(CacheConfig(
        port=port, protocol=protocol, pipeline=depth, clients=config.clients, threads=1,
        test_time_s=config.duration_s, warmup_s=0.5, key_maximum=config.key_maximum,
        prefill=prefill, cpus=[config.client_cpu], seed=depth))
    after = server_stats("127.0.0.1", port, kind)
    cores = result.generator_cpu_s / (config.duration_s + 0.5)
    detail: dict[str, float | int | None] = {
        "sets": result.sets, "gets": result.gets, "hits": result.hits,
        "misses": result.misses, "errors": result.errors + result.lost + result.timeouts,
        "get_p99_ms": result.p99_ms_of("get"), "set_p99_ms": result.p99_ms_of("set"),
        "p50_ms": result.latency["all"].p50_ms, "prefill_keys": result.prefill_keys,
    }
    if kind is ServerKind.MEMCACHED:
        for key in ("cmd_get", "cmd_set", "get_hits", "get_misses"):
            detail[f"server_{key}"] = int(after[key]) - int(before[key])
        detail["server_cmd_set_without_prefill"] = (
            int(after["cmd_set"]) - int(before["cmd_set"]) - result.prefill_keys)
    else:
        detail["server_keyspace_hits"] = int(after["keyspace_hits"]) - int(before["keyspace_hits"])
        detail["server_keyspace_misses"] = (int(after["keyspace_misses"])
                                            - int(before["keyspace_misses"]))
    return Row(kind.value, "socialbench cache", depth, result.ops_per_s, result.p99_ms, cores,
               result.ops_per_s / cores if cores else None, detail)


def _redis_benchmark(config: CacheBench, port: int, depth: int) -> Row | None:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    requests = int(min(max(depth, 1) * 60_000, 3_000_000))
    argv = ["taskset", "-c", str(config.client_cpu), binary, "-h", "127.0.0.1", "-p",
            str(port), "-P", str(depth), "-c", str(config.clients), "-d", "128",
            "-t", "set,get", "-n", str(requests), "-r", str(config.key_maximum + 1), "--csv"]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    output = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - started
    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (spent.ru_utime - usage.ru_utime) + (spent.ru_stime - usage.ru_stime)
    rows = {row["test"]: row for row in csv.DictReader(io.StringIO(output))}
    set_rps, get_rps = float(rows["SET"]["rps"]), float(rows["GET"]["rps"])
    mixed = 11 / (1 / set_rps + 10 / get_rps)
    cores = cpu / wall
    p99 = max(float(rows["SET"]["p99_latency_ms"]), float(rows["GET"]["p99_latency_ms"]))
    return Row("redis", "redis-benchmark", depth, mixed, p99, cores, mixed / cores,
               {"set_rps": set_rps, "get_rps": get_rps, "requests_per_test": requests,
                "get_p99_ms": float(rows["GET"]["p99_latency_ms"]),
                "set_p99_ms": float(rows["SET"]["p99_latency_ms"])})


def _fmt(value: float | None, digits: str = ",.0f") -> str:
    return "—" if value is None else format(value, digits)


def run(config: CacheBench) -> Path:
    rows: list[Row] = []
    load_start = os.getloadavg()
    for kind in (ServerKind.MEMCACHED, ServerKind.REDIS):
        instance = start_instance(kind, cpu=config.server_cpu)
        try:
            for number, depth in enumerate(config.pipelines):
                rows.append(_ours(config, kind, instance.port, depth, prefill=number == 0))
                print(_line(rows[-1]), flush=True)
                if kind is ServerKind.REDIS:
                    theirs = _redis_benchmark(config, instance.port, depth)
                    if theirs is not None:
                        rows.append(theirs)
                        print(_line(theirs), flush=True)
        finally:
            instance.stop()
    ratios = {}
    for depth in config.pipelines:
        ours = next((r for r in rows if r.server == "redis" and r.tool == "socialbench cache"
                     and r.pipeline == depth), None)
        theirs = next((r for r in rows if r.tool == "redis-benchmark" and r.pipeline == depth),
                      None)
        if ours and theirs and ours.ops_per_client_core and theirs.ops_per_client_core:
            ratios[depth] = {
                "ops_per_s": ours.ops_per_s / theirs.ops_per_s,
                "ops_per_client_core": ours.ops_per_client_core / theirs.ops_per_client_core,
            }
            print(f"pipeline {depth}: ours / redis-benchmark = "
                  f"{ratios[depth]['ops_per_s']:.2f} in ops/s, "
                  f"{ratios[depth]['ops_per_client_core']:.2f} in ops/s per client core")
    out = write_results(config.results_dir, "cache", {
        "config": asdict(config), "load_start": load_start, "load_end": os.getloadavg(),
        "rows": [asdict(r) for r in rows], "ratios": ratios,
    })
    print(f"written: {out}")
    return out


def _line(row: Row) -> str:
    return (f"{row.server:9} {row.tool:18} P={row.pipeline:<4} {_fmt(row.ops_per_s):>10} ops/s "
            f"p99 {_fmt(row.p99_ms, '.3f'):>7} ms  client {_fmt(row.client_cpu_cores, '.2f')} "
            f"cores -> {_fmt(row.ops_per_client_core):>10} ops/s per client core  "
            + ", ".join(f"{k}={v:,.6g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in row.detail.items()))
