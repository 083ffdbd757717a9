"""One ramp run from start to report: the manifest, the ramp, its bundle, plots and report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from socialbench import __version__
from socialbench.workloads.check.contents import CheckResult
from socialbench.workloads.driver.placement import Placement
from socialbench.workloads.driver.verdict import UNTRUSTED
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes import machine
from socialbench.workloads.probes.energy import EnergyOptions, plan_energy
from socialbench.workloads.probes.memory import MemoryRecord
from socialbench.workloads.probes.otlp import SpanReceiver
from socialbench.workloads.probes.records import PodRecord, StackRecord
from socialbench.workloads.probes.resources import SamplerFactory
from socialbench.workloads.ramp.engine import (
    Ramp,
    RampConfig,
    RampObserver,
    RampOutcome,
    ResetHook,
)
from socialbench.workloads.reports.live import LiveView
from socialbench.workloads.results.files import BundleWriter, bundle_dir
from socialbench.workloads.results.schema import Dataset, Manifest
from socialbench.workloads.results.summary import RampReport


@dataclass
class RampJob:
    """Everything a ramp run needs besides its configuration."""

    config: RampConfig
    label: str
    results_dir: Path
    sampler: SamplerFactory
    resources_source: str
    dataset: Dataset
    mongodb_server: str
    stack: StackRecord | None = None
    # The Kubernetes release's pods, as the ramp began (--pods), for the manifest.
    pods: list[PodRecord] | None = None
    # How energy is measured (--power-cmd, --power-meter, --power-coefficients, --cpu-family).
    energy: EnergyOptions = field(default_factory=EnergyOptions)
    reset: ResetHook | None = None
    quiet: bool = False
    # Run after the ramp (not when interrupted): the stores checked, into summary.json.
    check: Callable[[], CheckResult] | None = None
    # The receiver of the stack's spans: each step's latency by service (--trace-ratio).
    spans: SpanReceiver | None = None
    # Which CPUs the driver and the stack run on (--cpu-placement), for the manifest.
    placement: Placement | None = None
    # Told of the ramp's progress after the live view and the bundle writer.
    observers: Sequence[RampObserver] = ()
    # The stack's memory: the figures, projected for the run's data (the manifest's).
    memory: MemoryRecord | None = None
    # The published procedure followed (--preset) and its deviations.
    preset: PresetRecord | None = None


def run_check(job: RampJob, outcome: RampOutcome) -> CheckResult | None:
    """The job's check of the stores after a finished ramp; a check that raised, failed."""
    if job.check is None or outcome.interrupted:
        return None
    try:
        return job.check()
    except Exception as exc:  # the bundle is written whatever the check did
        return CheckResult.unreadable(f"{type(exc).__name__}: {exc}", scope="every user")


def execute(job: RampJob, console: Console) -> RampReport:
    """Run the ramp, writing its bundle as it goes, then its plots and report."""
    from socialbench.workloads.reports.ramp_report import build_report  # matplotlib: only when run

    described = machine.describe(job.mongodb_server)
    energy = plan_energy(job.energy)
    manifest = Manifest(
        socialbench_version=__version__,
        created_at=datetime.now(UTC),
        label=job.label,
        command_line=described["command_line"],
        git=described["git"],
        preset=job.preset,
        config=job.config,
        dataset=job.dataset,
        stack=job.stack,
        pods=job.pods,
        hardware=described["hardware"],
        software=described["software"],
        resources_source=job.resources_source,
        energy_source=energy.describe(),
        energy_meter=energy.record,
        placement=job.placement,
        memory=job.memory,
    )
    ramp = Ramp(job.config, sampler=job.sampler, meter=energy.meter, reset=job.reset)
    directory = bundle_dir(job.results_dir, job.label)
    writer = BundleWriter(directory, manifest.model_copy(update={"config": ramp.config}))
    if job.spans is not None:
        writer.latency_by_service = job.spans.step_table
    config = ramp.config
    slas = ", ".join(str(s) for s in config.slas)
    console.print(
        f"Ramp of [bold]{config.load.workload}[/] at {config.load.url}: from "
        f"{config.start_rate:,.6g} req/s by {config.step_rate:,.6g}, steps of "
        f"{config.step_duration_s:g} s after {config.warmup_s:g} s warm-up; SLA {slas}; "
        f"stop below {config.min_achieved_ratio:.0%} achieved or above "
        f"{config.max_error_ratio:.1%} errors"
        + (f", or when {UNTRUSTED}" if config.stop_on_saturation else "")
        + (f"; refine to {config.resolution:g} req/s, then confirm for "
           f"{config.confirm_duration:g} s" if config.refine else "")
        + (f"; {config.repeat} repeats" if config.repeat > 1 else "")
    )
    if job.placement is not None:
        console.print(f"CPU placement: {job.placement.describe()}")
    console.print(f"Energy: {energy.describe()}")
    console.print(f"Bundle: {directory}")
    view = LiveView(console, quiet=job.quiet)
    ramp.observers = [view, writer, *job.observers]
    with view:
        outcome = ramp.run()
    summary = writer.finish(outcome, check=run_check(job, outcome))
    report = build_report(directory)
    return RampReport(directory, report, outcome, summary, config, job.preset)
