"""Where the CPU went: CPU time and peak memory of every process of the local stack.

A :class:`ResourceSampler` is given the stack's processes (each component's leading
pid; it follows all their children: service workers, nginx workers), takes their
CPU times at the start and end of a measurement and samples their resident memory
each second in between. It also takes the CPU of each *unit* that cannot use more than a
fixed number of cores (:func:`process_units`: a Python or nginx process, a Redis server's
command thread, each memcached worker thread, FerretDB's Go runtime), from which
``ceilings.py`` computes the rate at which each would fill its cores. A
:class:`ReadingSampler` measures components read whole from outside instead (containers,
pods), through the same interface.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from socialbench.workloads.driver.hostload import StatSample, read_stat
from socialbench.workloads.probes.ceilings import DeclaredUnits, split_declared
from socialbench.workloads.probes.records import UnitRecord

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ComponentUsage:
    """One component's share of a measurement."""

    name: str
    kind: str
    cpu_seconds: float
    peak_rss_bytes: int
    processes: int
    units: tuple[UnitRecord, ...] = field(default=())


@dataclass(frozen=True)
class _Unit:
    key: tuple[int, int]  # (pid, tid); tid 0: the whole process
    unit: str
    role: str
    capacity_cores: float
    cpu_seconds: float


def _thread_cpu(pid: int, tid: int) -> tuple[str, float] | None:
    """A thread's name and CPU seconds (user + system), from /proc; None when gone."""
    task = Path(f"/proc/{pid}/task/{tid}")
    try:
        stat = (task / "stat").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    return name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _threads(pid: int) -> list[tuple[int, str, float]]:
    try:
        tids = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []
    return [(tid, *found) for tid in tids if (found := _thread_cpu(pid, tid)) is not None]


def _go_max_procs(process: psutil.Process) -> float:
    try:
        value = process.environ().get("GOMAXPROCS", "")
    except psutil.Error:
        value = ""
    if value.isdigit() and int(value) > 0:
        return float(value)
    try:
        return float(len(process.cpu_affinity() or [])) or float(os.cpu_count() or 1)
    except (psutil.Error, AttributeError):
        return float(os.cpu_count() or 1)


def process_units(process: psutil.Process) -> list[_Unit]:
    """The units of one process, by what it runs: Redis executes commands on its main
    thread; memcached serves on its ``mc-worker`` threads (its main thread accepts);
    FerretDB is a Go runtime of GOMAXPROCS cores; a multi-threaded server the suite
    does not know (mongod, Jaeger) has none; any other process (a Python service
    worker, an nginx worker) is one unit of one core."""
    try:
        name, cpu = process.name(), process.cpu_times()
    except psutil.Error:
        return []
    pid = process.pid
    label = f"pid {pid} ({name})"
    if name.startswith("redis-server"):
        threads = [t for t in _threads(pid) if t[0] == pid]
        return [_Unit((pid, tid), f"{label} command thread", "command thread", 1.0, seconds)
                for tid, _, seconds in threads]
    if name == "memcached":
        return [_Unit((pid, tid), f"pid {pid} thread {tid} ({thread})",
                      "worker thread" if thread.startswith("mc-worker") else "thread", 1.0,
                      seconds)
                for tid, thread, seconds in _threads(pid)
                if thread.startswith("mc-worker") or tid == pid]
    if name == "ferretdb":
        return [_Unit((pid, 0), label, "go runtime", _go_max_procs(process),
                      cpu.user + cpu.system)]
    if name in ("mongod", "jaeger"):
        return []
    return [_Unit((pid, 0), label, "process", 1.0, cpu.user + cpu.system)]


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _rss(processes: list[psutil.Process]) -> int:
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total


class ResourceSampler:
    """Measure the stack's processes over one interval (use as a context manager)."""

    def __init__(self, components: dict[str, tuple[str, int]], interval_s: float = 1.0) -> None:
        """``components``: name -> (kind, pid of the process that leads it)."""
        self.components = components
        self.interval_s = interval_s
        self._start_cpu: dict[str, float] = {}
        self._peak_rss: dict[str, int] = dict.fromkeys(components, 0)
        self._processes: dict[str, list[psutil.Process]] = {}
        self._start_units: dict[tuple[int, int], float] = {}
        # The CPUs the processes may run on, and how busy those were over the measurement
        # (anyone's work and steal, in cores): whether the stack's CPUs were full.
        self.cpus: list[int] | None = None
        self.cpus_busy_cores: float | None = None
        self._start_stat: StatSample | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_memory, daemon=True)
        self.usage: list[ComponentUsage] = []

    def _refresh(self) -> None:
        self._processes = {name: _tree(pid) for name, (_, pid) in self.components.items()}

    # What one refresh found of component ``name``; a subclass measuring something else
    # than process trees (e.g. containers) overrides these and _refresh.
    def _cpu_of(self, name: str) -> float:
        return _cpu(self._processes.get(name, []))

    def _rss_of(self, name: str) -> int:
        return _rss(self._processes.get(name, []))

    def _count_of(self, name: str) -> int:
        return len(self._processes.get(name, []))

    def _units_of(self, name: str) -> list[_Unit]:
        return [unit for process in self._processes.get(name, [])
                for unit in process_units(process)]

    def _sample_memory(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._refresh()
            for name in self.components:
                self._peak_rss[name] = max(self._peak_rss[name], self._rss_of(name))

    def __enter__(self) -> ResourceSampler:
        self._refresh()
        self._start_cpu = {name: self._cpu_of(name) for name in self.components}
        self._start_units = {unit.key: unit.cpu_seconds for name in self.components
                             for unit in self._units_of(name)}
        self.cpus = self._affinity()
        self._start_stat = read_stat(self.cpus) if self.cpus else None
        for name in self.components:
            self._peak_rss[name] = self._rss_of(name)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpus_busy_cores = self._busy_cores()
        self._refresh()
        self.usage = [
            ComponentUsage(
                name=name,
                kind=kind,
                cpu_seconds=max(0.0, self._cpu_of(name) - self._start_cpu.get(name, 0.0)),
                peak_rss_bytes=max(self._peak_rss[name], self._rss_of(name)),
                processes=self._count_of(name),
                units=self._unit_usage(name),
            )
            for name, (kind, _) in self.components.items()
        ]
        self.close()

    def _affinity(self) -> list[int] | None:
        """The CPUs the components' processes may run on, together (None: not known)."""
        cpus: set[int] = set()
        for _, pid in self.components.values():
            try:
                cpus.update(psutil.Process(pid).cpu_affinity() or [])
            except (psutil.Error, AttributeError, ValueError):
                continue
        return sorted(cpus) or None

    def _busy_cores(self) -> float | None:
        end = read_stat(self.cpus) if self.cpus else None
        if self._start_stat is None or end is None or not self.cpus:
            return None
        delta = end.cpus - self._start_stat.cpus
        return (delta.busy + delta.steal) / delta.total * len(self.cpus) if delta.total else None

    def _unit_usage(self, name: str) -> tuple[UnitRecord, ...]:
        """Each unit's CPU over the measurement (a unit started meanwhile: all of its own)."""
        return tuple(
            UnitRecord(unit=unit.unit, role=unit.role, capacity_cores=unit.capacity_cores,
                       cpu_seconds=max(0.0, unit.cpu_seconds
                                       - self._start_units.get(unit.key, 0.0)))
            for unit in self._units_of(name))

    def busy_cores(self, window_s: float) -> float:
        """The CPU the processes use now, in cores: their CPU time over ``window_s``."""
        self._refresh()
        before, started = self._total_cpu(), time.perf_counter()
        time.sleep(window_s)
        self._refresh()
        after, elapsed = self._total_cpu(), time.perf_counter() - started
        return max(0.0, after - before) / elapsed

    def _total_cpu(self) -> float:
        return sum(self._cpu_of(name) for name in self.components)

    def close(self) -> None:
        """Let go of what reading the processes holds (nothing here; a subclass may)."""

    @property
    def total_cpu_seconds(self) -> float:
        return sum(u.cpu_seconds for u in self.usage)


@dataclass(frozen=True)
class Reading:
    """One reading of a component read whole: CPU seconds so far, memory and processes now."""

    cpu_seconds: float
    memory_bytes: int
    processes: int


NOTHING = Reading(0.0, 0, 0)


class ReadingSampler(ResourceSampler):
    """Measure components read whole at each refresh (containers, pods), not process trees.

    A subclass says how in :meth:`_read`; a component missing from a refresh (gone,
    restarting) reads as nothing, as a vanished process does.
    """

    def __init__(self, kinds: Mapping[str, str], interval_s: float = 1.0,
                 declared: Mapping[str, DeclaredUnits] | None = None) -> None:
        """``kinds``: component name -> kind; ``declared``: the units each component's
        command declares, over which its CPU is split for its ceilings."""
        super().__init__({name: (kind, 0) for name, kind in kinds.items()}, interval_s)
        self.declared = dict(declared or {})
        self._readings: dict[str, Reading] = {}
        # For subclasses whose reading is one request per component or per node.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=type(self).__name__)

    def _read(self) -> dict[str, Reading]:
        """Every component's reading now, by name."""
        raise NotImplementedError

    def _refresh(self) -> None:
        self._readings = self._read()

    def _cpu_of(self, name: str) -> float:
        return self._readings.get(name, NOTHING).cpu_seconds

    def _rss_of(self, name: str) -> int:
        return self._readings.get(name, NOTHING).memory_bytes

    def _count_of(self, name: str) -> int:
        return self._readings.get(name, NOTHING).processes

    def _units_of(self, name: str) -> list[_Unit]:
        return []  # read whole: see _unit_usage

    def _affinity(self) -> list[int] | None:
        return None  # not this machine's processes

    def _unit_usage(self, name: str) -> tuple[UnitRecord, ...]:
        declared = self.declared.get(name)
        if declared is None:
            return ()
        cpu = max(0.0, self._cpu_of(name) - self._start_cpu.get(name, 0.0))
        return (split_declared(cpu, declared),)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


# What measures the target over one step: a sampler (None: nothing to measure) and how.
SamplerFactory = Callable[[], tuple[ResourceSampler | None, str]]
