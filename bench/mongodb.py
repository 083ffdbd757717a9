"""How fast is the MongoDB-wire server (FerretDB, SQLite handler) on posts? Reads and inserts.

    socialbench bench mongodb [--documents 100000] [--reads 1000] [--ferretdb PATH]

Starts a FerretDB (``--ferretdb``, default the one on PATH or in ~/go/bin) on a free
port in a temporary directory, inserts ``--documents`` post-like documents (int64
``_id``, the same value in ``post_id`` under a unique index, as post-storage has it) with
insert_many in batches, then times, one request at a time: point reads by ``_id`` and
by ``post_id`` (random stored ids), ``$in`` reads of ``--in-size`` ids, and single
inserts. Each series stops after ``--reads`` requests or ``--max-seconds``, whichever
comes first (an unpatched FerretDB scans the table on each read: seconds each at 100k
documents). Prints the table, writes it to ``results/bench-mongodb-<time>.json``
(``--results-dir``). Not a test: numbers depend on the machine (see docs/ferretdb.md).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from socialbench.bench.results import write_results
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    find_binary,
    free_port,
    go_bin_dirs,
)

BATCH = 1000


@dataclass(frozen=True)
class MongoBench:
    """What to run: how many documents, how many timed requests, which FerretDB binary."""

    documents: int = 100_000
    reads: int = 1000
    in_size: int = 10
    inserts: int = 1000
    max_seconds: float = 60.0  # per series
    ferretdb: Path | None = None
    seed: int = 1
    results_dir: Path = field(default=Path("results"))


@dataclass
class Series:
    """One timed series: its requests' latencies in ms."""

    name: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    seconds: float


def ferretdb_command(binary: str, port: int, data_dir: Path) -> ServerCommand:
    """FerretDB with its SQLite handler, as the local stack runs it (stack.servers)."""
    argv = [
        binary, "--handler=sqlite", f"--sqlite-url=file:{data_dir}/",
        f"--listen-addr=127.0.0.1:{port}", f"--state-dir={data_dir}",
        "--telemetry=disable", "--debug-addr=-", "--log-level=warn",
    ]
    return ServerCommand("ferretdb", argv, "127.0.0.1", port)


def post(post_id: int, rng: random.Random) -> dict[str, Any]:
    """A document shaped like post-storage's (post_id an int64, a few hundred bytes)."""
    creator = rng.randrange(1, 1000)
    return {
        "_id": post_id, "post_id": post_id,
        "creator": {"user_id": creator, "username": f"username_{creator}"},
        "req_id": rng.getrandbits(63), "text": "".join(rng.choices("abcdefgh ", k=200)),
        "user_mentions": [], "media": [], "urls": [],
        "timestamp": 1_700_000_000_000 + post_id % 1_000_000, "post_type": "POST",
    }


def timed(name: str, count: int, max_seconds: float, request: Callable[[int], object]) -> Series:
    """Run ``request(i)`` up to ``count`` times, one at a time, within ``max_seconds``."""
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        request(i)
        latencies.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - start > max_seconds:
            break
    seconds = time.perf_counter() - start
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return Series(name, len(latencies), statistics.median(ordered), p99, ordered[-1], seconds)


def measure(url: str, config: MongoBench) -> tuple[float, list[Series]]:
    """Load the documents (their insert rate), then time each series."""
    rng = random.Random(config.seed)
    ids = rng.sample(range(1, 2**62), config.documents + config.inserts)
    stored, fresh = ids[:config.documents], ids[config.documents:]
    client: MongoClient[dict[str, Any]] = MongoClient(url)
    try:
        posts = client["bench"]["post"]
        posts.drop()
        posts.create_index("post_id", unique=True)
        start = time.perf_counter()
        for i in range(0, len(stored), BATCH):
            posts.insert_many([post(p, rng) for p in stored[i:i + BATCH]], ordered=False)
        insert_rate = len(stored) / (time.perf_counter() - start)
        probes = [rng.choice(stored) for _ in range(config.reads)]
        batches = [rng.sample(stored, config.in_size) for _ in range(config.reads)]

        def by_id(i: int) -> None:
            assert posts.find_one({"_id": probes[i]}) is not None

        def by_post_id(i: int) -> None:
            assert posts.find_one({"post_id": probes[i]}, {"_id": 0}) is not None

        def by_in(i: int) -> None:
            assert len(list(posts.find({"_id": {"$in": batches[i]}}))) == config.in_size

        def insert(i: int) -> None:
            posts.insert_one(post(fresh[i], rng))

        limit = config.max_seconds
        series = [
            timed("find_one _id", config.reads, limit, by_id),
            timed("find_one post_id", config.reads, limit, by_post_id),
            timed(f"find _id $in {config.in_size}", config.reads, limit, by_in),
            timed("insert_one", config.inserts, limit, insert),
        ]
        return insert_rate, series
    finally:
        client.close()


def run(config: MongoBench) -> Path:
    """Start FerretDB, measure, print the table, write it; the JSON file written."""
    binary = str(config.ferretdb or find_binary("ferretdb", *go_bin_dirs()))
    stamp_file = Path(binary + ".socialbench")
    build = stamp_file.read_text().strip() if stamp_file.exists() else "unknown"
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-mongodb-") as tmp:
        command = ferretdb_command(binary, free_port(), Path(tmp) / "db")
        (Path(tmp) / "db").mkdir()
        server = ServerProcess(command, Path(tmp) / "ferretdb.log")
        try:
            server.wait_ready()
            insert_rate, series = measure(f"mongodb://{command.address}", config)
        finally:
            server.stop()
    load_end = os.getloadavg()

    print(f"\nferretdb {binary} ({build}); {config.documents:,} documents; "
          f"load average at start {load_start}, at end {load_end}, {os.cpu_count()} CPUs")
    print(f"insert_many (batches of {BATCH}): {insert_rate:,.0f} documents/s")
    print("| request | count | p50 ms | p99 ms | max ms | seconds |")
    print("|---|---|---|---|---|---|")
    for s in series:
        print(f"| {s.name} | {s.count} | {s.p50_ms:.3f} | {s.p99_ms:.3f} | {s.max_ms:.3f} |"
              f" {s.seconds:.1f} |")
    out = write_results(config.results_dir, "mongodb", {
        "ferretdb": binary, "build": build, "load_start": load_start, "load_end": load_end,
        "args": asdict(config), "insert_many_docs_per_s": insert_rate,
        "series": [asdict(s) for s in series]})
    print(f"written to {out}")
    return out
