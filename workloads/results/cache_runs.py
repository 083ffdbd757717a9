"""Results bundles of ``socialbench cache run`` and ``cache scale``: records and files.

    results/<UTC time>-cache-<label>/
      manifest.json       kind (cache-run / cache-scale), machine, configuration, energy
      runs.json, runs.csv one record per run (per instance and count for scale)
      raw/<run>.json      the generator's full result (encoded HdrHistograms included)
      histograms/<run>-<op>.hlog  HdrHistogram interval logs (µs), op = set, get, all
      scale.json, scale.csv       scale only: every probe, each level's verdict, the answer
      *.png, report.html  the plots and report (socialbench.workloads.reports.cache_report)

The generator itself (:mod:`socialbench.workloads.cache`) knows none of this.
"""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter

from socialbench import __version__
from socialbench.workloads.cache.energy import OpsEnergy
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.scale import Level, ScaleOutcome
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes import machine
from socialbench.workloads.probes.energy import EnergyPlan, MeterRecord
from socialbench.workloads.results.files import (
    BundleError,
    bundle_dir,
    write_interval_log,
)
from socialbench.workloads.results.schema import RunHeader

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
RUNS_JSON = "runs.json"
RUNS_CSV = "runs.csv"
SCALE_JSON = "scale.json"
SCALE_CSV = "scale.csv"
OPS = ("set", "get", "all")
KEYS = ("50", "90", "99", "99.9", "99.99", "100")


class CacheManifest(RunHeader):
    schema_version: int = SCHEMA_VERSION
    kind: str  # cache-run or cache-scale
    hardware: dict[str, Any]
    software: dict[str, Any]
    config: dict[str, Any]
    energy_source: str = Field(default="not recorded",
                               description="How energy was measured, or why it was not.")
    energy_meter: MeterRecord | None = Field(
        default=None, description="The meter (what it covers, its sampling period) or the "
                                  "estimate (the CPU, the coefficients and their source); "
                                  "None: an older bundle.")


class RunRecord(BaseModel):
    """One run of runs.json; latencies in ms (from the send, or the intended time if open)."""

    name: str
    instances: int | None = None  # scale: the instance count of the level
    instance: int | None = None  # scale: which instance
    address: str
    protocol: str
    pipeline: int
    clients: int
    threads: int
    ratio: str
    data_size: int
    open_loop: bool
    offered_ops_per_s: float | None
    duration_s: float
    ops: int
    ops_per_s: float
    sets_per_s: float
    gets_per_s: float
    sets: int
    gets: int
    hits: int
    misses: int
    hit_ratio: float | None
    errors: int
    lost: int
    timeouts: int
    latency_ms: dict[str, dict[str, float]]
    send_lag_p99_ms: float | None
    generator_cpu_s: float
    ops_per_generator_cpu_s: float | None
    prefill_keys: int
    saturated: bool
    warnings: list[str]
    passed: bool | None = None  # scale: held the SLA
    repeat: int = 1  # which run of --runs
    raw_result: str
    histogram_logs: dict[str, str]
    energy: OpsEnergy | None = None  # cache run: the window's; scale: see the probe's


def run_record(name: str, result: CacheResult, **extra: Any) -> RunRecord:
    config = result.config
    return RunRecord(
        name=name, address=config.address, protocol=config.protocol.value,
        pipeline=config.pipeline, clients=config.clients, threads=config.threads,
        ratio=config.ratio, data_size=config.data_size, open_loop=result.open_loop,
        offered_ops_per_s=result.offered_ops_per_s, duration_s=result.duration_s,
        ops=result.ops, ops_per_s=result.ops_per_s, sets_per_s=result.sets_per_s,
        gets_per_s=result.gets_per_s, sets=result.sets, gets=result.gets, hits=result.hits,
        misses=result.misses, hit_ratio=result.hit_ratio, errors=result.errors,
        lost=result.lost, timeouts=result.timeouts,
        latency_ms={op: {k: result.latency[op].percentiles_us.get(k, 0) / 1000 for k in KEYS}
                    for op in OPS},
        send_lag_p99_ms=result.send_lag.p99_ms if result.send_lag else None,
        generator_cpu_s=result.generator_cpu_s,
        ops_per_generator_cpu_s=result.ops_per_generator_cpu_s,
        prefill_keys=result.prefill_keys, saturated=result.saturated,
        warnings=result.warnings, energy=result.energy, raw_result=f"raw/{name}.json",
        histogram_logs={op: f"histograms/{name}-{op}.hlog" for op in OPS}, **extra,
    )


CSV_COLUMNS = (
    "name", "instances", "instance", "address", "protocol", "pipeline", "clients", "threads",
    "ratio", "data_size", "open_loop", "offered_ops_per_s", "duration_s", "ops", "ops_per_s",
    "sets_per_s", "gets_per_s", "hits", "misses", "hit_ratio", "errors", "lost", "timeouts",
    *(f"{op}_p{k}_ms" for op in OPS for k in KEYS), "send_lag_p99_ms", "generator_cpu_s",
    "ops_per_generator_cpu_s", "saturated", "passed", "energy_source", "estimated", "joules",
    "watts", "joules_per_op", "ops_per_s_per_watt", "ops_per_s_per_watt_low",
    "ops_per_s_per_watt_high",
)
ENERGY_COLUMNS = ("source", "estimated", "joules", "watts", "joules_per_op",
                  "ops_per_s_per_watt", "ops_per_s_per_watt_low", "ops_per_s_per_watt_high")


def _energy_cells(energy: OpsEnergy | None) -> dict[str, Any]:
    """The energy columns of a CSV row; "unavailable" (not 0) when it was not measured;
    ``estimated`` true for an estimate (its band in the _low/_high columns)."""
    if energy is None:
        return dict.fromkeys(ENERGY_COLUMNS, "")
    cells: dict[str, Any] = {k: getattr(energy, k) for k in ENERGY_COLUMNS}
    if not energy.available:
        cells.update(dict.fromkeys(ENERGY_COLUMNS[2:], "unavailable"))
    return cells


def _csv_row(record: RunRecord) -> dict[str, Any]:
    row = record.model_dump()
    row.update({f"{op}_p{k}_ms": record.latency_ms[op][k] for op in OPS for k in KEYS})
    energy = _energy_cells(record.energy)
    row.update(energy, energy_source=energy["source"])
    return {c: "" if row.get(c) is None else row[c] for c in CSV_COLUMNS}


def describe_machine() -> dict[str, Any]:
    software = machine.software("mongod")
    return {
        "command_line": sys.argv,
        "git": machine.git_state(),
        "hardware": machine.hardware(),
        "software": {k: software[k] for k in ("socialbench", "python", "python_implementation",
                                              "memcached", "redis")},
    }


class CacheBundleWriter:
    """Writes a cache bundle as runs finish; :meth:`finish` adds the report."""

    def __init__(self, results_dir: Path, label: str, kind: str, config: dict[str, Any],
                 now: datetime | None = None, energy: EnergyPlan | None = None,
                 preset: PresetRecord | None = None) -> None:
        self.directory = bundle_dir(results_dir, f"cache-{label}", now)
        self.directory.mkdir(parents=True, exist_ok=False)
        (self.directory / "raw").mkdir()
        (self.directory / "histograms").mkdir()
        self.records: list[RunRecord] = []
        self.manifest = CacheManifest(
            kind=kind, socialbench_version=__version__, created_at=now or datetime.now(UTC),
            label=label, config=config,
            energy_source=energy.describe() if energy else "not measured",
            energy_meter=energy.record if energy else None, preset=preset,
            **describe_machine(),
        )
        (self.directory / MANIFEST).write_text(self.manifest.model_dump_json(indent=2))

    def add(self, name: str, result: CacheResult, **extra: Any) -> RunRecord:
        record = run_record(name, result, **extra)
        self.records.append(record)
        (self.directory / record.raw_result).write_text(result.model_dump_json())
        window = result.config.warmup_s if result.config.timed else 0.0
        for op in OPS:
            write_interval_log(
                self.directory / record.histogram_logs[op], result.latency[op].decode(),
                f"{op} latency in microseconds, {record.address} pipeline "
                f"{record.pipeline}; interval = the measured window",
                result.started_at, window, window + result.duration_s)
        (self.directory / RUNS_JSON).write_bytes(
            TypeAdapter(list[RunRecord]).dump_json(self.records, indent=2))
        with (self.directory / RUNS_CSV).open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(_csv_row(r) for r in self.records)
        return record

    def add_level(self, level: Level, results: list[CacheResult], repeat: int = 1) -> None:
        """A scale level: the runs of its held probe (or of its last one when none held)."""
        passed = level.held is not None
        prefix = f"r{repeat}-" if repeat > 1 else ""
        for number, result in enumerate(results):
            self.add(f"{prefix}n{level.instances}-i{number}", result, instances=level.instances,
                     instance=number, passed=passed, repeat=repeat)

    def write_scale(self, outcome: ScaleOutcome) -> None:
        (self.directory / SCALE_JSON).write_text(outcome.model_dump_json(indent=2))
        with (self.directory / SCALE_CSV).open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["instances", "held", "aggregate_ops_per_s", "worst_p99_ms",
                             "fraction_of_max", "per_instance_ops_per_s",
                             *(f"energy_{c}" for c in ENERGY_COLUMNS)])
            for level in outcome.levels:
                probe = level.reported
                energy = _energy_cells(probe.energy)
                writer.writerow([level.instances, level.held is not None,
                                 probe.aggregate_ops_per_s, probe.worst_p99_ms,
                                 "" if probe.fraction is None else probe.fraction,
                                 ";".join(f"{r.ops_per_s:.0f}" for r in probe.results),
                                 *(energy[c] for c in ENERGY_COLUMNS)])



def read_records(directory: Path) -> tuple[CacheManifest, list[RunRecord], ScaleOutcome | None]:
    """A cache bundle's manifest, runs and scale outcome; BundleError when unreadable."""
    try:
        manifest = CacheManifest.model_validate_json((directory / MANIFEST).read_bytes())
        runs_path = directory / RUNS_JSON
        records = TypeAdapter(list[RunRecord]).validate_json(runs_path.read_bytes()) \
            if runs_path.exists() else []
        scale_path = directory / SCALE_JSON
        outcome = ScaleOutcome.model_validate_json(scale_path.read_bytes()) \
            if scale_path.exists() else None
    except FileNotFoundError as exc:
        raise BundleError(f"{directory} is not a cache bundle: {exc.filename} is missing"
                          ) from None
    except ValueError as exc:
        raise BundleError(f"{directory}: {exc}") from None
    return manifest, records, outcome
