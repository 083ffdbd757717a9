"""A ramp's results bundle: ``results/<UTC time>-<label>/``, written as the ramp runs.

    manifest.json      what ran, where, on what: version, git, configuration, command
                       line, dataset and seed, hardware, software versions
    steps.json         one record per step (offered, achieved, errors by kind, latency
                       percentiles, send lag, SLA verdict, CPU and memory, energy, the
                       host's speed measured before it and whether it moved)
    steps.csv          the same, one flat row per step
    resources.csv      CPU seconds and peak memory per component per step
    latency-by-service.csv  with ramp --trace-ratio: each service's exclusive time (p50,
                       p99) per endpoint per step, from the traces (also in steps.json)
    summary.json       the answer: max rate at the SLA and its p99, per repeat and overall,
                       and whether the host's speed held while it was found
    histograms/*.hlog  one HdrHistogram interval log per step (latency from the intended
                       send time, µs)
    raw/*.json         the driver's full result per step (every histogram, the timeline)
    schema/*.json      JSON Schemas of manifest.json, steps.json and summary.json
    *.png, report.html the plots and the report (``socialbench report DIR`` rebuilds them)

Steps are written as soon as they finish, so an interrupted ramp leaves a usable bundle.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from socialbench import __version__, registry
from socialbench.workloads.definitions.check import CheckResult
from socialbench.workloads.definitions.seed import SeedRecord
from socialbench.workloads.driver import LatencyStats
from socialbench.workloads.driver.histogram import new_histogram
from socialbench.workloads.driver.placement import Placement
from socialbench.workloads.driver.verdict import Contention
from socialbench.workloads.ramp.bottleneck import (
    ComponentLoad,
    Limit,
    find_bottleneck,
    usable_cores,
)
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.ramp.engine import (
    Phase,
    RampConfig,
    RampObserver,
    RampOutcome,
    RampRun,
    StepRun,
    StopReason,
)
from socialbench.workloads.ramp.memory import MemoryRecord
from socialbench.workloads.ramp.spans import (
    SERVICE_TIME_COLUMNS,
    SERVICE_TIME_CSV,
    LatencyByService,
    service_time_rows,
)

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
STEPS_JSON = "steps.json"
STEPS_CSV = "steps.csv"
RESOURCES_CSV = "resources.csv"
SUMMARY = "summary.json"
HISTOGRAMS = "histograms"
RAW = "raw"
SCHEMAS = "schema"
LATENCY_KEYS = ("50", "75", "90", "99", "99.9", "99.99", "100")
US_PER_MS = 1000


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunHeader(Strict):
    """What every bundle's manifest says first: which socialbench ran, when, how it was
    started and at which commit."""

    socialbench_version: str
    created_at: datetime
    label: str
    command_line: list[str]
    git: dict[str, Any]


class Dataset(Strict):
    """What the target held while it was measured."""

    fresh: bool = Field(description="Stores emptied and the graph re-seeded before each repeat.")
    graph: str | None = Field(default=None, description="The seeded graph, e.g. synthetic.")
    users: int = Field(description="Users the workload draws ids from.")
    posts_per_user: int | None = None
    seed: int | None = Field(default=None, description="Seed of the graph and its posts.")
    note: str = ""
    path: str | None = Field(
        default=None, description="How the graph was seeded: api (through the front end) or "
                                  "bulk (the services' logic in process); None: not known.")
    seeded: SeedRecord | None = Field(
        default=None, description="The seeding the stack's data came from (socialbench "
                                  "seed's record: dataset, path, time), when known.")

    def identity(self) -> tuple[str, int | None, int | None] | None:
        """What makes two datasets the same: graph, seed and posts per user (None: the
        data is not known)."""
        if self.seeded is not None:
            data = self.seeded.dataset
            return data.source, data.seed, data.posts_per_user
        if self.graph is not None:
            return self.graph, self.seed, self.posts_per_user
        return None


class StackRecord(Strict):
    """How the local stack that was measured was configured (its processes and tracing)."""

    workers: dict[str, int] = Field(
        description="worker processes of every service, by name (in bundles before worker "
                    "counts came from the CPU count: only the services given their own).")
    default_workers: int | None = Field(
        default=None, description="Workers of every service not in workers, when given "
                                  "(up --default-workers); None: from the CPU count.")
    workers_chosen: str | None = Field(
        default=None, description="How the worker counts were chosen: cpu-count (each "
                                  "service its share of the stack's CPU of workers_cpus "
                                  "CPUs) or given (--workers, --default-workers); None: an "
                                  "older bundle.")
    workers_cpus: int | None = Field(
        default=None, description="The CPUs the stack could use when its worker counts "
                                  "were chosen; None: an older bundle.")
    nginx_workers: str
    memcached_servers: int | None = Field(
        default=None, description="memcached processes the services spread their cached "
                                  "keys over (up --memcached-instances); None: an older "
                                  "bundle (one).")
    tracing: bool = Field(description="Services sent spans during the run (to Jaeger, or "
                                      "to the ramp's receiver: ramp --trace-ratio).")
    trace_sample_ratio: float | None = Field(
        description="Share of front-end requests traced, when tracing.")
    durability: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="What each store keeps over a restart, by store: Redis appendonly and "
                    "appendfsync, the MongoDB-wire server's journal settings, memcached none.")
    store_layout: str | None = Field(
        default=None, description="shared (one instance of each store for every service) "
                                  "or per-service (as the original: up --stores); None: an "
                                  "older bundle (shared).")
    store_instances: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Every store instance that ran, with the services that used it.")
    redis_mode: str | None = Field(
        default=None, description="standalone, replicated (a primary and read replicas) "
                                  "or cluster (a Redis Cluster), for each Redis instance "
                                  "(up --redis-mode); None: an older bundle (standalone).")
    redis_servers: int | None = Field(
        default=None, description="redis-server processes of each Redis instance.")
    store_clients: dict[str, dict[str, dict[str, str]]] = Field(
        default_factory=dict,
        description="Which client (ours, or PyMongo's for credentials and replica sets) and "
                    "topology served each store of each service, by service then store, as "
                    "the services' /stats said when the run began; empty: an older bundle.")

    def service_workers(self) -> dict[str, int]:
        """Worker processes of every service, older bundles' default filled in."""
        default = self.default_workers or 1
        return {spec.name: self.workers.get(spec.name, default) for spec in registry.SERVICES}


class PodResources(Strict):
    """CPU and memory of a pod's containers together, as its spec asks."""

    cpu: float | None = Field(description="Cores; None: none (a limit: some container has "
                                          "none, so the pod is unlimited).")
    memory: int | None = Field(description="Bytes; None: none (a limit: some container has "
                                           "none, so the pod is unlimited).")


class PodRecord(Strict):
    """One pod of a Kubernetes release that was measured (ramp --pods), as the ramp began."""

    name: str = Field(description="The pod's name.")
    component: str = Field(description="Its component in resources.csv (the pod's "
                                       "app.kubernetes.io/name; name-2, name-3, … for more "
                                       "replicas, by pod name).")
    kind: str = Field(description="service, store or gateway.")
    node: str
    node_arch: str | None = Field(
        default=None, description="Its node's architecture (its label kubernetes.io/arch, "
                                  "else what its kubelet reports); None: not read (an older "
                                  "bundle, or the node could not be read).")
    node_cpus: float | None = Field(
        default=None, description="Its node's allocatable CPUs, as Kubernetes counts them.")
    node_cpuset: str | None = Field(
        default=None, description="The CPUs its node's cgroup may use, where the node says "
                                  "(annotation socialbench.io/cpus, set by "
                                  "scripts/k8s-node.sh), e.g. '1'; None: not said.")
    image: str = Field(description="Its containers' images, comma-separated when several.")
    requests: PodResources
    limits: PodResources
    restarts: int = Field(description="Restarts of its containers, together.")


class Manifest(RunHeader):
    """manifest.json: everything needed to know what ran and to run it again."""

    schema_version: int = SCHEMA_VERSION
    config: RampConfig
    dataset: Dataset
    stack: StackRecord | None = Field(
        default=None, description="The local stack's configuration; None for another target.")
    pods: list[PodRecord] | None = Field(
        default=None, description="The Kubernetes release's pods that were measured (ramp "
                                  "--pods); None: another target, or an older bundle.")
    hardware: dict[str, Any]
    software: dict[str, Any]
    resources_source: str = Field(description="How per-component CPU and memory were measured.")
    energy_source: str = Field(description="How energy was measured, or why it was not.")
    placement: Placement | None = Field(
        default=None, description="Which CPUs the driver had and which the stack had "
                                  "(--cpu-placement); None: not recorded (an older bundle).")
    memory: MemoryRecord | None = Field(
        default=None, description="The stack's memory per 100k users and posts (measured "
                                  "figures), projected for this run's data, and the "
                                  "machine's; None: an older bundle.")


class ComponentRecord(Strict):
    name: str
    kind: str
    cpu_seconds: float
    cpu_cores: float = Field(description="cpu_seconds / span: cores kept busy on average.")
    peak_rss_bytes: int
    processes: int


class ResourceRecord(Strict):
    """CPU and memory of every process of the stack over one step (warm-up and drain too)."""

    available: bool
    note: str = Field(description='"unavailable: <reason>" when not measured.')
    span_s: float
    components: list[ComponentRecord]
    stack_cpu_seconds: float | None
    cpu_ms_per_request: float | None = Field(description="Stack CPU / responses in the span.")


class SettleRecord(Strict):
    """The wait before a step until the target's processes were idle (the ramp's
    settle_cores): a failed step can leave work queued in them that outlives its requests."""

    waited_s: float
    first_busy_cores: float = Field(description="The target's CPU, in cores, when the wait "
                                                "began: what the last step left behind.")
    busy_cores: float = Field(description="... and when the step started.")
    idle: bool = Field(description="False: still busy after settle_max_s, and the step "
                                   "started on its backlog.")


class EnergyRecord(Strict):
    available: bool
    source: str = Field(description="rapl, power-cmd or unavailable.")
    note: str
    seconds: float
    joules: float | None
    watts: float | None
    joules_per_request: float | None
    requests_per_joule: float | None = Field(description="(req/s) per watt.")


class HostSpeedRecord(Strict):
    """The host's speed measured with fixed work just before a step
    (workloads/ramp/calibration.py), against the run's first measurement."""

    calibration: Calibration
    speed: float = Field(description="Geometric mean of the parts' ratios to the run's "
                                     "first calibration (1.0: as fast; 0.8: a fifth slower).")
    parts: dict[str, float] = Field(description="cpu, loopback and memory: each part's "
                                                "ratio to the run's first calibration.")
    flagged: bool = Field(description="The speed before the step, or after it (the next "
                                      "calibration), moved more than the ramp's host_drift "
                                      "from the run's first: the step may measure the host.")
    speed_after: float | None = Field(
        default=None, description="The next calibration's speed, when it flagged the step.")


def host_speed_record(calibration: Calibration | None, reference: Calibration | None,
                      drift: float) -> HostSpeedRecord | None:
    if calibration is None or reference is None:
        return None
    speed = calibration.speed_relative_to(reference)
    return HostSpeedRecord(calibration=calibration, speed=speed,
                           parts=calibration.ratios_to(reference),
                           flagged=abs(speed - 1) > drift)


class BottleneckRecord(Strict):
    """What limited the step, from its per-process CPU (workloads/ramp/bottleneck.py)."""

    limit: Limit
    text: str
    component: str | None = None
    suggestion: str | None = None


class DriverRecord(Strict):
    """The driver's verdict on a step (workloads/driver/verdict.py) and the ramp's trust."""

    verdict: Contention = Field(description="driver-cpu, host-contended or clean.")
    explanation: str
    advice: str
    cpu_max: float = Field(description="The busiest driver process's CPU (1 = a core).")
    run_queue_wait_max: float | None = Field(
        description="The longest share of its time a driver process waited for a CPU.")
    cpus: list[int] = Field(description="The CPUs the driver processes could run on.")
    host_busy: float | None = Field(description="Busy share of those CPUs over the step.")
    host_steal: float | None = Field(description="Steal share of those CPUs over the step.")
    host_runnable: float | None = Field(description="Runnable tasks on the machine, mean.")
    send_lag_p99_ms: float
    lag_share_of_sla: float = Field(description="Send-lag p99 / the tightest SLA threshold.")
    trusted: bool = Field(description="False: the step's result cannot be trusted (doubts).")
    doubts: list[str]


def driver_record(step: StepRun) -> DriverRecord | None:
    """The bundle's record of the driver's verdict (None for a result without one)."""
    driver = step.result.driver
    if driver is None:
        return None
    tightest_sla_ms = min((sla.threshold_ms for sla in step.slas), default=0.0)
    host = driver.host
    waits = [w.wait_share for w in driver.workers if w.wait_share is not None]
    return DriverRecord(
        verdict=driver.verdict, explanation=driver.explanation, advice=driver.advice,
        cpu_max=max((w.cpu_share for w in driver.workers), default=0.0),
        run_queue_wait_max=max(waits) if waits else None,
        cpus=sorted({cpu for w in driver.workers for cpu in w.cpus}),
        host_busy=host.busy_share if host else None,
        host_steal=host.steal_share if host else None,
        host_runnable=host.runnable_mean if host else None,
        send_lag_p99_ms=driver.send_lag_p99_ms,
        lag_share_of_sla=driver.send_lag_p99_ms / tightest_sla_ms if tightest_sla_ms else 0.0,
        trusted=not step.verdict.doubts, doubts=list(step.verdict.doubts),
    )


class ErrorRecord(Strict):
    connect: int
    read: int
    timeout: int
    dropped: int
    status: dict[str, int]
    total: int


class StepRecord(Strict):
    """One step of steps.json. Latencies in ms, from the intended send time."""

    repeat: int
    index: int
    phase: Phase
    name: str
    started_at: datetime
    offered_rps: float
    scheduled_rps: float
    achieved_rps: float
    warmup_s: float
    duration_s: float
    elapsed_s: float
    seed: int
    requests: int = Field(description="Requests whose intended time fell in the window.")
    sent: int
    completed: int
    ok: int
    errors: ErrorRecord
    error_ratio: float
    latency_ms: dict[str, float] = Field(description='Keys "50" .. "100" (percentiles).')
    latency_mean_ms: float
    service_time_ms: dict[str, float]
    send_lag_ms: dict[str, float]
    sla_values_ms: dict[str, float] = Field(description='The SLA percentiles, keys "p99"...')
    passed: bool
    failures: list[StopReason]
    reasons: list[str]
    saturated: bool = Field(description="The step's result cannot be trusted (driver.doubts); "
                                        "kept for older readers: driver.verdict explains.")
    warnings: list[str]
    driver: DriverRecord | None = Field(
        default=None, description="The driver's verdict: driver-cpu, host-contended or clean.")
    driver_cpu_seconds: float
    peak_connections: int
    responses_in_span: int
    resources: ResourceRecord
    bottleneck: BottleneckRecord | None = None
    energy: EnergyRecord
    latency_by_service: LatencyByService | None = Field(
        default=None, description="Each service's exclusive time per endpoint, from the "
                                  "step's traces (ramp --trace-ratio); None untraced.")
    histogram_log: str
    raw_result: str
    settle: SettleRecord | None = Field(
        default=None, description="The wait for an idle target before the step; None: not "
                                  "waited for (its processes unseen, or settle_cores 0).")
    host: HostSpeedRecord | None = Field(
        default=None, description="The host's speed measured before the step; None: not "
                                  "calibrated (ramp --no-calibrate, or an older bundle).")


class Answer(Strict):
    """A rate that held the SLA, and what was measured there."""

    max_rate_rps: float
    achieved_rps: float
    p99_ms: float
    sla_values_ms: dict[str, float]
    step: str = Field(description="The step it comes from (its name).")
    cpu_ms_per_request: float | None
    joules_per_request: float | None


class RepeatSummary(Strict):
    repeat: int
    answer: Answer | None
    stop_reason: StopReason
    stop_detail: str
    refined: bool
    confirmed: bool | None
    steps: int
    lowest_failed_rps: float | None = Field(
        default=None, description="The lowest rate whose ramp or bisection step failed.")
    gap_below_failure: float | None = Field(
        default=None, description="1 - answer / lowest_failed_rps: how far below the knee "
                                  "the steps saw the answer is.")
    host_speed: float | None = Field(
        default=None, description="The host's speed at the repeat's first step, against the "
                                  "run's first calibration.")
    host_moved: list[str] = Field(
        default_factory=list, description="Steps that decided the answer (the answer's, "
                                          "and every failed one) while the host's speed "
                                          "had moved: the answer then measures the host too.")


class Summary(Strict):
    """summary.json: the number people publish, and how far to trust it."""

    schema_version: int = SCHEMA_VERSION
    label: str
    sla: list[str]
    completed: bool = Field(description="False when the ramp was interrupted.")
    max_rate_rps: float | None = Field(description="The best repeat's answer.")
    p99_ms: float | None = Field(description="p99 latency at that rate.")
    best: Answer | None
    best_repeat: int | None
    stop_reason: StopReason | None = Field(description="Why the best (or only) repeat stopped.")
    repeats: list[RepeatSummary]
    median_max_rate_rps: float | None
    mean_max_rate_rps: float | None = Field(
        default=None, description="Mean of the finished repeats' answers (0 where none held).")
    repeat_max_rates_rps: list[float] = Field(
        default_factory=list, description="Each finished repeat's max rate at the SLA (0 where "
                                          "no tested rate held it, or none held it again in "
                                          "its confirmation runs): what the mean and CV are of.")
    coefficient_of_variation: float | None = Field(
        description="Sample standard deviation / mean of repeat_max_rates_rps (2+ repeats).")
    saturated_steps: int = Field(description="Steps whose result could not be trusted.")
    driver_verdicts: dict[str, int] = Field(
        default_factory=dict, description="Steps per driver verdict (driver-cpu, "
                                          "host-contended, clean).")
    energy_note: str
    resources_note: str
    check: CheckResult | None = Field(
        default=None, description="The stores checked after the run (socialbench check): "
                                  "posts stored and complete, timelines exactly right; None "
                                  "when not checked (not the local stack, or interrupted).")
    host_calibration_start: Calibration | None = Field(
        default=None, description="The host's speed before the first step (what another "
                                  "host's run is compared with).")
    host_calibration_end: Calibration | None = Field(
        default=None, description="... and after the last step.")
    host_speed_end: float | None = Field(
        default=None, description="The end's speed against the start's.")
    host_drift: float | None = Field(
        default=None, description="The share of the start's speed a step may move before "
                                  "it is flagged.")
    calibration_seconds: float = Field(
        default=0.0, description="Wall time the ramp spent calibrating the host.")
    host_speed_spread: float | None = Field(
        default=None, description="Sample standard deviation of the steps' host speeds: the "
                                  "calibration's own noise on a quiet host, or the host's "
                                  "drift on a busy one.")
    host_adjusted_cv: float | None = Field(
        default=None, description="The coefficient of variation of the repeats' answers "
                                  "each divided by the host speed at its repeat's start (2+ "
                                  "calibrated repeats): what is left when the host's drift "
                                  "is taken out.")
    comparable: bool = Field(
        default=True, description="False: the host's speed moved at a step that decided the "
                                  "best repeat's answer (see not_comparable).")
    not_comparable: str = Field(default="", description="Why the number is not comparable.")


def _ms(stats: LatencyStats, keys: tuple[str, ...] = LATENCY_KEYS) -> dict[str, float]:
    return {key: stats.percentiles_us[key] / US_PER_MS for key in keys}


def step_bottleneck(step: StepRun, stack: StackRecord | None, cpus: int) -> BottleneckRecord:
    """What limited ``step``: a component at its cores, every CPU busy, or waiting."""
    span = step.span_s
    workers = stack.service_workers() if stack else {}
    loads = [
        ComponentLoad(c.name, c.kind, c.cpu_seconds / span if span else 0.0,
                      usable_cores(c.name, c.kind, cpus, workers))
        for c in step.usage.components or []
    ]
    driver_cores = step.result.driver_cpu_s / span if span else 0.0
    host = step.result.driver.host if step.result.driver else None
    # Only a measure over every CPU (the driver's, when it shares them with the stack).
    host_cores = ((host.busy_share + host.steal_share) * len(host.cpus)
                  if host is not None and len(host.cpus) >= cpus else None)
    verdict = find_bottleneck(loads, cpus, driver_cores, host_cores)
    return BottleneckRecord(limit=verdict.limit, text=verdict.text,
                            component=verdict.component, suggestion=verdict.suggestion)


def step_record(step: StepRun, stack: StackRecord | None = None,
                cpus: int | None = None) -> StepRecord:
    """The bundle's record of a step; ``stack`` and ``cpus`` name what limited it."""
    result = step.result
    responses = step.responses_in_span
    usage = step.usage
    components = [
        ComponentRecord(
            name=c.name, kind=c.kind, cpu_seconds=c.cpu_seconds,
            cpu_cores=c.cpu_seconds / step.span_s if step.span_s else 0.0,
            peak_rss_bytes=c.peak_rss_bytes, processes=c.processes,
        )
        for c in usage.components or []
    ]
    stack_cpu = usage.cpu_seconds
    energy = step.energy
    joules_per_request = (
        energy.joules / responses if energy.joules is not None and responses else None
    )
    return StepRecord(
        repeat=step.repeat,
        index=step.index,
        phase=step.phase,
        name=step.name,
        started_at=result.started_at,
        offered_rps=result.offered_rps,
        scheduled_rps=result.scheduled_rps,
        achieved_rps=result.achieved_rps,
        warmup_s=result.config.warmup_s,
        duration_s=result.window_s,
        elapsed_s=result.elapsed_s,
        seed=result.config.seed or 0,
        requests=result.scheduled,
        sent=result.sent,
        completed=result.completed,
        ok=result.ok,
        errors=ErrorRecord(
            connect=result.errors.connect, read=result.errors.read,
            timeout=result.errors.timeout, dropped=result.errors.dropped,
            status={str(code): n for code, n in result.errors.status.items()},
            total=result.errors.total,
        ),
        error_ratio=result.error_ratio,
        latency_ms=_ms(result.latency),
        latency_mean_ms=result.latency.mean_us / US_PER_MS,
        service_time_ms=_ms(result.service_time),
        send_lag_ms=_ms(result.send_lag, ("50", "99", "100")),
        sla_values_ms=step.sla_values_ms,
        passed=step.passed,
        failures=list(step.verdict.failures),
        reasons=list(step.verdict.reasons),
        saturated=bool(step.verdict.doubts) if result.driver else result.saturated,
        warnings=result.warnings,
        driver=driver_record(step),
        driver_cpu_seconds=result.driver_cpu_s,
        peak_connections=result.peak_connections,
        responses_in_span=responses,
        resources=ResourceRecord(
            available=usage.components is not None,
            note="measured" if usage.components is not None else f"unavailable: {usage.note}",
            span_s=step.span_s,
            components=components,
            stack_cpu_seconds=stack_cpu,
            cpu_ms_per_request=stack_cpu * 1000 / responses
            if stack_cpu is not None and responses else None,
        ),
        bottleneck=step_bottleneck(step, stack, cpus)
        if cpus and usage.components is not None else None,
        energy=EnergyRecord(
            available=energy.joules is not None,
            source=energy.source,
            note=energy.detail if energy.joules is not None else f"unavailable: {energy.detail}",
            seconds=energy.seconds,
            joules=energy.joules,
            watts=energy.watts,
            joules_per_request=joules_per_request,
            requests_per_joule=1 / joules_per_request if joules_per_request else None,
        ),
        histogram_log=f"{HISTOGRAMS}/{step.name}.hlog",
        raw_result=f"{RAW}/{step.name}.json",
        settle=SettleRecord(waited_s=step.settle.waited_s,
                            first_busy_cores=step.settle.first_busy_cores,
                            busy_cores=step.settle.busy_cores, idle=step.settle.idle)
        if step.settle else None,
    )


def _answer(run: RampRun, records: dict[str, StepRecord]) -> Answer | None:
    if run.answer is None:
        return None
    record = records[run.answer.name]
    return Answer(
        max_rate_rps=record.offered_rps,
        achieved_rps=record.achieved_rps,
        p99_ms=record.latency_ms["99"],
        sla_values_ms=record.sla_values_ms,
        step=record.name,
        cpu_ms_per_request=record.resources.cpu_ms_per_request,
        joules_per_request=record.energy.joules_per_request,
    )


def deciding_steps(run: RampRun) -> list[StepRun]:
    """The steps a repeat's answer rests on: the answer's own, and every failed step (each
    set the knee below its rate)."""
    return [step for step in run.steps if step is run.answer or not step.passed]


def host_moved(run: RampRun, records: dict[str, StepRecord]) -> list[str]:
    """The deciding steps of ``run`` that the host's calibration flagged, as
    ``<step> (speed 0.78)``."""
    moved = []
    for step in deciding_steps(run):
        host = records[step.name].host if step.name in records else None
        if host is not None and host.flagged:
            after = "" if host.speed_after is None else f", {host.speed_after:.2f} after it"
            moved.append(f"{step.name} (speed {host.speed:.2f}{after})")
    return moved


def _repeat_summary(run: RampRun, records: dict[str, StepRecord]) -> RepeatSummary:
    first = records.get(run.steps[0].name) if run.steps else None
    return RepeatSummary(
        repeat=run.repeat, answer=_answer(run, records), stop_reason=run.stop_reason,
        stop_detail=run.stop_detail, refined=run.refined, confirmed=run.confirmed,
        steps=len(run.steps), lowest_failed_rps=run.lowest_failed_rps,
        gap_below_failure=run.gap_below_failure,
        host_speed=first.host.speed if first and first.host else None,
        host_moved=host_moved(run, records),
    )


def summarize(label: str, config: RampConfig, outcome: RampOutcome,
              records: list[StepRecord]) -> Summary:
    """summary.json of a finished (or interrupted) ramp."""
    by_name = {record.name: record for record in records}
    repeats = [_repeat_summary(run, by_name) for run in outcome.runs]
    best_run = outcome.best
    best = _answer(best_run, by_name) if best_run else None
    calibrations = [r.host.calibration for r in records if r.host is not None]
    speeds = [r.host.speed for r in records if r.host is not None]
    start = calibrations[0] if calibrations else None
    end = outcome.final_calibration
    moved = next((r.host_moved for r in repeats if best_run and r.repeat == best_run.repeat),
                 [])
    not_comparable = (
        f"the host's speed moved more than {config.host_drift:.0%} from the run's start at "
        f"the steps that decided it: {', '.join(moved)}; the number measures the host's "
        "change too (run again on a quiet host)" if moved else "")
    reference = best_run or (outcome.runs[0] if outcome.runs else None)
    energy_notes = sorted({r.energy.note for r in records if not r.energy.available})
    resource_notes = sorted({r.resources.note for r in records if not r.resources.available})
    return Summary(
        label=label,
        sla=[str(sla) for sla in config.slas],
        completed=not outcome.interrupted,
        max_rate_rps=best.max_rate_rps if best else None,
        p99_ms=best.p99_ms if best else None,
        best=best,
        best_repeat=best_run.repeat if best_run else None,
        stop_reason=reference.stop_reason if reference else None,
        repeats=repeats,
        median_max_rate_rps=outcome.median_rps,
        mean_max_rate_rps=outcome.mean_rps,
        repeat_max_rates_rps=outcome.answers,
        coefficient_of_variation=outcome.coefficient_of_variation,
        saturated_steps=sum(record.saturated for record in records),
        driver_verdicts={
            verdict.value: count for verdict in Contention
            if (count := sum(1 for r in records if r.driver and r.driver.verdict is verdict))
        },
        energy_note="; ".join(energy_notes) or "measured",
        resources_note="; ".join(resource_notes) or "measured",
        host_calibration_start=start,
        host_calibration_end=end,
        host_speed_end=end.speed_relative_to(start) if start and end else None,
        host_drift=config.host_drift if config.calibrate else None,
        calibration_seconds=sum(c.seconds for c in calibrations)
        + (end.seconds if end else 0.0),
        comparable=not moved,
        not_comparable=not_comparable,
        host_speed_spread=statistics.stdev(speeds) if len(speeds) > 1 else None,
        host_adjusted_cv=host_adjusted_cv(outcome, repeats),
    )


def host_adjusted_cv(outcome: RampOutcome, repeats: list[RepeatSummary]) -> float | None:
    """The CV of each finished repeat's answer over its host speed (None below two)."""
    speeds = {r.repeat: r.host_speed for r in repeats}
    adjusted = [(run.max_rate_rps or 0.0) / speed for run in outcome.runs
                if run.stop_reason is not StopReason.INTERRUPTED
                and (speed := speeds.get(run.repeat))]
    if len(adjusted) < 2 or statistics.mean(adjusted) == 0:
        return None
    return statistics.stdev(adjusted) / statistics.mean(adjusted)


# ---------------------------------------------------------------- files


def bundle_dir(results_dir: Path, label: str, now: datetime | None = None) -> Path:
    """``results/<UTC time>-<label>``, e.g. ``results/20250101T120000Z-mixed``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "ramp"
    return results_dir / f"{stamp}-{safe}"


def _write_json(path: Path, model: BaseModel | list[StepRecord]) -> None:
    tmp = path.with_suffix(".tmp")
    if isinstance(model, list):
        tmp.write_bytes(TypeAdapter(list[StepRecord]).dump_json(model, indent=2))
    else:
        tmp.write_text(model.model_dump_json(indent=2))
    tmp.replace(path)


CSV_COLUMNS = (
    "repeat", "index", "phase", "name", "offered_rps", "scheduled_rps", "achieved_rps",
    "warmup_s", "duration_s", "requests", "ok", "errors_total", "errors_connect",
    "errors_read", "errors_timeout", "errors_dropped", "errors_status", "error_ratio",
    *(f"p{key}_ms" for key in LATENCY_KEYS), "mean_ms", "service_p50_ms", "service_p99_ms",
    "send_lag_p50_ms", "send_lag_p99_ms", "send_lag_max_ms", "passed", "failures", "saturated",
    "driver_verdict", "driver_cpu_max", "driver_host_busy", "driver_host_steal",
    "send_lag_share_of_sla",
    "stack_cpu_seconds", "cpu_ms_per_request", "energy_joules", "joules_per_request",
    "driver_cpu_seconds", "histogram_log", "settle_s", "settle_busy_cores",
    "host_speed", "host_cpu_ratio", "host_loopback_ratio", "host_memory_ratio", "host_flagged",
)


def csv_row(record: StepRecord) -> dict[str, Any]:
    """One flat row of steps.csv (empty cells where a value is unknown)."""
    row: dict[str, Any] = {
        "repeat": record.repeat, "index": record.index, "phase": record.phase.value,
        "name": record.name, "offered_rps": record.offered_rps,
        "scheduled_rps": record.scheduled_rps, "achieved_rps": record.achieved_rps,
        "warmup_s": record.warmup_s, "duration_s": record.duration_s,
        "requests": record.requests, "ok": record.ok, "errors_total": record.errors.total,
        "errors_connect": record.errors.connect, "errors_read": record.errors.read,
        "errors_timeout": record.errors.timeout, "errors_dropped": record.errors.dropped,
        "errors_status": ";".join(f"{k}:{v}" for k, v in record.errors.status.items()),
        "error_ratio": record.error_ratio,
        "mean_ms": record.latency_mean_ms,
        "service_p50_ms": record.service_time_ms["50"],
        "service_p99_ms": record.service_time_ms["99"],
        "send_lag_p50_ms": record.send_lag_ms["50"], "send_lag_p99_ms": record.send_lag_ms["99"],
        "send_lag_max_ms": record.send_lag_ms["100"],
        "passed": record.passed, "failures": ";".join(record.failures),
        "saturated": record.saturated,
        "driver_verdict": record.driver.verdict.value if record.driver else None,
        "driver_cpu_max": record.driver.cpu_max if record.driver else None,
        "driver_host_busy": record.driver.host_busy if record.driver else None,
        "driver_host_steal": record.driver.host_steal if record.driver else None,
        "send_lag_share_of_sla": record.driver.lag_share_of_sla if record.driver else None,
        "stack_cpu_seconds": record.resources.stack_cpu_seconds,
        "cpu_ms_per_request": record.resources.cpu_ms_per_request,
        "energy_joules": record.energy.joules,
        "joules_per_request": record.energy.joules_per_request,
        "driver_cpu_seconds": record.driver_cpu_seconds,
        "histogram_log": record.histogram_log,
        "settle_s": record.settle.waited_s if record.settle else None,
        "settle_busy_cores": record.settle.first_busy_cores if record.settle else None,
        "host_speed": record.host.speed if record.host else None,
        "host_cpu_ratio": record.host.parts["cpu"] if record.host else None,
        "host_loopback_ratio": record.host.parts["loopback"] if record.host else None,
        "host_memory_ratio": record.host.parts["memory"] if record.host else None,
        "host_flagged": record.host.flagged if record.host else None,
    }
    row.update({f"p{key}_ms": record.latency_ms[key] for key in LATENCY_KEYS})
    return {key: "" if row[key] is None else row[key] for key in CSV_COLUMNS}


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


RESOURCE_COLUMNS = ("repeat", "index", "phase", "offered_rps", "component", "kind",
                    "cpu_seconds", "cpu_cores", "peak_rss_bytes", "processes")


def _resource_rows(records: list[StepRecord]) -> list[dict[str, Any]]:
    return [
        {"repeat": r.repeat, "index": r.index, "phase": r.phase.value,
         "offered_rps": r.offered_rps, "component": c.name, "kind": c.kind,
         "cpu_seconds": c.cpu_seconds, "cpu_cores": c.cpu_cores,
         "peak_rss_bytes": c.peak_rss_bytes, "processes": c.processes}
        for r in records for c in r.resources.components
    ]


def write_histogram_log(path: Path, step: StepRun) -> None:
    """The step's latency histogram as a one-interval HdrHistogram log (values in µs)."""
    result = step.result
    started = result.started_at.timestamp()
    with path.open("w") as file:
        writer = HistogramLogWriter(file)
        writer.output_comment(
            f"[socialbench {__version__}: latency from the intended send time, in "
            f"microseconds; repeat {step.repeat}, step {step.index} ({step.phase.value}), "
            f"offered {result.offered_rps:g} req/s; interval = the measured window]"
        )
        writer.output_log_format_version()
        # HistogramLogWriter.output_start_time is broken in hdrhistogram 0.10; same line:
        file.write(f"#[StartTime: {started:.3f} (seconds since epoch), "
                   f"{result.started_at.isoformat()}]\n")
        writer.output_legend()
        writer.output_interval_histogram(
            result.latency.decode(),
            start_time_stamp_sec=result.config.warmup_s,
            end_time_stamp_sec=result.config.warmup_s + result.window_s,
            max_value_unit_ratio=float(US_PER_MS),  # the interval max in ms
        )


def read_histogram_log(path: Path) -> HdrHistogram:
    """Every interval of an HdrHistogram log, added into one histogram (µs)."""
    reader = HistogramLogReader(str(path), new_histogram())
    total = new_histogram()
    try:
        while reader.add_next_interval_histogram(total) is not None:
            pass
    finally:
        reader.close()
    return total


class BundleWriter(RampObserver):
    """Writes a bundle as the ramp runs: the manifest first, each step as it ends."""

    def __init__(self, directory: Path, manifest: Manifest) -> None:
        self.directory = directory
        self.manifest = manifest
        self.records: list[StepRecord] = []
        self.reference: Calibration | None = None  # the run's first calibration
        # A step's latency by service, when its traces are collected (ramp --trace-ratio).
        self.latency_by_service: Callable[[StepRun], LatencyByService] | None = None
        directory.mkdir(parents=True, exist_ok=False)
        (directory / HISTOGRAMS).mkdir()
        (directory / RAW).mkdir()
        write_schemas(directory / SCHEMAS)
        _write_json(directory / MANIFEST, manifest)

    def step_finished(self, step: StepRun) -> None:
        record = step_record(step, self.manifest.stack, self.manifest.hardware.get("usable_cores"))
        if self.reference is None:
            self.reference = step.calibration
        record.host = host_speed_record(step.calibration, self.reference,
                                        self.manifest.config.host_drift)
        if (record.host is not None and record.host.flagged and self.records
                and self.records[-1].repeat == record.repeat):
            self._flag_last(record.host.speed)  # it ran between its calibration and this one
        if self.latency_by_service is not None:
            record.latency_by_service = self.latency_by_service(step)
            _write_csv(self.directory / SERVICE_TIME_CSV, SERVICE_TIME_COLUMNS, [
                row for r in [*self.records, record] if r.latency_by_service
                for row in service_time_rows(
                    {"repeat": r.repeat, "index": r.index, "phase": r.phase.value,
                     "offered_rps": r.offered_rps}, r.latency_by_service)])
        self.records.append(record)
        (self.directory / record.raw_result).write_text(step.result.model_dump_json())
        write_histogram_log(self.directory / record.histogram_log, step)
        self._write_steps()

    def _flag_last(self, speed_after: float) -> None:
        last = self.records[-1].host
        if last is not None:
            last.flagged = True
            last.speed_after = speed_after

    def _write_steps(self) -> None:
        _write_json(self.directory / STEPS_JSON, self.records)
        _write_csv(self.directory / STEPS_CSV, CSV_COLUMNS,
                   [csv_row(r) for r in self.records])
        _write_csv(self.directory / RESOURCES_CSV, RESOURCE_COLUMNS,
                   _resource_rows(self.records))

    def finish(self, outcome: RampOutcome, check: CheckResult | None = None) -> Summary:
        """Write summary.json (and the step files again, or empty when no step ran), with
        ``check``."""
        final = outcome.final_calibration
        if final is not None and self.reference is not None and self.records:
            speed = final.speed_relative_to(self.reference)
            if abs(speed - 1) > self.manifest.config.host_drift:
                self._flag_last(speed)
        self._write_steps()
        summary = summarize(self.manifest.label, self.manifest.config, outcome, self.records)
        if check is not None:
            summary = summary.model_copy(update={"check": check})
        _write_json(self.directory / SUMMARY, summary)
        return summary


def write_schemas(directory: Path) -> None:
    """JSON Schemas of the bundle's JSON files, for anyone who reads them without Python."""
    directory.mkdir(exist_ok=True)
    schemas = {
        "manifest.schema.json": Manifest.model_json_schema(),
        "steps.schema.json": TypeAdapter(list[StepRecord]).json_schema(),
        "summary.schema.json": Summary.model_json_schema(),
    }
    for name, schema in schemas.items():
        (directory / name).write_text(json.dumps(schema, indent=2))


class Bundle(BaseModel):
    """A bundle read back: its directory and its three JSON files."""

    directory: Path
    manifest: Manifest
    steps: list[StepRecord]
    summary: Summary

    @property
    def label(self) -> str:
        return self.manifest.label

    def steps_of(self, repeat: int | None) -> list[StepRecord]:
        """The steps of one repeat (all when None), in the order they ran."""
        return [s for s in self.steps if repeat is None or s.repeat == repeat]

    @property
    def reference_repeat(self) -> int | None:
        """The repeat the headline comes from (the best; else the first)."""
        if self.summary.best_repeat is not None:
            return self.summary.best_repeat
        return self.steps[0].repeat if self.steps else None


class BundleError(ValueError):
    """A directory that is not a readable bundle; the message says why."""


def read_bundle(directory: Path) -> Bundle:
    """Read and validate a bundle's JSON files."""
    try:
        manifest = Manifest.model_validate_json((directory / MANIFEST).read_bytes())
        steps = TypeAdapter(list[StepRecord]).validate_json((directory / STEPS_JSON).read_bytes())
        summary = Summary.model_validate_json((directory / SUMMARY).read_bytes())
    except FileNotFoundError as exc:
        raise BundleError(f"{directory} is not a complete bundle: {exc.filename} is missing"
                          ) from None
    except ValueError as exc:
        raise BundleError(f"{directory}: {exc}") from None
    return Bundle(directory=directory, manifest=manifest, steps=steps, summary=summary)


def write_interval_log(path: Path, histogram: HdrHistogram, comment: str,
                       started_at: datetime, start_s: float, end_s: float) -> None:
    """Any latency histogram (µs) as a one-interval HdrHistogram log, as the steps' logs."""
    with path.open("w") as file:
        writer = HistogramLogWriter(file)
        writer.output_comment(f"[socialbench {__version__}: {comment}]")
        writer.output_log_format_version()
        file.write(f"#[StartTime: {started_at.timestamp():.3f} (seconds since epoch), "
                   f"{started_at.isoformat()}]\n")
        writer.output_legend()
        writer.output_interval_histogram(histogram, start_time_stamp_sec=start_s,
                                         end_time_stamp_sec=end_s,
                                         max_value_unit_ratio=float(US_PER_MS))
