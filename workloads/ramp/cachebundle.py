"""Results bundles of ``socialbench cache run`` and ``cache scale``, and their report.

    results/<UTC time>-cache-<label>/
      manifest.json       kind (cache-run / cache-scale), machine (hardware, software, git,
                          command line), the configuration, how energy was measured
      runs.json, runs.csv one record per run (per instance and instance count for scale);
                          a run's energy per operation (cache run; scale: per probe)
      raw/<run>.json      the generator's full result (encoded HdrHistograms included)
      histograms/<run>-<op>.hlog  HdrHistogram interval logs (µs), op = set, get, all
      scale.json, scale.csv       scale only: every probe (with its energy), each level's
                                  verdict, the answer
      *.png, report.html  plots (throughput vs pipeline, latency spectrum, instances vs
                          aggregate ops/s) and the self-contained report

It lives with the ramp (it uses the ramp's bundle and report helpers and the machine
description); the generator itself (:mod:`socialbench.workloads.cache`) knows none of it.
"""

from __future__ import annotations

import base64
import csv
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from matplotlib import pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter
from pydantic import BaseModel, Field, TypeAdapter

from socialbench import __version__
from socialbench.workloads.cache.energy import OpsEnergy, format_joules
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.scale import Level, ScaleOutcome
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.ramp import machine
from socialbench.workloads.ramp.bundle import (
    BundleError,
    RunHeader,
    bundle_dir,
    read_histogram_log,
    write_interval_log,
)
from socialbench.workloads.ramp.job import energy_source
from socialbench.workloads.ramp.report import (
    SPECTRUM_NINES,
    Plot,
    _save,
    percentile_axes,
)

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
RUNS_JSON = "runs.json"
RUNS_CSV = "runs.csv"
SCALE_JSON = "scale.json"
SCALE_CSV = "scale.csv"
REPORT = "report.html"
PIPELINE_PLOT = "throughput-vs-pipeline.png"
SPECTRUM_PLOT = "latency-spectrum.png"
SCALE_PLOT = "instances-vs-aggregate.png"
OPS = ("set", "get", "all")
KEYS = ("50", "90", "99", "99.9", "99.99", "100")
_TEMPLATE = Path(__file__).with_name("cache_report.html.j2")


class CacheManifest(RunHeader):
    schema_version: int = SCHEMA_VERSION
    kind: str  # cache-run or cache-scale
    hardware: dict[str, Any]
    software: dict[str, Any]
    config: dict[str, Any]
    energy_source: str = Field(default="not recorded",
                               description="How energy was measured, or why it was not.")


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
    "ops_per_generator_cpu_s", "saturated", "passed", "energy_source", "joules", "watts",
    "joules_per_op", "ops_per_s_per_watt",
)
ENERGY_COLUMNS = ("source", "joules", "watts", "joules_per_op", "ops_per_s_per_watt")


def _energy_cells(energy: OpsEnergy | None) -> dict[str, Any]:
    """The energy columns of a CSV row; "unavailable" (not 0) when it was not measured."""
    if energy is None:
        return dict.fromkeys(ENERGY_COLUMNS, "")
    cells: dict[str, Any] = {k: getattr(energy, k) for k in ENERGY_COLUMNS}
    if not energy.available:
        cells.update(dict.fromkeys(ENERGY_COLUMNS[1:], "unavailable"))
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
                 now: datetime | None = None, power_cmd: str | None = None,
                 preset: PresetRecord | None = None) -> None:
        self.directory = bundle_dir(results_dir, f"cache-{label}", now)
        self.directory.mkdir(parents=True, exist_ok=False)
        (self.directory / "raw").mkdir()
        (self.directory / "histograms").mkdir()
        self.records: list[RunRecord] = []
        self.manifest = CacheManifest(
            kind=kind, socialbench_version=__version__, created_at=now or datetime.now(UTC),
            label=label, config=config, energy_source=energy_source(power_cmd), preset=preset,
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

    def finish(self) -> Path:
        return build_cache_report(self.directory)


# ---------------------------------------------------------------- report


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


def plot_pipeline(records: list[RunRecord], path: Path, title: str) -> None:
    figure, axis = plt.subplots(figsize=(8, 4.8))
    ordered = sorted(records, key=lambda r: r.pipeline)
    depths = [r.pipeline for r in ordered]
    axis.plot(depths, [r.ops_per_s for r in ordered], marker="o", label="ops/s")
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_locator(FixedLocator(depths))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_xlabel("pipeline depth (requests in flight per connection)")
    axis.set_ylabel("ops/s (sets + gets)")
    axis.set_ylim(bottom=0)
    latency = axis.twinx()
    latency.plot(depths, [r.latency_ms["all"]["99"] for r in ordered], color="tab:red",
                 marker="x", linestyle="--", label="p99 (ms)")
    latency.set_ylabel("p99 latency (ms)")
    latency.set_ylim(bottom=0)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(loc="upper left", fontsize=8)
    latency.legend(loc="upper right", fontsize=8)
    _save(figure, path)


def plot_spectrum(directory: Path, records: list[RunRecord], path: Path, title: str,
                  sla_ms: float | None) -> None:
    figure, axis = plt.subplots(figsize=(8, 4.8))
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(records), 1)))
    widest = 1
    for record, colour in zip(records, colours, strict=False):
        for op, style in (("get", "-"), ("set", ":")):
            histogram = read_histogram_log(directory / record.histogram_logs[op])
            count = histogram.get_total_count()
            if count == 0:
                continue
            nines = min(np.log10(count), SPECTRUM_NINES)
            widest = max(widest, int(np.ceil(nines)))
            x = np.logspace(0, nines, 200)
            values = [histogram.get_value_at_percentile(100 - 100 / v) / 1000 for v in x]
            axis.plot(x, values, style, color=colour, label=f"{record.name} {op}")
    if sla_ms is not None:
        axis.axhline(sla_ms, color="tab:red", linestyle="--", linewidth=1,
                     label=f"SLA p99 {sla_ms:g} ms")
    percentile_axes(axis, widest, "latency (ms)")
    axis.set_title(title)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    _save(figure, path)


def plot_scale(outcome: ScaleOutcome, path: Path, title: str) -> None:
    figure, axis = plt.subplots(figsize=(8, 4.8))
    counts = [level.instances for level in outcome.levels]
    held = [level.aggregate_ops_per_s for level in outcome.levels]
    axis.plot([c for c, v in zip(counts, held, strict=True) if v is not None],
              [v for v in held if v is not None], marker="o", label="aggregate ops/s, SLA held")
    broken = [(level.instances, level.reported.aggregate_ops_per_s)
              for level in outcome.levels if level.held is None]
    if broken:
        axis.scatter([c for c, _ in broken], [v for _, v in broken], marker="x",
                     color="tab:red", s=60, label="SLA not held (last probe)")
    if outcome.levels and outcome.levels[0].held is not None:
        one = outcome.levels[0].held.aggregate_ops_per_s
        axis.plot(counts, [one * c for c in counts], color="grey", linestyle=":",
                  label="linear from 1 instance")
    if outcome.best_instances is not None:
        axis.axvline(outcome.best_instances, color="tab:green", linestyle=":",
                     label=f"best: {outcome.best_instances} instances")
    axis.xaxis.set_major_locator(FixedLocator(counts or [1]))
    axis.set_xlabel("server instances")
    axis.set_ylabel("aggregate ops/s")
    axis.set_ylim(bottom=0)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def energy_cells(energy: OpsEnergy | None) -> tuple[str, str]:
    """Energy per operation and ops/s per watt as the report shows them."""
    if energy is None:
        return "—", "—"
    if energy.joules_per_op is None or energy.ops_per_s_per_watt is None:
        return "unavailable", "unavailable"
    return format_joules(energy.joules_per_op), f"{energy.ops_per_s_per_watt:,.0f}"


def build_cache_report(directory: Path) -> Path:
    """(Re)build the plots and report.html of a cache bundle from its files."""
    manifest, records, outcome = read_records(directory)
    made: list[tuple[str, str, str]] = []
    sla_ms = outcome.config.sla_p99_ms if outcome else None
    if len({r.pipeline for r in records}) > 1 and outcome is None:
        plot_pipeline(records, directory / PIPELINE_PLOT,
                      f"{manifest.label}: throughput vs pipeline depth")
        made.append((PIPELINE_PLOT, "Throughput vs pipeline depth",
                     "ops/s of each run (left) and its p99 latency (right, dashed)."))
    if outcome is not None:
        plot_scale(outcome, directory / SCALE_PLOT,
                   f"{manifest.label}: instances vs aggregate ops/s")
        made.append((SCALE_PLOT, "Instances vs aggregate ops/s",
                     "Aggregate of every instance at the highest rate found that held the "
                     "SLA on all of them; red x: no tested rate held it."))
    spectrum = [r for r in records if outcome is None or r.passed] or records
    if spectrum:
        plot_spectrum(directory, spectrum[-12:], directory / SPECTRUM_PLOT,
                      f"{manifest.label}: latency by percentile", sla_ms)
        made.append((SPECTRUM_PLOT, "Latency spectrum",
                     "HdrHistogram percentile distribution of each run's gets (solid) and "
                     "sets (dotted), from its .hlog files."))
    plots = [Plot(name, title, caption,
                  base64.b64encode((directory / name).read_bytes()).decode())
             for name, title, caption in made]
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATE.parent), autoescape=True,
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    html = environment.get_template(_TEMPLATE.name).render(
        manifest=manifest, records=records, outcome=outcome, plots=plots,
        energy_cells=energy_cells,
        config_json=json.dumps(manifest.config, indent=2, default=str),
        command_line=" ".join(manifest.command_line),
    )
    path = directory / REPORT
    path.write_text(html)
    return path
