"""The result of one run: what was offered and achieved, outcomes, latencies, and warnings.

Everything a ramp or a report needs, as a typed object that is also the ``--json`` file
(``LoadResult.model_dump_json()``; read one back with ``LoadResult.model_validate_json``).
Latencies are in microseconds; each distribution carries its encoded HdrHistogram so
results can be merged or re-analysed exactly later.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from hdrh.histogram import HdrHistogram
from pydantic import BaseModel, Field

from socialbench import __version__
from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.histogram import decode, encode, merge
from socialbench.workloads.driver.hostload import HostLoad
from socialbench.workloads.driver.placement import Placement
from socialbench.workloads.driver.verdict import (
    Contention,
    DriverVerdict,
    WorkerLoad,
    judge_driver,
)
from socialbench.workloads.driver.worker import SecondReport, WorkerReport

PERCENTILES = (50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0)
MIN_ACHIEVED_RATIO = 0.99


def _key(percentile: float) -> str:
    return f"{percentile:g}"


class LatencyStats(BaseModel):
    """One latency distribution (µs) and its encoded HdrHistogram (1 µs .. 1 h, 3 digits)."""

    count: int
    min_us: int
    mean_us: float
    stdev_us: float
    max_us: int
    percentiles_us: dict[str, int] = Field(description='Keys "50", "90", "99", "99.9", … "100".')
    histogram: str = Field(description="HdrHistogram V2, compressed, base64 (HISTF…).")

    @classmethod
    def from_histogram(cls, histogram: HdrHistogram) -> LatencyStats:
        empty = histogram.get_total_count() == 0
        return cls(
            count=histogram.get_total_count(),
            min_us=0 if empty else histogram.get_min_value(),
            mean_us=0.0 if empty else histogram.get_mean_value(),
            stdev_us=0.0 if empty else histogram.get_stddev(),
            max_us=histogram.get_max_value(),
            percentiles_us={
                _key(p): 0 if empty else histogram.get_value_at_percentile(p) for p in PERCENTILES
            },
            histogram=encode(histogram),
        )

    def decode(self) -> HdrHistogram:
        """The histogram itself (e.g. to merge runs or ask other percentiles)."""
        return decode(self.histogram)

    def percentile_us(self, percentile: float) -> int:
        """Any percentile, from the histogram (0 when there were no samples)."""
        if self.count == 0:
            return 0
        return int(self.decode().get_value_at_percentile(percentile))

    @property
    def p50_ms(self) -> float:
        return self.percentiles_us["50"] / 1000

    @property
    def p99_ms(self) -> float:
        return self.percentiles_us["99"] / 1000

    @property
    def max_ms(self) -> float:
        return self.max_us / 1000


class Errors(BaseModel):
    """Measured requests that got no good answer, by kind; ``status`` by HTTP code (>= 400)."""

    connect: int = 0
    read: int = 0
    timeout: int = 0
    dropped: int = 0
    status: dict[int, int] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.connect + self.read + self.timeout + self.dropped + sum(self.status.values())


class SecondStats(BaseModel):
    """One second of the run (all processes), counted by when things happened."""

    second: int  # 1 = the first second after the start
    warmup: bool
    sent: int
    completed: int
    errors: int
    latency_p99_us: int
    send_lag_p99_us: int
    connections: int
    in_flight: int
    queued: int
    latency_p50_us: int = 0  # for the ramp's live view
    driver_cpu_max: float = 0.0  # the busiest worker's CPU in the second (1 = a core)
    host_busy: float | None = None  # busy share of the driver's CPUs over the last second


def _family(machine: str) -> str | None:
    if machine in {"x86_64", "amd64", "i386", "i686"}:
        return "x86"
    if machine.startswith(("aarch64", "arm64", "arm")):
        return "arm"
    return None


def emulated(machine: str, cpuinfo: str) -> bool | None:
    """Whether ``machine`` (uname -m) runs on CPUs of another kind than ``cpuinfo`` (the
    kernel's /proc/cpuinfo) describes: user-mode emulation (QEMU through binfmt_misc shows
    the emulated machine to uname and the host's CPUs in /proc/cpuinfo). None: unknown."""
    if re.search(r"^(vendor_id|flags)\s*:", cpuinfo, re.MULTILINE):
        cpus = "x86"
    elif re.search(r"^(CPU implementer|Features)\s*:", cpuinfo, re.MULTILINE):
        cpus = "arm"
    else:
        return None
    family = _family(machine)
    return None if family is None else family != cpus


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


class HostInfo(BaseModel):
    """Where the driver ran."""

    hostname: str
    platform: str
    architecture: str = Field(
        default="", description="The driver's machine as its kernel reports it (uname -m: "
                                "x86_64, aarch64; under QEMU user emulation the emulated one). "
                                "Empty: an older result.")
    emulated: bool | None = Field(
        default=None, description="True: the architecture is emulated on CPUs of another "
                                  "kind (QEMU user emulation), so the timings are the "
                                  "emulator's. None: not known (or an older result).")
    cpus: int
    python: str
    socialbench: str
    loadavg_start: tuple[float, float, float]
    loadavg_end: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @classmethod
    def now(cls) -> HostInfo:
        return cls(
            hostname=socket.gethostname(),
            platform=platform.platform(),
            architecture=platform.machine(),
            emulated=emulated(platform.machine(), _cpuinfo()),
            cpus=os.cpu_count() or 0,
            python=sys.version.split()[0],
            socialbench=__version__,
            loadavg_start=os.getloadavg(),
        )


class LoadResult(BaseModel):
    """One open-loop run. Counts are of *measured* requests (intended time inside the window)."""

    config: LoadConfig
    started_at: datetime
    elapsed_s: float = Field(description="Wall time from the start to the end of the drain.")
    window_s: float = Field(description="The measured window: the duration asked, or less "
                                        "when the run was stopped early.")
    stopped_early: bool = Field(
        default=False, description="Stopped (Ctrl-C, SIGTERM) before the end of the window "
                                   "asked: the figures are those of the shorter window_s.")
    offered_rps: float = Field(description="The rate asked.")
    scheduled: int = Field(description="Requests whose intended time fell in the window.")
    scheduled_rps: float = Field(description="scheduled / window_s (Poisson varies around R).")
    sent: int
    completed: int = Field(description="Responses received, any status.")
    ok: int = Field(description="Responses with a status below 400.")
    errors: Errors
    achieved_rps: float = Field(description="Responses received during the window, per second.")
    latency: LatencyStats = Field(description="From the intended send time (the headline).")
    service_time: LatencyStats = Field(description="From the actual send (wrk2 --u_latency).")
    send_lag: LatencyStats = Field(description="Hand-over to a connection minus intended time.")
    queued: int = Field(description="Requests that waited for a free connection.")
    in_flight_at_start: int
    in_flight_at_end: int
    peak_connections: int
    driver_cpu_s: float = Field(description="CPU time of the driver processes while sending.")
    precise_timer: bool = Field(description="timerfd wake-ups (False: 1 ms loop timers).")
    host: HostInfo
    timeline: list[SecondStats]
    saturated: bool = Field(
        description="True when the result is not to be trusted: the driver out of CPU, its "
                    "send lag a material share of the p99, or far fewer answers than offered.")
    warnings: list[str]
    driver: DriverVerdict | None = Field(
        default=None, description="Why the driver sent late, if it did: driver-cpu, "
                                  "host-contended or clean (None: an older result).")
    placement: Placement | None = Field(
        default=None, description="Which CPUs the driver and the stack had (socialbench load "
                                  "--cpu-placement); None: not recorded.")

    @property
    def error_ratio(self) -> float:
        return self.errors.total / self.scheduled if self.scheduled else 0.0


def merge_seconds(reports: Sequence[SecondReport], warmup_s: float) -> SecondStats:
    """One second of all workers, histograms merged exactly."""
    latency = merge(r.latency for r in reports)
    lag = merge(r.send_lag for r in reports)
    second = reports[0].second
    return SecondStats(
        second=second,
        warmup=second <= warmup_s,
        sent=sum(r.sent for r in reports),
        completed=sum(r.completed for r in reports),
        errors=sum(r.errors for r in reports),
        latency_p99_us=latency.get_value_at_percentile(99) if latency.get_total_count() else 0,
        latency_p50_us=latency.get_value_at_percentile(50) if latency.get_total_count() else 0,
        send_lag_p99_us=lag.get_value_at_percentile(99) if lag.get_total_count() else 0,
        connections=sum(r.connections for r in reports),
        in_flight=sum(r.in_flight for r in reports),
        queued=sum(r.queued for r in reports),
        driver_cpu_max=max(r.cpu_s for r in reports),
    )


def build_result(
    config: LoadConfig,
    reports: Sequence[WorkerReport],
    timeline: list[SecondStats],
    *,
    started_at: datetime,
    elapsed_s: float,
    host: HostInfo,
    host_load: HostLoad | None = None,
    window_s: float | None = None,
) -> LoadResult:
    """Merge the workers' reports into one result, and judge whether it can be trusted.

    ``window_s``: the window measured, when a stop cut it shorter than the config's.
    """
    status: Counter[int] = Counter()
    failures: Counter[str] = Counter()
    for report in reports:
        status.update(report.status_errors)
        failures.update(report.failures)
    errors = Errors(
        connect=failures["connect"],
        read=failures["read"],
        timeout=failures["timeout"],
        dropped=failures["dropped"],
        status=dict(sorted(status.items())),
    )
    scheduled = sum(r.scheduled for r in reports)
    completed_in_window = sum(r.completed_in_window for r in reports)
    in_flight_at_start = sum(r.in_flight_at_start for r in reports)
    in_flight_at_end = sum(r.in_flight_at_end for r in reports)
    ok = sum(r.ok for r in reports)
    if window_s is None or not 0 < window_s < config.duration_s:
        window_s = config.duration_s
    stopped_early = window_s < config.duration_s
    result = LoadResult(
        config=config,
        started_at=started_at,
        elapsed_s=elapsed_s,
        window_s=window_s,
        stopped_early=stopped_early,
        offered_rps=config.rate,
        scheduled=scheduled,
        scheduled_rps=scheduled / window_s,
        sent=sum(r.sent for r in reports),
        completed=ok + sum(status.values()),
        ok=ok,
        errors=errors,
        achieved_rps=completed_in_window / window_s,
        latency=LatencyStats.from_histogram(merge(r.latency for r in reports)),
        service_time=LatencyStats.from_histogram(merge(r.service_time for r in reports)),
        send_lag=LatencyStats.from_histogram(merge(r.send_lag for r in reports)),
        queued=sum(r.queued for r in reports),
        in_flight_at_start=in_flight_at_start,
        in_flight_at_end=in_flight_at_end,
        peak_connections=sum(r.peak_connections for r in reports),
        driver_cpu_s=sum(r.cpu_s for r in reports),
        precise_timer=all(r.precise_timer for r in reports),
        host=host,
        timeline=timeline,
        saturated=False,
        warnings=[],
    )
    verdict = judge_driver(
        [worker_load(r) for r in reports], host_load, result.send_lag.percentiles_us["99"],
        result.latency.percentiles_us["99"],
    )
    result = result.model_copy(update={"driver": verdict})
    saturated, warnings = judge(result, completed_in_window)
    return result.model_copy(update={"saturated": saturated, "warnings": warnings})


def worker_load(report: WorkerReport) -> WorkerLoad:
    """A worker's CPU and run-queue wait as shares of its sending time."""
    span = report.sending_s
    return WorkerLoad(
        worker=report.worker,
        cpus=report.cpus or [],
        cpu_share=report.cpu_s / span if span else 0.0,
        wait_share=report.wait_s / span if span and report.wait_s is not None else None,
    )


def judge(result: LoadResult, completed_in_window: int) -> tuple[bool, list[str]]:
    """Whether the result is not to be trusted, and every warning for the reader.

    Untrustworthy: the driver out of CPU, its send lag a material share of the measured
    p99 (workloads/driver/verdict.py), or far fewer answers than offered. A contended host
    is a caveat (``result.driver`` says so), not a reason to distrust the result.
    """
    warnings = []
    saturated = False
    driver = result.driver
    if driver is not None and driver.verdict is Contention.DRIVER_CPU:
        warnings.append(f"{driver.explanation}; {driver.advice}")
        saturated = True
    if driver is not None and driver.lag_material:
        warnings.append(
            f"send lag p99 {driver.send_lag_p99_ms:.3g} ms is {driver.lag_share_of_p99:.0%} of "
            f"the measured p99 {driver.latency_p99_ms:.3g} ms: the driver's own lateness is a "
            "material part of these latencies"
        )
        saturated = True
    # Responses in the window, corrected for the requests in flight at its edges (Little's
    # law: without a warm-up, rate x latency requests are still out at the end), so a slow
    # but keeping-up target is not flagged; a growing backlog, drops and failures are.
    kept_up = completed_in_window + result.in_flight_at_end - result.in_flight_at_start
    if result.scheduled and kept_up < MIN_ACHIEVED_RATIO * result.scheduled:
        warnings.append(
            f"achieved {result.achieved_rps:,.1f} req/s is below 99% of the offered "
            f"{result.scheduled_rps:,.1f} req/s: the driver (or the target) could not keep up, "
            "so these latencies are not those of the offered rate"
        )
        saturated = True
    if result.errors.dropped:
        warnings.append(
            f"{result.errors.dropped:,} requests dropped: all {result.peak_connections:,} "
            "connections were busy (raise --max-connections)"
        )
    if not result.precise_timer:
        warnings.append("no timerfd on this system: wake-ups have 1 ms resolution")
    return saturated, warnings
