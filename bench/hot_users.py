"""Hot users: what a post by an author with many followers costs, and whether it slows others.

    socialbench up --fresh && socialbench seed
    socialbench bench hot-users [--followers 10000] [--rate 2] [--duration 30]

Registers users of its own (ids from ``FIRST_ID``, far from any seeded graph's): a
celebrity followed by ``followers`` of them and a plain author followed by ``PLAIN``,
through the API as users do. Then, for each author in turn, it composes posts at ``rate``
per second (open loop, latency from the intended send time, as the driver counts it) for
``duration`` seconds, while home-timeline reads of the seeded graph's users go on at
``read_rate`` per second in the background. It prints each author's compose p50 and p99,
the fan-out's cost per follower ((p50 celebrity - p50 plain) / the difference in
followers), and the background reads' p50 and p99 during each author's composes: whether
one celebrity's post breaks the SLA for everyone. The JSON goes to
``results/bench-hot-users-<time>.json``. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from hdrh.histogram import HdrHistogram

from socialbench.bench.results import write_results
from socialbench.workloads.definitions.socialnetwork import (
    DEFAULT_USERS,
    HOME_TIMELINE_PATH,
    compose_post_body,
)
from socialbench.workloads.driver.histogram import new_histogram
from socialbench.workloads.seeding.seed import FORM, post_all, register_body

FIRST_ID = 8_000_000  # the celebrity; the plain author is next, then their followers
PLAIN = 10  # the plain author's followers
SETUP_CONCURRENCY = 32
COMPOSE_PATH = "/wrk2-api/post/compose"


@dataclass(frozen=True)
class HotUsersBench:
    """What to run, against which front end."""

    url: str = "http://127.0.0.1:8080"
    followers: int = 10_000
    rate: float = 2.0  # composes per second, per author's run
    duration_s: float = 30.0
    read_rate: float = 100.0  # background home-timeline reads per second
    users: int = DEFAULT_USERS  # the seeded graph's users the reads draw from
    results_dir: Path = field(default=Path("results"))
    seed: int = 1


@dataclass
class Phase:
    """One author's run: the composes' and the background reads' latencies (µs)."""

    author: str
    followers: int
    composes: HdrHistogram = field(default_factory=new_histogram)
    reads: HdrHistogram = field(default_factory=new_histogram)
    errors: int = 0

    def row(self) -> dict[str, Any]:
        def ms(histogram: HdrHistogram, percentile: float) -> float:
            return histogram.get_value_at_percentile(percentile) / 1000

        return {"author": self.author, "followers": self.followers,
                "composes": self.composes.get_total_count(),
                "compose_p50_ms": ms(self.composes, 50), "compose_p99_ms": ms(self.composes, 99),
                "reads": self.reads.get_total_count(),
                "read_p50_ms": ms(self.reads, 50), "read_p99_ms": ms(self.reads, 99),
                "errors": self.errors}


async def _post_all(session: aiohttp.ClientSession, path: str, bodies: list[str]) -> int:
    """POST every body as seeding does; how many failed (409 is 'exists')."""
    counts: Counter[str] = Counter()
    await post_all(session, path, bodies, concurrency=SETUP_CONCURRENCY, counts=counts,
                   exists_status=409, advance=lambda: None)
    return sum(n for kind, n in counts.items() if kind not in ("ok", "exists"))


async def set_up(session: aiohttp.ClientSession, config: HotUsersBench) -> None:
    """The two authors and their followers, registered and following."""
    celebrity, plain = FIRST_ID, FIRST_ID + 1
    fans = range(FIRST_ID + 2, FIRST_ID + 2 + config.followers)
    started = time.monotonic()
    failed = await _post_all(session, "/wrk2-api/user/register",
                             [register_body(u) for u in (celebrity, plain, *fans)])
    follows = [f"user_id={fan}&followee_id={celebrity}" for fan in fans]
    follows += [f"user_id={fan}&followee_id={plain}" for fan in fans[:PLAIN]]
    failed += await _post_all(session, "/wrk2-api/user/follow", follows)
    if failed:
        raise RuntimeError(f"setting up the hot users: {failed} requests failed")
    print(f"set up {config.followers + 2:,} users and {len(follows):,} follows in "
          f"{time.monotonic() - started:.0f} s", flush=True)


async def open_loop(rate: float, duration_s: float, send: Any) -> None:
    """Call ``send(intended_ns)`` at ``rate`` per second for ``duration_s``, whatever the
    answers do (each call a task of its own)."""
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter_ns()
    interval_ns = 1e9 / rate
    for index in range(int(rate * duration_s)):
        intended = start + int(index * interval_ns)
        delay = (intended - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send(intended))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def run_phase(session: aiohttp.ClientSession, config: HotUsersBench, author: int,
                    phase: Phase, rng: random.Random) -> None:
    """Composes by ``author`` and background reads, both open loop."""

    async def compose(intended: int) -> None:
        body = compose_post_body(rng, author, config.users)
        async with session.post(COMPOSE_PATH, data=body.encode(), headers=FORM) as response:
            await response.read()
            phase.errors += response.status != 200
        phase.composes.record_value((time.perf_counter_ns() - intended) // 1000)

    async def read(intended: int) -> None:
        params = {"user_id": rng.randrange(config.users), "start": 0, "stop": 10}
        async with session.get(HOME_TIMELINE_PATH, params=params, headers=FORM) as response:
            await response.read()
            phase.errors += response.status != 200
        phase.reads.record_value((time.perf_counter_ns() - intended) // 1000)

    await asyncio.gather(open_loop(config.rate, config.duration_s, compose),
                         open_loop(config.read_rate, config.duration_s, read))


async def measure(config: HotUsersBench) -> list[Phase]:
    rng = random.Random(config.seed)
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(base_url=config.url, timeout=timeout,
                                     connector=connector) as session:
        await set_up(session, config)
        phases = [Phase("plain", PLAIN), Phase("celebrity", config.followers)]
        for author, phase in zip((FIRST_ID + 1, FIRST_ID), phases, strict=True):
            await run_phase(session, config, author, phase, rng)
            print(f"{phase.author}: {phase.row()}", flush=True)
        return phases


def run(config: HotUsersBench) -> Path:
    """Measure, print the table, write the JSON; its path."""
    phases = asyncio.run(measure(config))
    rows = [phase.row() for phase in phases]
    plain, celebrity = rows
    per_follower_us = ((celebrity["compose_p50_ms"] - plain["compose_p50_ms"]) * 1000
                       / (celebrity["followers"] - plain["followers"]))
    print(f"\n{'author':<10} {'followers':>9} {'compose p50':>12} {'compose p99':>12} "
          f"{'reads p50':>10} {'reads p99':>10} {'errors':>6}")
    for row in rows:
        print(f"{row['author']:<10} {row['followers']:>9,} {row['compose_p50_ms']:>9.1f} ms "
              f"{row['compose_p99_ms']:>9.1f} ms {row['read_p50_ms']:>7.1f} ms "
              f"{row['read_p99_ms']:>7.1f} ms {row['errors']:>6}")
    print(f"fan-out: {per_follower_us:.2f} µs of compose p50 per follower; load average "
          f"{os.getloadavg()[0]:.2f}")
    path = write_results(config.results_dir, "hot-users", {
        "config": asdict(config), "rows": rows, "per_follower_us": per_follower_us})
    print(f"written: {path}")
    return path
