"""A ramp bundle's files: :class:`BundleWriter` writes them as the ramp runs (steps as
soon as they finish, so an interrupted ramp leaves a usable bundle), :func:`read_bundle`
reads them back; HdrHistogram interval logs and CSV rows. The layout is in schema.py."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter
from pydantic import BaseModel, TypeAdapter

from socialbench import __version__
from socialbench.errors import SocialbenchError
from socialbench.workloads.check.contents import CheckResult
from socialbench.workloads.driver.histogram import new_histogram
from socialbench.workloads.probes.spans import (
    SERVICE_TIME_COLUMNS,
    SERVICE_TIME_CSV,
    LatencyByService,
    service_time_rows,
)
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.ramp.engine import (
    RampObserver,
    RampOutcome,
    StepRun,
)
from socialbench.workloads.results.schema import (
    HISTOGRAMS,
    LATENCY_KEYS,
    MANIFEST,
    RAW,
    RESOURCES_CSV,
    SCHEMAS,
    STEPS_CSV,
    STEPS_JSON,
    SUMMARY,
    US_PER_MS,
    Bundle,
    Manifest,
    StepRecord,
    Summary,
)
from socialbench.workloads.results.summary import host_speed_record, step_record, summarize


def utc_stamp(now: datetime | None = None) -> str:
    """The UTC time in every result's name, e.g. ``20250101T120000Z``."""
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def bundle_dir(results_dir: Path, label: str, now: datetime | None = None) -> Path:
    """``results/<UTC time>-<label>``, e.g. ``results/20250101T120000Z-mixed``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "ramp"
    return results_dir / f"{utc_stamp(now)}-{safe}"


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
    "stack_cpu_seconds", "cpu_ms_per_request", "energy_source", "energy_estimated",
    "energy_joules", "joules_per_request", "requests_per_joule", "requests_per_joule_low",
    "requests_per_joule_high", "cpu_utilisation", "driver_cpu_seconds", "histogram_log",
    "settle_s", "settle_busy_cores",
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
        "energy_source": record.energy.source,
        "energy_estimated": record.energy.estimated,
        "energy_joules": record.energy.joules,
        "joules_per_request": record.energy.joules_per_request,
        "requests_per_joule": record.energy.requests_per_joule,
        "requests_per_joule_low": record.energy.requests_per_joule_low,
        "requests_per_joule_high": record.energy.requests_per_joule_high,
        "cpu_utilisation": record.energy.utilisation,
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


class BundleError(SocialbenchError, ValueError):
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
