"""A ramp's results summarised: each step's record (:func:`step_record`: what limited it,
the driver's verdict, the host's speed) and the run's answer (:func:`summarize`: max rate
at the SLA and its p99, per repeat and overall, and whether the host's speed held)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from socialbench.workloads.driver import LatencyStats
from socialbench.workloads.driver.verdict import Contention
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes.bottleneck import (
    ComponentLoad,
    find_bottleneck,
    usable_cores,
)
from socialbench.workloads.probes.ceilings import (
    CeilingRecord,
    ComponentUnits,
    ceiling_verdict,
    lowest_per_component,
    step_ceilings,
)
from socialbench.workloads.probes.energy import EnergyReading
from socialbench.workloads.probes.records import StackRecord
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.ramp.engine import (
    RampConfig,
    RampOutcome,
    RampRun,
    StepRun,
    StopReason,
    tightest_sla,
)
from socialbench.workloads.results.schema import (
    HISTOGRAMS,
    LATENCY_KEYS,
    RAW,
    US_PER_MS,
    Answer,
    BottleneckRecord,
    ComponentRecord,
    DriverRecord,
    EnergyRecord,
    ErrorRecord,
    HostSpeedRecord,
    RepeatSummary,
    ResourceRecord,
    SettleRecord,
    StepRecord,
    Summary,
)


def host_speed_record(calibration: Calibration | None, reference: Calibration | None,
                      drift: float) -> HostSpeedRecord | None:
    if calibration is None or reference is None:
        return None
    speed = calibration.speed_relative_to(reference)
    return HostSpeedRecord(calibration=calibration, speed=speed,
                           parts=calibration.ratios_to(reference),
                           flagged=abs(speed - 1) > drift)


def driver_record(step: StepRun) -> DriverRecord | None:
    """The bundle's record of the driver's verdict (None for a result without one)."""
    driver = step.result.driver
    if driver is None:
        return None
    tightest_sla_ms = tightest_sla(step.slas).threshold_ms if step.slas else 0.0
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
    stack_cpus = step.usage.cpus
    if stack_cpus and len(stack_cpus) < cpus:
        # The stack on CPUs of its own (up --cpus, a split placement): whether those were
        # full, whoever filled them.
        cpus, driver_cores, host_cores = len(stack_cpus), 0.0, step.usage.cpus_busy_cores
    verdict = find_bottleneck(loads, cpus, driver_cores, host_cores)
    return BottleneckRecord(limit=verdict.limit, text=verdict.text,
                            component=verdict.component, suggestion=verdict.suggestion,
                            cpus_busy=verdict.cpus_busy)


def energy_record(energy: EnergyReading, responses: int) -> EnergyRecord:
    """A step's energy, per request and as perf per watt; an estimate's band and label."""
    joules = energy.joules
    per_request = joules / responses if joules is not None and responses else None
    low, high, seconds = energy.joules_low, energy.joules_high, energy.seconds
    return EnergyRecord(
        available=joules is not None,
        source=energy.source,
        note=energy.detail if joules is not None else f"unavailable: {energy.detail}",
        seconds=seconds,
        joules=joules,
        watts=energy.watts,
        joules_per_request=per_request,
        requests_per_joule=1 / per_request if per_request else None,
        estimated=energy.estimated,
        label=energy.label,
        utilisation=energy.utilisation,
        watts_low=low / seconds if low is not None and seconds else None,
        watts_high=high / seconds if high is not None and seconds else None,
        requests_per_joule_low=responses / high if high and responses else None,
        requests_per_joule_high=responses / low if low and responses else None,
    )


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
            peak_rss_bytes=c.peak_rss_bytes, processes=c.processes, units=list(c.units),
        )
        for c in usage.components or []
    ]
    stack_cpu = usage.cpu_seconds
    energy = step.energy
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
            cpus=usage.cpus, cpus_busy_cores=usage.cpus_busy_cores,
        ),
        bottleneck=step_bottleneck(step, stack, cpus)
        if cpus and usage.components is not None else None,
        ceilings=step_ceilings((ComponentUnits(c.name, c.kind, c.units) for c in components),
                               responses),
        energy=energy_record(energy, responses),
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
        requests_per_joule=record.energy.requests_per_joule,
        requests_per_joule_low=record.energy.requests_per_joule_low,
        requests_per_joule_high=record.energy.requests_per_joule_high,
        energy_estimated=record.energy.estimated,
        energy_label=record.energy.label,
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


def ceilings_of(run: RampRun | None, records: dict[str, StepRecord]
                ) -> tuple[StepRecord | None, list[CeilingRecord], str]:
    """The step whose ceilings the summary names (the answer's; else the highest rate
    measured), its lowest ceilings a component each, and the verdict on the max rate."""
    if run is None:
        return None, [], ""
    measured = [records[s.name] for s in run.steps if s.name in records
                and records[s.name].ceilings]
    if not measured:
        return None, [], ""
    answer = records.get(run.answer.name) if run.answer is not None else None
    at = answer if answer is not None and answer.ceilings else max(
        measured, key=lambda r: r.achieved_rps)
    lowest = lowest_per_component(at.ceilings)
    # Whether the stack's CPUs were all busy at the knee: at the answer, or at the lowest
    # rate that failed above it.
    above = [records[s.name] for s in run.steps if s.name in records and not s.passed
             and s.rate > at.offered_rps]
    knee = [at, *sorted(above, key=lambda r: r.offered_rps)[:1]]
    machine_bound = any(r.bottleneck is not None and r.bottleneck.cpus_busy for r in knee)
    rate = answer.offered_rps if answer is not None else None
    return at, lowest, ceiling_verdict(rate, lowest, machine_bound)


def _repeat_summary(run: RampRun, records: dict[str, StepRecord]) -> RepeatSummary:
    first = records.get(run.steps[0].name) if run.steps else None
    return RepeatSummary(
        repeat=run.repeat, answer=_answer(run, records), stop_reason=run.stop_reason,
        stop_detail=run.stop_detail, refined=run.refined, confirmed=run.confirmed,
        steps=len(run.steps), lowest_failed_rps=run.lowest_failed_rps,
        gap_below_failure=run.gap_below_failure,
        host_speed=first.host.speed if first and first.host else None,
        host_moved=host_moved(run, records),
        max_throughput_rps=run.max_throughput_rps,
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
    ceiling_step, ceilings, verdict = ceilings_of(reference, by_name)
    energy_notes = sorted({r.energy.note for r in records if not r.energy.available})
    labels = sorted({r.energy.label for r in records if r.energy.available and r.energy.label})
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
        energy_note="; ".join(energy_notes + labels) or "measured",
        resources_note="; ".join(resource_notes) or "measured",
        host_calibration_start=start,
        host_calibration_end=end,
        host_speed_end=end.speed_relative_to(start) if start and end else None,
        host_drift=config.host_drift if config.calibrate else None,
        calibration_seconds=sum(c.seconds for c in calibrations)
        + (end.seconds if end else 0.0),
        max_throughput_rps=max((r.max_throughput_rps for r in repeats
                                if r.max_throughput_rps is not None), default=None),
        ceilings=ceilings,
        ceilings_step=ceiling_step.name if ceiling_step is not None else None,
        ceiling_verdict=verdict,
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


@dataclass
class RampReport:
    """A finished ramp run: its bundle's directory, report, outcome and summary."""

    directory: Path
    report: Path
    outcome: RampOutcome
    summary: Summary
    config: RampConfig | None = None
    preset: PresetRecord | None = None  # the published procedure followed, its deviations
