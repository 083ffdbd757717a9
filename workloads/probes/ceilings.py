"""Ceilings: the request rate at which each part of the stack that cannot use more than a
fixed number of cores would fill them, from its CPU per request at a step.

A *unit* is one such part: a service worker process or an nginx worker (one core each:
a Python process holds its interpreter's lock, an nginx worker is one thread), a Redis
server's command thread, each memcached worker thread, FerretDB's Go runtime (its
GOMAXPROCS cores) and FerretDB's SQLite writer (one core; an estimate, below). Its
ceiling is ``capacity * requests / CPU seconds``: the rate at which its CPU per request
would keep its cores busy. A component's ceiling is its lowest unit's (the first to fill).

Entry points: :func:`step_ceilings` (every unit of a step, lowest first),
:func:`lowest_per_component` and :func:`ceiling_verdict` (what the summary says).

Where a component's units are measured one by one (the local stack, through /proc) the
ceiling is exact for the step's workload mix; where only a container's or pod's total is
read, it is split evenly over the units its command declares (:func:`declared_units`),
and the record says so (``basis``). CPU per request at a low rate includes the wake-ups
of an idle stack, so a ceiling from a low step is lower than the real one: the summary
takes the ceilings of the step that found the max rate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from socialbench.workloads.probes.records import Strict, UnitRecord

# Within this share below a ceiling, the max rate measures that component.
NEAR = 0.15
# FerretDB's SQLite writes one transaction at a time per database file: the share of its
# CPU that is inside that lock, from perf under compose-post (SQLite's own work in the
# inserts about 30%, commits 11%: docs/performance.md). All of it is counted against one
# database, so the writer's ceiling is a lower bound, and marked an estimate.
FERRETDB_WRITER_SHARE = 0.41
SHOWN = 5


@dataclass(frozen=True)
class DeclaredUnits:
    """The units a component's command declares, for components read whole."""

    count: int
    role: str
    capacity_cores: float = 1.0


class CeilingRecord(Strict):
    """The rate at which one unit of the stack would fill the cores it can use."""

    component: str
    unit: str = Field(description="The process or thread, or 'N units (even split)'.")
    role: str = Field(description="process, command thread, worker thread, go runtime, "
                                  "writer.")
    capacity_cores: float = Field(description="The cores it can use at most.")
    cpu_ms_per_request: float = Field(description="Its CPU per request at the step.")
    ceiling_rps: float = Field(description="capacity * 1000 / cpu_ms_per_request.")
    basis: str = Field(description="measured (per process or thread, /proc), declared (a "
                                   "container's or pod's CPU split over the units its "
                                   "command declares) or estimate (how).")
    estimate: bool = Field(default=False, description="True: a modelled figure, not a "
                                                      "measured one.")
    lift: str = Field(description="What to set to lift it.")


def lift_advice(component: str, kind: str, role: str, units: int) -> str:
    """What raises this unit's ceiling, as options of ``up`` and values of the chart."""
    if kind == "service":
        return (f"more workers: up --workers {component}={units + 1} (or up --cpus with "
                f"more CPUs); chart services.{component}.workers or .replicas")
    if kind == "gateway":
        return (f"more nginx workers: up --nginx-workers {units + 1}; chart "
                "gateway.replicas")
    if "redis" in component:
        if component == "redis":
            return ("an instance per service: up --stores per-service; then a Redis "
                    "Cluster for the hottest (up --redis-cluster home-timeline-redis)")
        return (f"shard it: up --redis-cluster {component} (a Redis Cluster of "
                "--redis-cluster-masters masters); chart stores.instances."
                f"{component} with mode cluster")
    if "memcached" in component:
        return (f"more threads: up --memcached-threads {units + 1}, or more instances: "
                "up --memcached-instances N")
    if role == "writer":
        return ("a mongod on PATH (WiredTiger writes in parallel; FerretDB's SQLite writes "
                "one transaction at a time per database)")
    if "mongodb" in component:
        return ("an instance per service: up --stores per-service (each FerretDB its own "
                "Go runtime), or more CPUs: its GOMAXPROCS follows up --cpus")
    return "more cores for it"


def declared_units(argv: Sequence[str], env: Mapping[str, str], host_cpus: int
                   ) -> DeclaredUnits | None:
    """The units a container's or pod's command line declares (None: no fixed count,
    e.g. mongod, or a command the suite does not know)."""
    line = " ".join(argv)
    program = next((a.rsplit("/", 1)[-1] for a in argv if not a.startswith("-")), "")
    if "serve" in argv:
        match = re.search(r"--workers[ =](\d+)", line)
        return DeclaredUnits(int(match[1]) if match else 1, "process")
    if program.startswith("redis-server"):
        return DeclaredUnits(1, "command thread")
    if program.startswith("memcached"):
        match = re.search(r"(?:-t|--threads)[ =]?(\d+)", line)
        return DeclaredUnits(int(match[1]) if match else 4, "worker thread")
    if program.startswith("nginx"):
        match = re.search(r"worker_processes (\d+)", line)
        return DeclaredUnits(int(match[1]) if match else host_cpus, "process")
    if program.startswith("ferretdb"):
        procs = env.get("GOMAXPROCS", "")
        return DeclaredUnits(1, "go runtime", float(procs) if procs.isdigit() else host_cpus)
    return None


def split_declared(cpu_seconds: float, declared: DeclaredUnits) -> UnitRecord:
    """A component read whole, as one of its declared units, each with an even share."""
    count = max(1, declared.count)
    units = f"{count} {declared.role}" + ("" if count == 1 else
                                           "es" if declared.role.endswith("s") else "s")
    return UnitRecord(
        unit=f"each of {units}", role=declared.role, cpu_seconds=cpu_seconds / count,
        capacity_cores=declared.capacity_cores, count=count,
        basis=f"declared: its CPU split evenly over {units} (per-unit CPU not measured)")


def _writer(unit: UnitRecord) -> UnitRecord:
    return UnitRecord(
        unit=f"{unit.unit}: its SQLite writer", role="writer",
        cpu_seconds=unit.cpu_seconds * FERRETDB_WRITER_SHARE, capacity_cores=1.0,
        basis=f"estimate: {FERRETDB_WRITER_SHARE:.0%} of FerretDB's CPU (its SQLite work "
              "and commits, by perf) counted as one database's writer, which writes one "
              "transaction at a time; a lower bound")


@dataclass(frozen=True)
class ComponentUnits:
    """A component of a step and its units' CPU (a bundle's ComponentRecord fits)."""

    name: str
    kind: str
    units: Sequence[UnitRecord]


def _working(units: Sequence[UnitRecord], role: str) -> int:
    """The units of ``role`` that did the component's work: those with 1% of its CPU or
    more (not an nginx master, or the parent that forks a service's workers)."""
    total = sum(u.cpu_seconds * u.count for u in units)
    return sum(u.count for u in units
               if u.role == role and u.cpu_seconds * u.count >= 0.01 * total) or 1


def step_ceilings(components: Iterable[ComponentUnits], requests: int
                  ) -> list[CeilingRecord]:
    """Every unit's ceiling over a step that answered ``requests``, lowest first, with
    FerretDB's writer estimate as a row of its own; units that used no CPU have none."""
    if requests <= 0:
        return []
    rows: list[CeilingRecord] = []
    for component in components:
        units = list(component.units)
        for unit in units + [_writer(u) for u in units if u.role == "go runtime"]:
            if unit.cpu_seconds <= 0:
                continue
            ms = unit.cpu_seconds * 1000 / requests
            rows.append(CeilingRecord(
                component=component.name, unit=unit.unit, role=unit.role,
                capacity_cores=unit.capacity_cores, cpu_ms_per_request=ms,
                ceiling_rps=unit.capacity_cores * 1000 / ms, basis=unit.basis,
                estimate=unit.basis.startswith("estimate"),
                lift=lift_advice(component.name, component.kind, unit.role,
                                 _working(units, unit.role))))
    return sorted(rows, key=lambda row: row.ceiling_rps)


def lowest_per_component(ceilings: Iterable[CeilingRecord], most: int = SHOWN
                         ) -> list[CeilingRecord]:
    """Each component's lowest ceiling (FerretDB's writer apart from its runtime), the
    ``most`` lowest of them."""
    seen: dict[tuple[str, bool], CeilingRecord] = {}
    for row in sorted(ceilings, key=lambda r: r.ceiling_rps):
        seen.setdefault((row.component, row.role == "writer"), row)
    return list(seen.values())[:most]


def describe(row: CeilingRecord) -> str:
    """``home-timeline 2,310 req/s (its busiest process, 0.433 ms a request)``."""
    tag = " (estimate)" if row.estimate else ""
    return (f"{row.component} {row.ceiling_rps:,.0f} req/s{tag} ({row.unit}: "
            f"{row.cpu_ms_per_request:.3f} ms of CPU a request, {row.capacity_cores:g} "
            f"core{'s' if row.capacity_cores != 1 else ''})")


def ceiling_verdict(max_rate: float | None, lowest: Sequence[CeilingRecord],
                    machine_bound: bool) -> str:
    """What the max rate measures: a component (within :data:`NEAR` of its ceiling, with
    what lifts it), the machine (every CPU of the stack busy), or neither."""
    if max_rate is None or not lowest:
        return "no ceilings: per-process CPU was not measured at a step that held the SLA"
    near = [row for row in lowest if max_rate >= (1 - NEAR) * row.ceiling_rps]
    if near:
        row = near[0]
        return (f"the max rate, {max_rate:,.6g} req/s, is within {NEAR:.0%} of "
                f"{describe(row)}: it measures {row.component}, not the machine. To lift "
                f"it: {row.lift}")
    first = lowest[0]
    headroom = first.ceiling_rps / max_rate - 1 if max_rate else 0.0
    if machine_bound:
        return (f"every CPU of the stack was busy: the machine is the bound; the lowest "
                f"ceiling, {describe(first)}, is {headroom:.0%} above the max rate")
    return (f"no part within {NEAR:.0%} of its ceiling and the stack's CPUs not all busy: "
            f"the limit is waiting (stores, queues), not CPU; the lowest ceiling, "
            f"{describe(first)}, is {headroom:.0%} above the max rate")
