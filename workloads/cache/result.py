"""A cache run's merged result: counts, rates, per-operation HdrHistograms, and a verdict."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from socialbench.workloads.cache.config import CacheConfig
from socialbench.workloads.cache.energy import OpsEnergy
from socialbench.workloads.cache.worker import WorkerReport
from socialbench.workloads.driver.histogram import merge
from socialbench.workloads.driver.result import LatencyStats

SATURATION_LAG_US = 1000  # open loop: send-lag p99 above 1 ms means the generator fell behind
MIN_ACHIEVED = 0.99


class CacheResult(BaseModel):
    """One run against one server. Latencies in µs, HdrHistograms encoded."""

    config: CacheConfig
    started_at: datetime
    duration_s: float = Field(
        description="The measured window (timed runs) or start to last reply (count runs).")
    open_loop: bool
    offered_ops_per_s: float | None
    scheduled: int = Field(description="Open loop: requests due in the window.")
    ops: int = Field(description="Replies to measured requests, errors included.")
    sets: int
    gets: int
    hits: int
    misses: int
    errors: int
    lost: int
    timeouts: int
    ops_per_s: float
    sets_per_s: float
    gets_per_s: float
    hit_ratio: float | None
    latency: dict[str, LatencyStats] = Field(
        description='"set", "get", "all": from the send (closed loop) or intended time (open).')
    send_lag: LatencyStats | None
    connections: int
    processes: int
    generator_cpu_s: float
    ops_per_generator_cpu_s: float | None
    prefill_keys: int
    prefill_s: float
    loadavg_end: tuple[float, float, float]
    cpus: int = Field(default_factory=lambda: os.cpu_count() or 1)
    saturated: bool
    warnings: list[str]
    energy: OpsEnergy | None = Field(default=None, description=(
        "The machine's energy over the measured window; None when no meter was given (a "
        "run of several servers at once: see the scale probe's)."))

    @property
    def p99_ms(self) -> float:
        return self.latency["all"].p99_ms

    def p99_ms_of(self, kind: str) -> float:
        return self.latency[kind].p99_ms

    def summary_line(self) -> str:
        lat = self.latency["all"]
        hit = "—" if self.hit_ratio is None else f"{self.hit_ratio:.1%}"
        return (f"{self.config.address} {self.config.protocol.value} pipeline "
                f"{self.config.pipeline}: {self.ops_per_s:,.0f} ops/s "
                f"(sets {self.sets_per_s:,.0f}, gets {self.gets_per_s:,.0f}, hits {hit}); "
                f"p50 {lat.p50_ms:.3f} ms, p99 {lat.p99_ms:.3f} ms, max {lat.max_us / 1000:.3f} "
                f"ms; {self.ops:,} ops in {self.duration_s:.2f} s")


def build_result(config: CacheConfig, reports: Sequence[WorkerReport], *,
                 started_at: datetime, loadavg: tuple[float, float, float]) -> CacheResult:
    if not reports:
        raise ValueError("no generator process reported")
    duration = config.test_time_s if config.timed else max(r.elapsed_s for r in reports)
    assert duration is not None
    sets = sum(r.sets for r in reports)
    hits = sum(r.hits for r in reports)
    misses = sum(r.misses for r in reports)
    errors = sum(r.errors for r in reports)
    gets = hits + misses
    ops = sets + gets + errors
    open_loop = config.rate is not None
    scheduled = sum(r.scheduled for r in reports)
    send_lag = LatencyStats.from_histogram(merge(r.send_lag for r in reports)) \
        if open_loop else None
    cpu = sum(r.cpu_s for r in reports)
    warnings = [p for r in reports for p in r.problems]
    lost = sum(r.lost for r in reports)
    timeouts = sum(r.timeouts for r in reports)
    if errors:
        warnings.append(f"{errors} error replies")
    if lost or timeouts:
        warnings.append(f"{lost} requests lost with their connection, {timeouts} timed out "
                        "or never sent")
    saturated = False
    if send_lag is not None and send_lag.percentiles_us["99"] > SATURATION_LAG_US:
        saturated = True
        warnings.append(f"generator saturated: send-lag p99 {send_lag.p99_ms:.2f} ms > 1 ms")
    if open_loop and scheduled and ops < MIN_ACHIEVED * scheduled - config.pipeline * \
            config.clients * config.threads:
        saturated = True
        warnings.append(f"only {ops:,} of {scheduled:,} scheduled requests answered")
    if not all(r.precise_timer for r in reports):
        warnings.append("no timerfd: open-loop wake-ups on millisecond timers")
    return CacheResult(
        config=config,
        started_at=started_at,
        duration_s=duration,
        open_loop=open_loop,
        offered_ops_per_s=config.rate,
        scheduled=scheduled,
        ops=ops,
        sets=sets,
        gets=gets,
        hits=hits,
        misses=misses,
        errors=errors,
        lost=lost,
        timeouts=timeouts,
        ops_per_s=ops / duration,
        sets_per_s=sets / duration,
        gets_per_s=gets / duration,
        hit_ratio=hits / gets if gets else None,
        latency={
            "set": LatencyStats.from_histogram(merge(r.latency_set for r in reports)),
            "get": LatencyStats.from_histogram(merge(r.latency_get for r in reports)),
            "all": LatencyStats.from_histogram(merge(r.latency_all for r in reports)),
        },
        send_lag=send_lag,
        connections=config.clients * config.threads,
        processes=config.threads,
        generator_cpu_s=cpu,
        ops_per_generator_cpu_s=ops / cpu if cpu > 0 else None,
        prefill_keys=sum(r.prefill_keys for r in reports),
        prefill_s=max(r.prefill_s for r in reports),
        loadavg_end=loadavg,
        saturated=saturated,
        warnings=warnings,
    )
