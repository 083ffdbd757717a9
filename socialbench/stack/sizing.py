"""What the local stack runs on N CPUs, and what it is projected to hold there.

:func:`size_stack` gives every default of ``socialbench up`` that follows the CPU count,
each with why: worker processes, nginx workers, memcached's threads and instances, the
store layout (shared; else the original's per-service stores; else those with Redis
Clusters for the hottest Redis and more memcached), FerretDB's GOMAXPROCS, and the driver's
processes and connections at the projected rate. :func:`project` gives, for one workload,
each part's projected ceiling (the rate at which its cores fill), the machine's projected
rate by the Universal Scalability Law fitted to measured points, and the projected max:
the lower of the two, and what sets it.

Everything projected comes from the reference measurement (``scaling_reference.json``,
:class:`Reference`; docs/scaling.md shows it and how it was taken), for cores as fast as
the reference machine's: an estimate, and every text here says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from socialbench import registry
from socialbench.registry import Store, StoreLayout
from socialbench.workloads.driver.config import driver_size
from socialbench.workloads.probes.ceilings import FERRETDB_WRITER_SHARE

REFERENCE_FILE = "scaling_reference.json"
# A layout holds when every store ceiling it can lift is this far above the machine's rate.
HEADROOM = 1.15
# memcached's threads per process before more processes (its lock and LRU contention past
# 16 threads; docs/scaling.md), and the fewest it runs (its default).
MEMCACHED_MAX_THREADS = 16
MEMCACHED_MIN_THREADS = 4
# A Redis Cluster's masters at least (Redis's own smallest cluster).
REDIS_CLUSTER_MIN_MASTERS = 3
# nginx workers: twice the cores its share needs, and at least two (or one per CPU below).
NGINX_HEADROOM = 2.0
# The driver keeps each process under this share of its ceiling (its verdict flags a
# process at 85% of a core).
DRIVER_PROCESS_SHARE = 0.5
# Open-loop connections: requests in flight at the projected rate and this latency, twice.
DRIVER_LATENCY_S = 0.05


class Fit(BaseModel):
    """The Universal Scalability Law fitted to measured points: X(N) = lambda*N / (1 + sigma*(N-1) +
    kappa*N*(N-1)), N the stack's cores (less the driver's where it shared them)."""

    model_config = ConfigDict(extra="forbid")

    lambda_rps: float = Field(description="The rate of one core.")
    sigma: float = Field(description="Contention: the serial share.")
    kappa: float = Field(description="Coherency: the cost of cores keeping each other "
                                     "current; 0 where two points cannot tell it from sigma.")
    points: list[tuple[float, float]] = Field(description="(cores, req/s) measured.")
    superlinear: bool = Field(default=False, description=(
        "More cores gave more per core: linear through the best per-core rate instead."))

    def describe(self) -> str:
        if self.superlinear:
            return (f"linear at the best per-core rate, {self.lambda_rps:,.0f} req/s (more "
                    "cores gave more per core: no contention to fit)")
        return (f"lambda {self.lambda_rps:,.0f} req/s, sigma {self.sigma:.3f}, "
                f"kappa {self.kappa:.4f}")

    def rate(self, cores: float) -> float:
        return self.lambda_rps * cores / (
            1 + self.sigma * (cores - 1) + self.kappa * cores * (cores - 1))


def fit_usl(points: list[tuple[float, float]]) -> Fit:
    """The USL through measured ``(cores, req/s)`` points: lambda from the fewest cores; with
    two points, sigma (kappa = 0: two points cannot separate the two); with more, both, by least
    squares on the linearised form (N*lambda/X - 1) = sigma*(N-1) + kappa*N*(N-1).

    Where more cores gave more per core (superlinear: a stack's CPU per request falls as
    its rate grows, its processes batching more work a wake-up), the USL has no contention
    to fit: the fit is linear through the best per-core rate, and says so (``superlinear``).
    """
    if not points:
        raise ValueError("no measured point to fit")
    points = sorted(points)
    cores0, rate0 = points[0]
    lam = rate0 / cores0  # per core, as measured at the fewest cores
    rows = [(n - 1, n * (n - 1), n * lam / x - 1) for n, x in points[1:] if n > 1]
    if not rows:
        return Fit(lambda_rps=lam, sigma=0.0, kappa=0.0, points=points)
    if len(rows) == 1:
        a, _, y = rows[0]
        sigma, kappa = y / a, 0.0
    else:
        saa = sum(a * a for a, _, _ in rows)
        sbb = sum(b * b for _, b, _ in rows)
        sab = sum(a * b for a, b, _ in rows)
        say = sum(a * y for a, _, y in rows)
        sby = sum(b * y for _, b, y in rows)
        det = saa * sbb - sab * sab
        sigma = (say * sbb - sby * sab) / det if det else say / saa
        kappa = (sby * saa - say * sab) / det if det else 0.0
    if sigma < 0:
        best = max(x / n for n, x in points)
        return Fit(lambda_rps=best, sigma=0.0, kappa=0.0, points=points, superlinear=True)
    return Fit(lambda_rps=lam, sigma=sigma, kappa=max(0.0, kappa), points=points)


class WorkloadReference(BaseModel):
    """One workload as measured on the reference machine, in one store layout."""

    model_config = ConfigDict(extra="forbid")

    rate_rps: float = Field(description="The rate it was measured at.")
    stack_ms: float = Field(description="The whole stack's CPU per request (ms).")
    components: dict[str, float] = Field(description="Each process group's CPU per request "
                                                     "(ms): services, nginx, each store "
                                                     "instance by its name in the layout.")
    driver_ms: float = Field(description="The driver's CPU per request (ms).")


class Reference(BaseModel):
    """The reference measurement every projection comes from (docs/scaling.md)."""

    model_config = ConfigDict(extra="forbid")

    measured: str = Field(description="When, where and how.")
    machine: str
    commit: str
    workloads: dict[str, dict[str, WorkloadReference]] = Field(
        description="workload -> store layout -> what was measured.")
    scaling: dict[str, list[tuple[float, float]]] = Field(
        description="workload -> (the stack's cores, max req/s at the SLA) measured.")
    driver_process_rps: float = Field(description="One driver process's highest rate with "
                                                  "its send lag under 1 ms (bench driver).")

    @classmethod
    def load(cls, path: Path | None = None) -> Reference:
        """The reference kept with the package, or the file at ``path``."""
        text = (path.read_text() if path is not None else
                resources.files(__package__).joinpath(REFERENCE_FILE).read_text())
        return cls.model_validate(json.loads(text))

    def fit(self, workload: str) -> Fit:
        return fit_usl([(float(n), float(x)) for n, x in self.scaling[workload]])


@dataclass(frozen=True)
class Choice:
    """One default and why it is what it is."""

    what: str
    value: str
    why: str


@dataclass(frozen=True)
class StackSize:
    """What ``up`` starts on ``cpus`` CPUs."""

    cpus: int
    workers: dict[str, int]
    nginx_workers: int
    memcached_threads: int
    memcached_instances: int
    store_layout: StoreLayout
    redis_clusters: dict[str, int]  # Redis instance -> masters, for those run as clusters
    mongodb_procs: int
    driver_processes: int
    driver_connections: int
    choices: list[Choice] = field(default_factory=list)

    @property
    def redis_mode(self) -> str:
        return "cluster" if self.redis_clusters else "standalone"


@dataclass(frozen=True)
class Ceiling:
    """A part's projected ceiling on the sized stack: ``units`` of ``capacity`` cores each."""

    component: str
    role: str
    units: int
    capacity_cores: float
    ms_per_request: float
    estimate_note: str = ""

    @property
    def rps(self) -> float:
        return self.units * self.capacity_cores * 1000 / self.ms_per_request


@dataclass(frozen=True)
class Projection:
    """One workload on a sized stack, projected from the reference (an estimate)."""

    workload: str
    layout: StoreLayout
    machine_rps: float  # the USL at the stack's cores
    ceilings: list[Ceiling]  # lowest first
    driver_cores: float

    @property
    def max_rps(self) -> float:
        lowest = self.ceilings[0].rps if self.ceilings else math.inf
        return min(self.machine_rps, lowest)

    @property
    def capped_by(self) -> str:
        """What sets the projected max: the machine's cores, or a part's ceiling."""
        if self.ceilings and self.ceilings[0].rps < self.machine_rps:
            first = self.ceilings[0]
            return f"{first.component} ({first.role})"
        return "the machine's cores"


def _share(reference: Reference, name: str) -> float:
    """``name``'s largest share of the stack's CPU over the reference workloads (a store
    instance's in the layout it exists in)."""
    shares = [ms / measured.stack_ms for layouts in reference.workloads.values()
              for measured in layouts.values()
              for component, ms in measured.components.items() if component == name]
    return max(shares, default=0.0)


def largest_share(reference: Reference, name: str) -> float:
    """Part ``name``'s largest share of the stack's CPU over the reference workloads (a
    service, nginx, or a store instance by its name in a layout): what the big-node values
    (socialbench/deploy/bignode.py) request CPU by."""
    return _share(reference, name)


def reference_shares(reference: Reference) -> dict[str, float]:
    """Each service's largest share of the stack's CPU over the reference workloads: what
    the registry's ``cpu_share`` keeps (tests/stack/test_sizing.py checks the two agree)."""
    return {spec.name: _share(reference, spec.name) for spec in registry.SERVICES}


def _ms(reference: Reference, workload: str, layout: StoreLayout, component: str) -> float:
    return reference.workloads[workload][layout.value].components.get(component, 0.0)


def _store_ceilings(size: StackSize, reference: Reference, workload: str,
                    mongodb: str) -> list[Ceiling]:
    layout = size.store_layout
    rows: list[Ceiling] = []
    for instance in registry.store_instances(layout):
        ms = _ms(reference, workload, layout, instance.name)
        if ms <= 0:
            continue
        if instance.store is Store.REDIS:
            masters = size.redis_clusters.get(instance.name, 1)
            rows.append(Ceiling(instance.name, "command thread" if masters == 1 else
                                f"command thread of each of {masters} masters", masters, 1.0,
                                ms, "keys spread evenly over the masters" if masters > 1
                                else ""))
        elif instance.store is Store.MEMCACHED:
            rows.append(Ceiling(instance.name, "worker thread",
                                size.memcached_threads * size.memcached_instances, 1.0, ms,
                                "gets spread evenly over the threads"))
        elif mongodb == "ferretdb":
            rows.append(Ceiling(instance.name, "go runtime", 1, float(size.mongodb_procs), ms))
    if mongodb == "ferretdb":
        rows += _writers(size, reference, workload)
    return rows


def _writers(size: StackSize, reference: Reference, workload: str) -> list[Ceiling]:
    """FerretDB's SQLite writers: one per service's database (each its own file, in either
    layout), each at its share of the CPU of that database's instance as measured on the
    per-service stores: an estimate."""
    rows = []
    for instance in registry.store_instances(StoreLayout.PER_SERVICE):
        ms = _ms(reference, workload, StoreLayout.PER_SERVICE, instance.name)
        if instance.store is not Store.MONGODB or ms <= 0:
            continue
        owner = registry.get(instance.owner or "")
        serving = registry.store_instance(owner, Store.MONGODB, size.store_layout)
        rows.append(Ceiling(serving.name, f"SQLite writer of {instance.owner}'s database", 1,
                            1.0, ms * FERRETDB_WRITER_SHARE,
                            f"estimate: {FERRETDB_WRITER_SHARE:.0%} of its CPU"))
    return rows


def project(size: StackSize, reference: Reference, workload: str,
            mongodb: str = "ferretdb") -> Projection:
    """``workload`` on ``size``, projected from the reference (for cores as fast as its)."""
    layout = size.store_layout
    rows = [Ceiling(name, "process", count, 1.0, _ms(reference, workload, layout, name))
            for name, count in size.workers.items() if _ms(reference, workload, layout, name)]
    nginx_ms = _ms(reference, workload, layout, "nginx")
    if nginx_ms:
        rows.append(Ceiling("nginx", "process", size.nginx_workers, 1.0, nginx_ms))
    rows += _store_ceilings(size, reference, workload, mongodb)
    machine = reference.fit(workload).rate(float(size.cpus))
    rate = min([machine, *(row.rps for row in rows)])
    return Projection(workload=workload, layout=layout, machine_rps=machine,
                      ceilings=sorted(rows, key=lambda row: row.rps),
                      driver_cores=rate / reference.driver_process_rps)


def _redis_clusters(reference: Reference, machine: dict[str, float],
                    layout: StoreLayout) -> dict[str, int]:
    """The Redis instances of ``layout`` whose one command thread would cap a workload
    below the machine's rate, each with the masters that lift it."""
    clusters: dict[str, int] = {}
    for instance in registry.store_instances(layout):
        if instance.store is not Store.REDIS:
            continue
        for workload, rate in machine.items():
            ms = _ms(reference, workload, layout, instance.name)
            if ms and 1000 / ms < HEADROOM * rate:
                masters = max(REDIS_CLUSTER_MIN_MASTERS, math.ceil(HEADROOM * rate * ms / 1000))
                clusters[instance.name] = max(clusters.get(instance.name, 0), masters)
    return clusters


def size_stack(cpus: int, reference: Reference | None = None, mongodb: str = "ferretdb",
               layout: StoreLayout | None = None) -> StackSize:
    """Every default of ``up`` on ``cpus`` CPUs, each with why (``layout``: as given
    instead of chosen)."""
    if cpus < 1:
        raise ValueError(f"a stack needs a CPU or more, not {cpus}")
    reference = reference or Reference.load()
    workloads = list(reference.workloads)
    machine = {w: reference.fit(w).rate(float(cpus)) for w in workloads}
    workers = {spec.name: registry.default_workers(spec, cpus) for spec in registry.SERVICES}
    nginx = max(min(cpus, 2), math.ceil(cpus * _share(reference, "nginx") * NGINX_HEADROOM))
    memcached_cores = max(_share(reference, i.name)
                          for i in registry.store_instances(StoreLayout.SHARED)
                          if i.store is Store.MEMCACHED) * cpus * 2
    threads_needed = max(MEMCACHED_MIN_THREADS, math.ceil(memcached_cores))
    instances = math.ceil(threads_needed / MEMCACHED_MAX_THREADS)
    threads = max(MEMCACHED_MIN_THREADS, math.ceil(threads_needed / instances))
    mongodb_procs = max(1, math.ceil(cpus * registry.MONGODB_CPU_SHARE))
    choices = [
        Choice("workers", ", ".join(f"{n} {c}" for n, c in workers.items() if c > 1)
               or "1 each", "each service's largest share of the stack's CPU over the "
                            f"reference workloads ({', '.join(workloads)}) times {cpus} "
                            "CPUs, rounded up (registry.default_workers)"),
        Choice("nginx workers", str(nginx), f"{NGINX_HEADROOM:g} times the cores nginx's "
                                            "share comes to, at least 2"),
        Choice("memcached", f"{instances} x {threads} threads",
               f"twice the cores its share comes to, {MEMCACHED_MIN_THREADS} to "
               f"{MEMCACHED_MAX_THREADS} threads a process"),
        Choice("MongoDB-wire server", f"GOMAXPROCS {mongodb_procs}" if mongodb == "ferretdb"
               else "mongod (every core)", f"its share of the stack's CPU "
                                           f"({registry.MONGODB_CPU_SHARE:g}) of {cpus}"),
    ]
    base = StackSize(cpus=cpus, workers=workers, nginx_workers=nginx,
                     memcached_threads=threads, memcached_instances=instances,
                     store_layout=StoreLayout.SHARED, redis_clusters={},
                     mongodb_procs=mongodb_procs, driver_processes=1, driver_connections=64)
    chosen, why = _choose_layout(base, reference, machine, mongodb, layout)
    choices.append(Choice("stores", _describe_layout(chosen), why))
    top = max(project(chosen, reference, w, mongodb).max_rps for w in workloads)
    split_cpus = math.ceil(cpus / 4)  # a split placement's driver CPUs on this machine
    default_processes, default_connections = driver_size(split_cpus)
    # A process at its ceiling uses at most a core: a bound on the driver's CPU.
    driver_cores = top / reference.driver_process_rps
    needed_processes = max(1, math.ceil(driver_cores / DRIVER_PROCESS_SHARE))
    needed_connections = math.ceil(2 * top * DRIVER_LATENCY_S)
    processes = max(default_processes, needed_processes)
    connections = max(default_connections, needed_connections, processes)
    enough = (default_processes >= needed_processes
              and default_connections >= needed_connections)
    choices.append(Choice(
        "driver", f"-P {processes} -c {connections}",
        f"at the projected {top:,.0f} req/s it needs at most {driver_cores:.1f} cores (one "
        f"process's ceiling here: {reference.driver_process_rps:,.0f} req/s), so "
        f"{needed_processes} processes each under {DRIVER_PROCESS_SHARE:.0%} of its "
        f"ceiling, and {needed_connections:,} connections (twice the requests in flight "
        f"at {DRIVER_LATENCY_S * 1000:.0f} ms); a ramp's defaults on the {split_cpus} CPUs "
        f"a split leaves it: -P {default_processes} -c {default_connections:,}, "
        + ("enough" if enough else "too few: give these")))
    return dataclasses.replace(chosen, driver_processes=processes,
                               driver_connections=connections, choices=choices)


def _describe_layout(size: StackSize) -> str:
    text = size.store_layout.value
    if size.redis_clusters:
        text += "; Redis Cluster for " + ", ".join(
            f"{name} ({masters} masters)" for name, masters in size.redis_clusters.items())
    return text


def _lifted(size: StackSize, reference: Reference, machine: dict[str, float],
            mongodb: str) -> list[str]:
    """The store ceilings of ``size`` that layouts can lift and that sit under the
    machine's rate (with headroom): what keeps the layout from being enough."""
    short = []
    for workload, rate in machine.items():
        for row in _store_ceilings(size, reference, workload, mongodb):
            if not row.role.startswith("SQLite writer") and row.rps < HEADROOM * rate:
                short.append(f"{row.component} {row.rps:,.0f} req/s on {workload} "
                             f"(the cores: {rate:,.0f})")
    return short


def _choose_layout(base: StackSize, reference: Reference, machine: dict[str, float],
                   mongodb: str, given: StoreLayout | None) -> tuple[StackSize, str]:
    """The first layout whose stores keep up with the cores: shared, per-service, then
    per-service with Redis Clusters for the Redis instances still short."""
    if given is not None:
        return dataclasses.replace(base, store_layout=given), "as given (--stores)"
    shared = base
    short = _lifted(shared, reference, machine, mongodb)
    if not short:
        return shared, ("shared: every store's ceiling is above what the cores could serve "
                        "(one instance of each is cheaper on few cores)")
    per_service = dataclasses.replace(base, store_layout=StoreLayout.PER_SERVICE)
    still = _lifted(per_service, reference, machine, mongodb)
    if not still:
        return per_service, f"per-service, as the original: shared, {'; '.join(short)}"
    clusters = _redis_clusters(reference, machine, StoreLayout.PER_SERVICE)
    scaled = dataclasses.replace(per_service, redis_clusters=clusters)
    left = _lifted(scaled, reference, machine, mongodb)
    why = (f"per-service with Redis Clusters: shared, {'; '.join(short)}; per-service, "
           f"{'; '.join(still)}")
    if left:
        why += f"; still short: {'; '.join(left)}"
    return scaled, why


PREDICTED_SIZES = (2, 16, 64, 128, 192)


def prediction_table(reference: Reference, sizes: tuple[int, ...] = PREDICTED_SIZES,
                     mongodb: str = "ferretdb") -> str:
    """docs/scaling.md's table: each workload's projected max rate at each size, in the
    shared layout, the per-service one and the one ``up`` picks (with ``mongodb``, then with
    a mongod), and what caps it first (every figure a prediction from the reference)."""
    lines = ["| workload | CPUs | the cores (USL) | shared | per-service | as up sizes it | "
             "as up sizes it, with mongod |", "|---|---|---|---|---|---|---|"]
    for workload in reference.workloads:
        for cpus in sizes:
            cells = []
            for layout, flavour in ((StoreLayout.SHARED, mongodb),
                                    (StoreLayout.PER_SERVICE, mongodb), (None, mongodb),
                                    (None, "mongod")):
                size = size_stack(cpus, reference, flavour, layout)
                projection = project(size, reference, workload, flavour)
                where = "" if layout is not None else f" ({_describe_layout(size)})"
                cells.append(f"{projection.max_rps:,.0f}: {projection.capped_by}{where}")
            machine = reference.fit(workload).rate(float(cpus))
            lines.append(f"| {workload} | {cpus} | {machine:,.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reference_table(reference: Reference) -> str:
    """docs/scaling.md's table of the reference: each workload and layout's rate, the
    stack's CPU per request, the driver's, and the components that took the most."""
    lines = ["| workload | stores | rate measured | stack CPU ms/req | driver ms/req | "
             "the largest parts, ms/req |", "|---|---|---|---|---|---|"]
    for workload, layouts in reference.workloads.items():
        for layout, measured in layouts.items():
            top = sorted(measured.components.items(), key=lambda item: -item[1])[:6]
            parts = ", ".join(f"{name} {ms:.3f}" for name, ms in top)
            lines.append(f"| {workload} | {layout} | {measured.rate_rps:,.0f} req/s | "
                         f"{measured.stack_ms:.2f} | {measured.driver_ms:.3f} | {parts} |")
    return "\n".join(lines) + "\n"


def scaling_table(reference: Reference) -> str:
    """docs/scaling.md's table of the measured points and the fit through them."""
    lines = ["| workload | the stack's cores: max req/s at the SLA | per core | the fit |",
             "|---|---|---|---|"]
    for workload, points in reference.scaling.items():
        fit = reference.fit(workload)
        measured = ", ".join(f"{cores:g}: {rate:,.0f}" for cores, rate in points)
        per_core = ", ".join(f"{rate / cores:,.0f}" for cores, rate in points)
        lines.append(f"| {workload} | {measured} | {per_core} | {fit.describe()} |")
    return "\n".join(lines) + "\n"


def driver_table(reference: Reference, sizes: tuple[int, ...] = PREDICTED_SIZES[1:],
                 mongodb: str = "ferretdb") -> str:
    """docs/scaling.md's table of the driver at each size's projected top rate (a
    prediction): the cores it needs at most, the processes and connections ``up`` sizes."""
    lines = ["| CPUs | projected top rate (as up sizes it) | driver cores, at most | "
             "processes | connections |", "|---|---|---|---|---|"]
    for cpus in sizes:
        size = size_stack(cpus, reference, mongodb)
        top = max(project(size, reference, w, mongodb).max_rps for w in reference.workloads)
        lines.append(f"| {cpus} | {top:,.0f} req/s | {top / reference.driver_process_rps:.1f} "
                     f"| {size.driver_processes} | {size.driver_connections:,} |")
    return "\n".join(lines) + "\n"


DOC_TABLES = {"reference": reference_table, "scaling": scaling_table,
              "prediction": prediction_table, "driver": driver_table}


def doc_block(name: str, reference: Reference) -> str:
    """One generated block of docs/scaling.md, between its markers."""
    return (f"<!-- {name} table: generated by socialbench bench reference -->\n"
            f"{DOC_TABLES[name](reference)}<!-- end of {name} table -->")


def render_doc(text: str, reference: Reference) -> str:
    """``text`` (docs/scaling.md) with each generated block made from ``reference``."""
    for name in DOC_TABLES:
        start = f"<!-- {name} table: generated by socialbench bench reference -->"
        end = f"<!-- end of {name} table -->"
        head, found, rest = text.partition(start)
        if not found:
            raise ValueError(f"no '{start}' in the document")
        _, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"no '{end}' after '{start}'")
        text = head + doc_block(name, reference) + tail
    return text
