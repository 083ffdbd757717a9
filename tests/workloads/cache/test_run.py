"""The generator against real memcached and Redis: the servers' own counters say what it sent."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from socialbench.workloads.cache import CacheConfig, CacheLoadError, CacheProtocol, run_cache
from socialbench.workloads.cache.servers import (
    Instance,
    ServerKind,
    free_port,
    server_argv,
    server_stats,
    wait_port,
)
from socialbench.workloads.reports.cache_report import build_cache_report
from socialbench.workloads.results.cache_runs import CacheBundleWriter, read_records

KEYS = 1000


def _memcached_counters(instance: Instance) -> dict[str, int]:
    stats = server_stats(instance.host, instance.port, ServerKind.MEMCACHED)
    return {k: int(stats[k]) for k in ("cmd_get", "cmd_set", "get_hits", "get_misses")}


def _redis_counters(instance: Instance) -> dict[str, int]:
    info = server_stats(instance.host, instance.port, ServerKind.REDIS)

    def calls(command: str) -> int:
        entry = info.get(f"cmdstat_{command}", "calls=0")
        return int(entry.split(",")[0].split("=")[1])

    return {"set": calls("set"), "get": calls("get"),
            "hits": int(info["keyspace_hits"]), "misses": int(info["keyspace_misses"])}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


MEMCACHED_PROTOCOLS = [CacheProtocol.MEMCACHE_TEXT, CacheProtocol.MEMCACHE_META,
                      CacheProtocol.MEMCACHE_BINARY]


@pytest.mark.parametrize("protocol", MEMCACHED_PROTOCOLS)
def test_memcached_counts_ratio_and_prefill(memcached: Instance, protocol: CacheProtocol
                                            ) -> None:
    before = _memcached_counters(memcached)
    result = run_cache(CacheConfig(
        port=memcached.port, protocol=protocol, key_maximum=KEYS - 1, clients=3, threads=2,
        requests=1100, pipeline=4, seed=3, key_prefix=f"{protocol.value}-"))
    sent = _delta(_memcached_counters(memcached), before)
    # 2 processes x 3 clients x 1100 requests, 1:10 -> 600 sets, 6000 gets; + the prefill.
    assert result.prefill_keys == KEYS
    assert sent["cmd_set"] == KEYS + 600
    assert sent["cmd_get"] == 6000
    assert (result.sets, result.gets) == (600, 6000)
    assert sent["get_hits"] == result.hits == 6000  # prefilled: every get hits
    assert result.misses == sent["get_misses"] == 0
    assert result.latency["get"].count == 6000 and result.latency["set"].count == 600
    assert result.errors == result.lost == result.timeouts == 0


@pytest.mark.parametrize("protocol", MEMCACHED_PROTOCOLS)
def test_memcached_misses_are_counted_pipelined(memcached: Instance, protocol: CacheProtocol
                                                ) -> None:
    before = _memcached_counters(memcached)
    result = run_cache(CacheConfig(
        port=memcached.port, protocol=protocol, key_maximum=KEYS - 1, clients=2, threads=1,
        requests=1000, pipeline=16, sets=1, gets=3, prefill=False, seed=10,
        key_prefix=f"cold-{protocol.value}-"))
    sent = _delta(_memcached_counters(memcached), before)
    assert sent["cmd_set"] == result.sets == 500 and sent["cmd_get"] == result.gets == 1500
    assert result.hits > 0 and result.misses > 0  # a cold range: some keys set, some not yet
    assert (result.hits, result.misses) == (sent["get_hits"], sent["get_misses"])
    assert result.errors == result.lost == result.timeouts == 0 and not result.warnings


def test_binary_values_larger_than_a_read(memcached: Instance) -> None:
    size = 300_000  # beyond one 256 KiB read: replies arrive in pieces
    result = run_cache(CacheConfig(
        port=memcached.port, protocol=CacheProtocol.MEMCACHE_BINARY, data_size=size,
        key_maximum=9, clients=2, requests=20, pipeline=4, sets=1, gets=1,
        key_prefix="big-", seed=11))
    assert (result.sets, result.hits, result.misses) == (20, 20, 0)
    assert result.errors == result.lost == 0 and not result.warnings
    assert len(_get(memcached, "big-3")) == size


def test_prefill_of_large_values_goes_in_batches(memcached: Instance) -> None:
    before = server_stats(memcached.host, memcached.port, ServerKind.MEMCACHED)
    result = run_cache(CacheConfig(  # 150 x 500 kB: more than one 64 MiB batch
        port=memcached.port, protocol=CacheProtocol.MEMCACHE_BINARY, data_size=500_000,
        key_minimum=1000, key_maximum=1149, clients=3, requests=1, sets=0, gets=1,
        key_prefix="batch-", seed=14))
    after = server_stats(memcached.host, memcached.port, ServerKind.MEMCACHED)
    assert result.prefill_keys == 150 and not result.warnings
    assert int(after["total_items"]) - int(before["total_items"]) == 150  # each key once


def test_binary_errors_are_counted_not_fatal(memcached: Instance) -> None:
    before = _memcached_counters(memcached)
    result = run_cache(CacheConfig(  # memcached's items stop at 1 MiB: sets answer "too large"
        port=memcached.port, protocol=CacheProtocol.MEMCACHE_BINARY, data_size=2 << 20,
        key_maximum=9, clients=1, requests=10, sets=1, gets=1, key_prefix="huge-", seed=12))
    sent = _delta(_memcached_counters(memcached), before)
    assert (result.sets, result.errors, result.hits, result.misses) == (0, 5, 0, 5)
    assert sent["get_misses"] == 5 and result.lost == 0
    assert result.warnings == ["prefill had 10 error replies", "5 error replies"]


def test_binary_to_a_server_without_it_is_a_clear_error(redis: Instance) -> None:
    port = free_port()  # memcached with the binary protocol turned off answers ERROR
    server = subprocess.Popen([*server_argv(ServerKind.MEMCACHED, port, memory_mb=16),
                               "-B", "ascii"])
    try:
        wait_port("127.0.0.1", port)
        with pytest.raises(CacheLoadError) as refused:
            run_cache(CacheConfig(port=port, protocol=CacheProtocol.MEMCACHE_BINARY,
                                  clients=1, requests=10, key_maximum=99, seed=13))
    finally:
        server.terminate()
        server.wait(5)
    message = str(refused.value)
    assert "prefill failed: connection 0: not a memcached binary response (magic 0x45, " \
           "expected 0x81): b'ERROR\\r\\n" in message
    assert f"(does 127.0.0.1:{port} speak memcache_binary?)" in message
    assert "Traceback" not in message
    with pytest.raises(CacheLoadError, match=r"prefill stalled: no reply for 1.0 s \(does "
                       rf"127.0.0.1:{redis.port} speak memcache_binary\?\)"):
        run_cache(CacheConfig(port=redis.port, protocol=CacheProtocol.MEMCACHE_BINARY,
                              clients=1, requests=10, key_maximum=99, timeout_s=1, seed=13))


def test_redis_counts_ratio_and_prefill(redis: Instance) -> None:
    before = _redis_counters(redis)
    result = run_cache(CacheConfig(
        port=redis.port, protocol=CacheProtocol.REDIS, key_maximum=KEYS - 1, clients=2,
        threads=2, requests=1100, pipeline=16, sets=1, gets=10, seed=4))
    sent = _delta(_redis_counters(redis), before)
    assert sent == {"set": KEYS + 400, "get": 4000, "hits": 4000, "misses": 0}
    assert (result.sets, result.hits, result.misses) == (400, 4000, 0)


def test_other_ratio_and_no_prefill_misses(redis: Instance) -> None:
    before = _redis_counters(redis)
    result = run_cache(CacheConfig(
        port=redis.port, protocol=CacheProtocol.REDIS, key_maximum=KEYS - 1, clients=1,
        requests=1000, sets=1, gets=3, prefill=False, key_prefix="cold-", seed=5))
    sent = _delta(_redis_counters(redis), before)
    assert sent["set"] == 250 and sent["get"] == 750
    assert result.misses > 0 and result.hits + result.misses == 750
    assert sent["hits"] == result.hits


def _get(instance: Instance, key: str) -> bytes:
    with socket.create_connection((instance.host, instance.port)) as sock:
        sock.sendall(f"get {key}\r\n".encode())
        data = b""
        while not data.endswith(b"END\r\n"):
            data += sock.recv(65536)
    header, _, rest = data.partition(b"\r\n")
    assert header.startswith(b"VALUE"), data[:80]
    return rest[:int(header.split()[-1])]


def test_values_have_the_asked_size(memcached: Instance) -> None:
    run_cache(CacheConfig(port=memcached.port, data_size=300, key_maximum=99,
                          key_prefix="size-", clients=1, requests=110, seed=6))
    for key in (0, 50, 99):
        assert len(_get(memcached, f"size-{key}")) == 300


def test_timed_open_loop_keeps_the_rate(memcached: Instance) -> None:
    result = run_cache(CacheConfig(port=memcached.port, key_maximum=KEYS - 1, clients=2,
                                   test_time_s=1.0, warmup_s=0.2, rate=3000, pipeline=2,
                                   key_prefix="open-", seed=7))
    assert result.open_loop and result.scheduled == pytest.approx(3000, rel=0.01)
    assert result.ops == pytest.approx(3000, rel=0.03)
    assert result.send_lag is not None and result.hit_ratio == 1.0


def test_pipeline_depth_is_what_the_server_sees(
        fake_server: Callable[..., Instance], tmp_path: Path) -> None:
    log = tmp_path / "held.log"
    fake = fake_server("--hold", "8", "--log", str(log))
    result = run_cache(CacheConfig(port=fake.port, protocol=CacheProtocol.REDIS, clients=1,
                                   pipeline=8, requests=800, prefill=False, seed=8))
    assert result.ops == 800
    import time

    time.sleep(0.3)  # the fake server writes its log every 0.1 s
    held = [int(line) for line in log.read_text().split()]
    assert len(held) == 100 and set(held) == {8}


def test_bundle_and_report(memcached: Instance, tmp_path: Path) -> None:
    writer = CacheBundleWriter(tmp_path, "test", "cache-run", {"note": "test"})
    for depth in (1, 8):
        writer.add(f"pipeline-{depth}", run_cache(CacheConfig(
            port=memcached.port, key_maximum=KEYS - 1, clients=2, test_time_s=0.5,
            pipeline=depth, prefill=depth == 1, key_prefix="bundle-", seed=9)))
    report = build_cache_report(writer.directory)
    manifest, records, outcome = read_records(writer.directory)
    assert outcome is None and [r.pipeline for r in records] == [1, 8]
    assert manifest.hardware["cpu_model"] and manifest.software["memcached"]
    for name in ("runs.csv", "throughput-vs-pipeline.png", "latency-spectrum.png",
                 "raw/pipeline-8.json", "histograms/pipeline-8-get.hlog"):
        assert (writer.directory / name).exists(), name
    html = report.read_text()
    assert html.count("data:image/png;base64,") == 2 and "pipeline-8" in html
