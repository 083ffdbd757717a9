"""The stack's CPU per request: each workload at a fixed rate, every stack process measured.

    socialbench up --fresh && socialbench seed --posts-per-user 5
    socialbench bench stack [--duration 30] [--no-warm] [--data-dir .socialbench]

For each workload (read-home-timeline, read-user-timeline, compose-post and the mixed
60/30/10) the suite's open-loop driver sends its requests at a fixed rate the stack
holds, after a warm-up not measured, and the CPU seconds (psutil) of every process of the
local stack (services, stores, nginx; never the driver) over the run are divided by the
requests completed. Printed beside the rate held, latency percentiles and the busiest
components, and written to ``results/bench-stack-<time>.json``. First (unless
``--no-warm``) every timeline page the read workloads ask for is read once, so an empty
memcached does not make the first minutes measure MongoDB.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from socialbench.bench.results import write_results
from socialbench.errors import SocialbenchError
from socialbench.stack.local import LocalStack
from socialbench.workloads.definitions.socialnetwork import (
    DEFAULT_USERS,
    HOME_TIMELINE_PATH,
    TIMELINE_PAGE,
    TIMELINE_START,
    USER_TIMELINE_PATH,
)
from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.runner import run_load

WORKLOADS = ("read-home-timeline", "read-user-timeline", "compose-post", "mixed")
# Rates every version of the stack holds on a shared 2-core machine, so that rows compare
# across changes (compose-post below the original's wrk2 script's 50 req/s).
RATES = {"read-home-timeline": 100.0, "read-user-timeline": 100.0, "compose-post": 20.0,
         "mixed": 100.0}
DEFAULT_RATE = 100.0  # a workload not in RATES


class NoStack(SocialbenchError, RuntimeError):
    """No local stack runs from the data directory given."""


@dataclass(frozen=True)
class StackBench:
    """What to run: each workload's rate and time, the driver's size, against which stack."""

    url: str = "http://127.0.0.1:8080"
    data_dir: Path = field(default=Path(".socialbench"))
    connections: int = 32  # the driver's
    processes: int = 1  # the driver's (its CPU is not counted)
    duration_s: int = 30  # measured, per workload
    warmup_s: float = 5.0  # per workload, before the measurement
    users: int = DEFAULT_USERS
    workloads: tuple[str, ...] = WORKLOADS
    rates: dict[str, float] = field(default_factory=lambda: dict(RATES))
    results_dir: Path = field(default=Path("results"))
    seed: int = 1
    warm: bool = True  # read every timeline once before measuring

    def rate_of(self, workload: str) -> float:
        return self.rates.get(workload, DEFAULT_RATE)


WARM_STOP = TIMELINE_START[1] + TIMELINE_PAGE  # past the last page the read workloads ask
WARM_CONCURRENCY = 16


async def _warm(url: str, users: int) -> int:
    """Read every user's timelines, pages 0 to WARM_STOP at once; the reads made."""
    limit = asyncio.Semaphore(WARM_CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base_url=url, timeout=timeout) as session:

        async def read(path: str, user: int) -> None:
            async with limit:
                params = {"user_id": user, "start": 0, "stop": WARM_STOP}
                async with session.get(path, params=params) as response:
                    response.raise_for_status()
                    await response.read()

        reads = [read(path, user) for user in range(users)
                 for path in (HOME_TIMELINE_PATH, USER_TIMELINE_PATH)]
        await asyncio.gather(*reads)
        return len(reads)


def warm_caches(config: StackBench) -> None:
    """Read every timeline once, so that the runs meet warm caches (see the module's doc)."""
    start = time.monotonic()
    reads = asyncio.run(_warm(config.url, config.users))
    print(f"warmed the caches: {reads} timeline reads in {time.monotonic() - start:.1f} s",
          flush=True)


def measure(config: StackBench, workload: str) -> dict[str, Any]:
    """One workload at its fixed rate: warm-up, then the measured run; its row."""
    stack = LocalStack(config.data_dir)
    load = LoadConfig(
        url=config.url, rate=config.rate_of(workload), duration_s=config.warmup_s or 1.0,
        workload=workload, users=config.users, connections=config.connections,
        processes=config.processes, seed=config.seed,
    )
    if config.warmup_s:
        run_load(load)
    sampler = stack.sampler()
    if sampler is None:
        raise NoStack(f"no local stack runs from {config.data_dir}: socialbench up first")
    load = load.model_copy(update={"duration_s": float(config.duration_s),
                                   "seed": config.seed + 1})
    load_before = os.getloadavg()
    with sampler:
        result = run_load(load)
    completed = result.completed
    cpu_s = sampler.total_cpu_seconds
    by_component = sorted(sampler.usage, key=lambda u: u.cpu_seconds, reverse=True)
    return {
        "workload": workload,
        "rate": load.rate,
        "achieved_rps": round(result.achieved_rps, 1),
        "completed": completed,
        "errors": result.errors.total,
        "p50_ms": result.latency.p50_ms,
        "p99_ms": result.latency.p99_ms,
        "stack_cpu_s": round(cpu_s, 3),
        "stack_cpu_ms_per_request": round(1e3 * cpu_s / completed, 3) if completed else None,
        "cpu_ms_per_request_by_component": {
            u.name: round(1e3 * u.cpu_seconds / completed, 3) if completed else None
            for u in by_component
        },
        # The busiest unit of each component (a worker, a thread): what fills first.
        "busiest_unit_ms_per_request": {
            u.name: round(1e3 * max(x.cpu_seconds for x in u.units) / completed, 3)
            for u in by_component if completed and u.units
        },
        "driver_cpu_ms_per_request": round(1e3 * result.driver_cpu_s / completed, 4)
        if completed else None,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "saturated": result.saturated,
    }


def run(config: StackBench) -> Path:
    """Each workload against the running stack at its rate; print and write the rows; the file."""
    stack = LocalStack(config.data_dir)
    if stack.running_state() is None:
        raise NoStack(f"no local stack runs from {config.data_dir}: socialbench up first")
    # The ramp manifest's record of the stack: worker counts (and how chosen), durability.
    record = stack.record(stack.config.url)
    if config.warm:
        warm_caches(config)
    rows: list[dict[str, Any]] = []
    for name in config.workloads:
        row = measure(config, name)
        rows.append(row)
        top = list(row["cpu_ms_per_request_by_component"].items())[:4]
        print(f"{name:20s} {row['rate']:6.0f} req/s (held {row['achieved_rps']:6.0f})"
              f"  p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms"
              f"  errors {row['errors']}"
              f"  stack CPU {row['stack_cpu_ms_per_request'] or 0:.2f} ms/req"
              f"  top {dict(top)}"
              f"  (load avg {row['load_average_before'][0]:.1f})", flush=True)
    out = write_results(config.results_dir, "stack", {
        "duration_s": config.duration_s, "warmup_s": config.warmup_s, "warm": config.warm,
        "driver": {"connections": config.connections, "processes": config.processes},
        "stack": record.model_dump(mode="json") if record else None,
        "rows": rows,
    })
    print(f"written {out}")
    return out
