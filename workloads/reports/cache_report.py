"""The plots and report.html of a cache bundle (``socialbench cache report DIR``).

:func:`build_cache_report` (re)builds them from the bundle's files
(socialbench.workloads.results.cache_runs).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jinja2
import numpy as np
from matplotlib import pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter

from socialbench.workloads.cache.energy import OpsEnergy, format_joules
from socialbench.workloads.cache.scale import ScaleOutcome
from socialbench.workloads.reports.formatting import meter_lines
from socialbench.workloads.reports.plotting import SPECTRUM_NINES, Plot, percentile_axes, save
from socialbench.workloads.results.cache_runs import RunRecord, read_records
from socialbench.workloads.results.files import read_histogram_log

REPORT = "report.html"
PIPELINE_PLOT = "throughput-vs-pipeline.png"
SPECTRUM_PLOT = "latency-spectrum.png"
SCALE_PLOT = "instances-vs-aggregate.png"
_TEMPLATE = Path(__file__).with_name("cache_report.html.j2")


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
    save(figure, path)


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
    save(figure, path)


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
    save(figure, path)


def energy_cells(energy: OpsEnergy | None) -> tuple[str, str]:
    """Energy per operation and ops/s per watt as the report shows them (an estimate says
    so, with its band)."""
    if energy is None:
        return "—", "—"
    if energy.joules_per_op is None or energy.ops_per_s_per_watt is None:
        return "unavailable", "unavailable"
    if energy.estimated:
        return (f"{format_joules(energy.joules_per_op)} (estimated)",
                f"{energy.ops_per_s_per_watt:,.0f} (estimated, {energy.band_text()})")
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
        meter_lines=meter_lines(manifest.energy_meter),
        config_json=json.dumps(manifest.config, indent=2, default=str),
        command_line=" ".join(manifest.command_line),
    )
    path = directory / REPORT
    path.write_text(html)
    return path
