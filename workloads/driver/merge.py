"""One result from N drivers' results (``socialbench merge FILES... --json OUT``).

N drivers, each at R/N over the same window, report what one driver at R with N
processes would: counts add, and the HdrHistograms add bucket by bucket, so every
percentile of the merged result is exact. The per-second timeline is the exception
(a second keeps only its p99): there a second's p99 is the highest of the drivers'.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.histogram import merge
from socialbench.workloads.driver.result import (
    Errors,
    HostInfo,
    LatencyStats,
    LoadResult,
    SecondStats,
    judge,
)
from socialbench.workloads.driver.verdict import Contention, DriverVerdict, lag_is_material

_SEVERITY = {Contention.CLEAN: 0, Contention.HOST_CONTENDED: 1, Contention.DRIVER_CPU: 2}


def _completed_in_window(result: LoadResult) -> int:
    return round(result.achieved_rps * result.window_s)


def _config(results: Sequence[LoadResult]) -> LoadConfig:
    configs = [r.config for r in results]
    growing = all(c.max_connections is not None for c in configs)
    return configs[0].model_copy(update={
        "rate": sum(c.rate for c in configs),
        "connections": sum(c.connections for c in configs),
        "max_connections": sum(c.max_connections or 0 for c in configs) if growing else None,
        "processes": sum(c.processes for c in configs),
    })


def _host(results: Sequence[LoadResult]) -> HostInfo:
    """Every driver's name, platform and architecture (emulated if any is); the first
    driver's CPUs and load average.

    The CPU count stays the one the load average was taken on: drivers often share a
    node (two pods of one Job), so their CPUs do not add up.
    """
    hosts = [r.host for r in results]
    return hosts[0].model_copy(update={
        "hostname": ",".join(dict.fromkeys(h.hostname for h in hosts)),
        "platform": ",".join(dict.fromkeys(h.platform for h in hosts)),
        "architecture": ",".join(dict.fromkeys(h.architecture for h in hosts)),
        "emulated": True if any(h.emulated for h in hosts) else (
            False if all(h.emulated is False for h in hosts) else None),
    })


def _errors(results: Sequence[LoadResult]) -> Errors:
    status: Counter[int] = Counter()
    for result in results:
        status.update(result.errors.status)
    return Errors(
        connect=sum(r.errors.connect for r in results),
        read=sum(r.errors.read for r in results),
        timeout=sum(r.errors.timeout for r in results),
        dropped=sum(r.errors.dropped for r in results),
        status=dict(sorted(status.items())),
    )


def _timeline(results: Sequence[LoadResult]) -> list[SecondStats]:
    by_second: dict[int, list[SecondStats]] = defaultdict(list)
    for result in results:
        for second in result.timeline:
            by_second[second.second].append(second)
    return [
        SecondStats(
            second=number,
            warmup=any(s.warmup for s in seconds),
            sent=sum(s.sent for s in seconds),
            completed=sum(s.completed for s in seconds),
            errors=sum(s.errors for s in seconds),
            latency_p99_us=max(s.latency_p99_us for s in seconds),
            send_lag_p99_us=max(s.send_lag_p99_us for s in seconds),
            connections=sum(s.connections for s in seconds),
            in_flight=sum(s.in_flight for s in seconds),
            queued=sum(s.queued for s in seconds),
        )
        for number, seconds in sorted(by_second.items())
    ]


def _driver(results: Sequence[LoadResult], lag: LatencyStats,
            latency: LatencyStats) -> DriverVerdict | None:
    """The worst of the drivers' verdicts (a driver out of CPU spoils the sum), with every
    driver's processes, and the lag judged against the merged p99."""
    verdicts = [r.driver for r in results if r.driver is not None]
    if not verdicts:
        return None
    worst = max(verdicts, key=lambda v: _SEVERITY[v.verdict])
    lag_us, latency_us = lag.percentiles_us["99"], latency.percentiles_us["99"]
    return worst.model_copy(update={
        "workers": [w for v in verdicts for w in v.workers],
        "send_lag_p99_ms": lag_us / 1000, "latency_p99_ms": latency_us / 1000,
        "lag_material": lag_is_material(lag_us, latency_us),
    })


def _latency(parts: Sequence[LatencyStats]) -> LatencyStats:
    return LatencyStats.from_histogram(merge(p.histogram for p in parts))


def merge_results(results: Sequence[LoadResult]) -> LoadResult:
    """The result of all ``results`` together, judged again as a whole.

    The merged result is saturated when it is as a whole, or when any one driver was
    (a driver that could not keep its own schedule spoils the sum); each driver's
    warnings are kept, prefixed with its position.
    """
    if not results:
        raise ValueError("nothing to merge")
    window_s = max(r.window_s for r in results)
    started_at = min(r.started_at for r in results)
    ended_at = max(r.started_at + timedelta(seconds=r.elapsed_s) for r in results)
    scheduled = sum(r.scheduled for r in results)
    completed_in_window = sum(_completed_in_window(r) for r in results)
    merged = LoadResult(
        config=_config(results),
        started_at=started_at,
        elapsed_s=(ended_at - started_at).total_seconds(),
        window_s=window_s,
        stopped_early=any(r.stopped_early for r in results),
        offered_rps=sum(r.offered_rps for r in results),
        scheduled=scheduled,
        scheduled_rps=scheduled / window_s,
        sent=sum(r.sent for r in results),
        completed=sum(r.completed for r in results),
        ok=sum(r.ok for r in results),
        errors=_errors(results),
        achieved_rps=completed_in_window / window_s,
        latency=_latency([r.latency for r in results]),
        service_time=_latency([r.service_time for r in results]),
        send_lag=_latency([r.send_lag for r in results]),
        queued=sum(r.queued for r in results),
        in_flight_at_start=sum(r.in_flight_at_start for r in results),
        in_flight_at_end=sum(r.in_flight_at_end for r in results),
        peak_connections=sum(r.peak_connections for r in results),
        driver_cpu_s=sum(r.driver_cpu_s for r in results),
        precise_timer=all(r.precise_timer for r in results),
        host=_host(results),
        timeline=_timeline(results),
        saturated=False,
        warnings=[],
    )
    merged = merged.model_copy(update={"driver": _driver(results, merged.send_lag,
                                                         merged.latency)})
    saturated, warnings = judge(merged, completed_in_window)
    if len({r.window_s for r in results}) > 1:
        warnings.append("the drivers' measured windows differ; rates use the longest")
    for index, result in enumerate(results):
        saturated = saturated or result.saturated
        warnings += [f"driver {index}: {warning}" for warning in result.warnings]
    return merged.model_copy(update={"saturated": saturated, "warnings": warnings})


def read_results(paths: Sequence[Path]) -> list[LoadResult]:
    """Results from ``--json`` files; a clear error naming a file that is not one."""
    results = []
    for path in paths:
        try:
            results.append(LoadResult.model_validate_json(path.read_bytes()))
        except OSError as exc:
            raise ValueError(f"{path}: {exc.strerror}") from None
        except ValueError as exc:
            first_line = str(exc).splitlines()[0]
            raise ValueError(f"{path}: not a `socialbench load --json` result "
                             f"({first_line})") from None
    return results
