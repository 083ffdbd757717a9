"""How contended the host was while the driver ran, from /proc (never per request).

The runner's :class:`HostSampler` reads ``/proc/stat`` five times a second in the parent
process: each CPU's busy, idle and steal time (over the CPUs the driver may run on) and
the machine's ``procs_running``. A worker reads its own run-queue wait from
``/proc/self/schedstat`` at the start and end of its sending (:func:`run_queue_wait_s`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field

PROC_STAT = "/proc/stat"
SCHEDSTAT = "/proc/self/schedstat"
SAMPLE_S = 0.2


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative jiffies of a set of CPUs: busy (user, nice, system, irq, softirq), idle
    (idle, iowait) and stolen by the hypervisor."""

    busy: int = 0
    idle: int = 0
    steal: int = 0

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.steal

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.busy - other.busy, self.idle - other.idle, self.steal - other.steal)


@dataclass(frozen=True)
class StatSample:
    """One read of /proc/stat: the chosen CPUs' times and the machine's runnable tasks."""

    at: float
    cpus: CpuTimes
    procs_running: int


def usable_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def read_stat(cpus: Iterable[int] | None, path: str = PROC_STAT) -> StatSample | None:
    """The times of ``cpus`` (None: every CPU, the machine's total line) and
    ``procs_running`` now; None where /proc/stat is missing."""
    wanted = {"cpu"} if cpus is None else {f"cpu{cpu}" for cpu in cpus}
    busy = idle = steal = running = 0
    try:
        with open(path) as stat:
            lines = stat.readlines()
    except OSError:
        return None
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            fields = [int(value) for value in rest.split()]
            user, nice, system, idle_, iowait, irq, softirq = fields[:7]
            busy += user + nice + system + irq + softirq
            idle += idle_ + iowait
            steal += fields[7] if len(fields) > 7 else 0
        elif name == "procs_running":
            running = int(rest)
    return StatSample(time.monotonic(), CpuTimes(busy, idle, steal), running)


def run_queue_wait_s() -> float | None:
    """Seconds this process's main thread has waited in a run queue for a CPU (None: unknown)."""
    try:
        with open(SCHEDSTAT) as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class HostLoad(BaseModel):
    """The host over the driver's sending time (warm-up and window), as /proc saw it."""

    cpus: list[int] = Field(description="The CPUs measured: those the driver could run on.")
    seconds: float
    busy_share: float = Field(description="Share of those CPUs' time spent running anything "
                                          "(the driver too): user, nice, system, irq, softirq.")
    steal_share: float = Field(description="Share of their time the hypervisor gave elsewhere.")
    runnable_mean: float = Field(description="Runnable tasks on the whole machine, sampled "
                                             "5 times a second (the sampler not counted).")
    online_cpus: int
    samples: int


class HostSampler:
    """Samples /proc/stat from ``start`` (monotonic) for ``seconds``, in a thread."""

    def __init__(self, cpus: list[int], start: float, seconds: float) -> None:
        self.cpus = cpus
        self.start = start
        self.end = start + seconds
        self.samples: list[StatSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-sampler", daemon=True)

    def __enter__(self) -> HostSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        if self._stop.wait(max(0.0, self.start - time.monotonic())):
            return
        while True:
            sample = read_stat(self.cpus)
            if sample is None:
                return
            self.samples.append(sample)
            left = self.end - time.monotonic()
            if left <= 0 or self._stop.wait(min(SAMPLE_S, left)):
                return

    @property
    def last_second_busy(self) -> float | None:
        """Busy share of the driver's CPUs over about the last second (for a live view)."""
        samples = self.samples
        if len(samples) < 2:
            return None
        first = next((s for s in reversed(samples) if samples[-1].at - s.at >= 1.0), samples[0])
        delta = samples[-1].cpus - first.cpus
        return delta.busy / delta.total if delta.total else None

    def load(self) -> HostLoad | None:
        """What was measured, or None with fewer than two samples (a run under 0.2 s)."""
        samples = self.samples
        if len(samples) < 2:
            return None
        delta = samples[-1].cpus - samples[0].cpus
        total = delta.total or 1
        return HostLoad(
            cpus=self.cpus,
            seconds=samples[-1].at - samples[0].at,
            busy_share=delta.busy / total,
            steal_share=delta.steal / total,
            runnable_mean=sum(max(0, s.procs_running - 1) for s in samples) / len(samples),
            online_cpus=os.cpu_count() or len(self.cpus),
            samples=len(samples),
        )
