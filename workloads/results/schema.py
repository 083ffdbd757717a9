"""A ramp's results bundle, ``results/<UTC time>-<label>/``: the files' names and JSON models.

    manifest.json      what ran, where, on what (version, git, configuration, command
                       line, dataset, hardware, software)
    steps.json, .csv   one record per step (rates, errors, latency, send lag, verdict,
                       CPU and memory, energy, the host's speed); resources.csv per
                       component; latency-by-service.csv with ramp --trace-ratio
    summary.json       the answer: max rate at the SLA and its p99, per repeat and overall
    histograms/*.hlog  one HdrHistogram interval log per step (µs from the intended send)
    raw/*.json         the driver's full result per step
    schema/*.json      JSON Schemas of manifest.json, steps.json and summary.json
    *.png, report.html the plots and report (``socialbench report DIR`` rebuilds them)

summary.py makes the records from a ramp's outcome; files.py writes and reads them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from socialbench.workloads.check.contents import CheckResult
from socialbench.workloads.driver.placement import Placement
from socialbench.workloads.driver.verdict import Contention
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes.bottleneck import (
    Limit,
)
from socialbench.workloads.probes.ceilings import CeilingRecord
from socialbench.workloads.probes.energy import MeterRecord
from socialbench.workloads.probes.memory import MemoryRecord
from socialbench.workloads.probes.records import PodRecord, StackRecord, Strict, UnitRecord
from socialbench.workloads.probes.spans import (
    LatencyByService,
)
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.ramp.engine import (
    Phase,
    RampConfig,
    StopReason,
)
from socialbench.workloads.seeding.seed import SeedRecord

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


class RunHeader(Strict):
    """What every bundle's manifest says first: which socialbench ran, when, how it was
    started and at which commit."""

    socialbench_version: str
    created_at: datetime
    label: str
    command_line: list[str]
    git: dict[str, Any]
    preset: PresetRecord | None = Field(
        default=None, description="The published procedure the run followed (--preset) and "
                                  "its deviations; None: no preset.")


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
    energy_meter: MeterRecord | None = Field(
        default=None, description="The meter (what it covers, its sampling period) or the "
                                  "estimate (the CPU identified, the coefficients and their "
                                  "source); None: an older bundle.")
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
    units: list[UnitRecord] = Field(
        default_factory=list, description="Its units' CPU (processes or threads that can "
                                          "use a fixed number of cores), from which the "
                                          "step's ceilings come; empty: not measured.")


class ResourceRecord(Strict):
    """CPU and memory of every process of the stack over one step (warm-up and drain too)."""

    available: bool
    note: str = Field(description='"unavailable: <reason>" when not measured.')
    span_s: float
    components: list[ComponentRecord]
    stack_cpu_seconds: float | None
    cpu_ms_per_request: float | None = Field(description="Stack CPU / responses in the span.")
    cpus: list[int] | None = Field(default=None, description="The CPUs the stack's processes "
                                                            "could run on; None: not known.")
    cpus_busy_cores: float | None = Field(
        default=None, description="How busy those CPUs were over the span, in cores (anyone's "
                                  "work, and steal).")


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
    source: str = Field(description="rapl, hwmon, dcmi, power-cmd, estimate or unavailable.")
    note: str
    seconds: float
    joules: float | None
    watts: float | None
    joules_per_request: float | None
    requests_per_joule: float | None = Field(description="(req/s) per watt.")
    estimated: bool = Field(default=False, description="An estimate (the label says whose), "
                                                       "never a measurement.")
    label: str = Field(default="", description="An estimate's label.")
    utilisation: float | None = Field(default=None, description="An estimate's CPU "
                                                                "utilisation over the step.")
    watts_low: float | None = Field(default=None, description="An estimate's band: the "
                                                              "lowest and highest results'.")
    watts_high: float | None = None
    requests_per_joule_low: float | None = None
    requests_per_joule_high: float | None = None


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


class BottleneckRecord(Strict):
    """What limited the step, from its per-process CPU (workloads/probes/bottleneck.py)."""

    limit: Limit
    text: str
    component: str | None = None
    suggestion: str | None = None
    cpus_busy: bool | None = Field(
        default=None, description="Every CPU the stack may use was busy; None: an older "
                                  "bundle.")


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
    ceilings: list[CeilingRecord] = Field(
        default_factory=list, description="Every unit's ceiling at this step, lowest first: "
                                          "the rate at which its CPU per request would fill "
                                          "the cores it can use (workloads/probes/"
                                          "ceilings.py); empty: not measured.")
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
    requests_per_joule: float | None = Field(default=None, description="Perf per watt: "
                                                                       "(req/s) per watt.")
    requests_per_joule_low: float | None = Field(default=None, description="An estimate's "
                                                                           "band.")
    requests_per_joule_high: float | None = None
    energy_estimated: bool = Field(default=False, description="The energy is an estimate.")
    energy_label: str = Field(default="", description="The estimate's label.")


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
    max_throughput_rps: float | None = Field(
        default=None, description="The highest achieved req/s of any ramp step, passed or "
                                  "not (PerfKit's maximum throughput).")


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
    max_throughput_rps: float | None = Field(
        default=None, description="The highest achieved req/s of any ramp step of any repeat, "
                                  "passed or not (PerfKit's maximum throughput).")
    ceilings: list[CeilingRecord] = Field(
        default_factory=list, description="The lowest ceilings, a component each, at the "
                                          "step of the best answer (else the highest step "
                                          "measured).")
    ceilings_step: str | None = Field(default=None,
                                      description="The step the ceilings come from.")
    ceiling_verdict: str = Field(
        default="", description="What the max rate measures: a component within 15% of its "
                                "ceiling (and what lifts it), the machine (every CPU of the "
                                "stack busy), or neither.")
    comparable: bool = Field(
        default=True, description="False: the host's speed moved at a step that decided the "
                                  "best repeat's answer (see not_comparable).")
    not_comparable: str = Field(default="", description="Why the number is not comparable.")


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


