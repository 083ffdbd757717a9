"""A bundle's plots (PNG) and its self-contained ``report.html``: ``socialbench report DIR``.

Everything is rebuilt from the bundle's files (steps.json, the HdrHistogram logs,
manifest.json, summary.json), so a bundle copied elsewhere renders the same report.
The plots are embedded in the HTML (base64) and also kept beside it as PNG files.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import jinja2
import numpy as np
from matplotlib import pyplot as plt

from socialbench.workloads.driver.verdict import rules_text
from socialbench.workloads.probes.spans import SERVICE_TIME_CSV, EndpointTimes, PartTime
from socialbench.workloads.ramp.engine import Phase
from socialbench.workloads.reports.formatting import (
    format_latency,
    format_mib,
    format_number,
    format_rate,
    meter_lines,
)
from socialbench.workloads.reports.plotting import (
    DPI,
    SPECTRUM_NINES,
    Plot,
    percentile_axes,
    plain_log_axis,
    save,
)
from socialbench.workloads.results.files import read_bundle, read_histogram_log
from socialbench.workloads.results.schema import (
    MANIFEST,
    RAW,
    RESOURCES_CSV,
    SCHEMAS,
    STEPS_CSV,
    STEPS_JSON,
    SUMMARY,
    Bundle,
    StepRecord,
)

REPORT = "report.html"
LATENCY_PLOT = "latency-vs-rate.png"
ACHIEVED_PLOT = "achieved-vs-offered.png"
SPECTRUM_PLOT = "latency-spectrum.png"
RESOURCES_PLOT = "cpu-by-component.png"
SERVICE_PLOT = "latency-by-service.png"
HOST_PLOT = "host-speed.png"
_TEMPLATE = Path(__file__).with_name("report.html.j2")
_PHASE_MARKERS = {Phase.RAMP: "o", Phase.REFINE: "x", Phase.CONFIRM: "*"}


def _by_rate(steps: Sequence[StepRecord], phase: Phase) -> list[StepRecord]:
    return sorted((s for s in steps if s.phase is phase), key=lambda s: s.offered_rps)


def _mark_answer(axis: Any, bundle: Bundle) -> None:
    rate = bundle.summary.max_rate_rps
    if rate is not None:
        axis.axvline(rate, color="tab:green", linestyle=":", linewidth=1.2,
                     label=f"max at SLA: {rate:,.6g} req/s")


def plot_latency_vs_rate(bundle: Bundle, path: Path) -> None:
    """Latency percentiles against the offered rate, with the SLA lines."""
    figure, axis = plt.subplots(figsize=(8, 4.8))
    reference = bundle.reference_repeat
    steps = bundle.steps_of(reference)
    ramp = _by_rate(steps, Phase.RAMP)
    rates = [s.offered_rps for s in ramp]
    for key, style in (("50", "-"), ("90", "-"), ("99", "-"), ("99.9", "--")):
        axis.plot(rates, [s.latency_ms[key] for s in ramp], style, marker="o", markersize=4,
                  label=f"p{key}")
    for phase in (Phase.REFINE, Phase.CONFIRM):
        points = _by_rate(steps, phase)
        if points:
            axis.scatter([s.offered_rps for s in points], [s.latency_ms["99"] for s in points],
                         marker=_PHASE_MARKERS[phase], s=60, color="black", zorder=3,
                         label=f"p99, {phase.value} runs")
    for repeat in sorted({s.repeat for s in bundle.steps} - {reference}):
        other = _by_rate(bundle.steps_of(repeat), Phase.RAMP)
        axis.plot([s.offered_rps for s in other], [s.latency_ms["99"] for s in other],
                  color="grey", linewidth=0.8, alpha=0.7, label=f"p99, repeat {repeat}")
    for sla in bundle.manifest.config.slas:
        axis.axhline(sla.threshold_ms, color="tab:red", linestyle="--", linewidth=1.2,
                     label=f"SLA {sla}")
    _mark_answer(axis, bundle)
    axis.set_yscale("log")
    plain_log_axis(axis)
    axis.set_xlabel("offered rate (req/s)")
    axis.set_ylabel("latency from intended send time (ms)")
    axis.set_title(f"{bundle.label}: latency percentiles vs offered rate (repeat {reference})")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    save(figure, path)


def plot_achieved_vs_offered(bundle: Bundle, path: Path) -> None:
    """Achieved against offered rate, with the ideal and the minimum-achieved lines."""
    figure, axis = plt.subplots(figsize=(8, 4.8))
    steps = bundle.steps
    top = max([s.offered_rps for s in steps] + [1.0])
    axis.plot([0, top], [0, top], color="grey", linewidth=1, label="achieved = offered")
    minimum = bundle.manifest.config.min_achieved_ratio
    axis.plot([0, top], [0, minimum * top], color="tab:red", linestyle="--", linewidth=1,
              label=f"{minimum:.0%} of offered (stop below)")
    for repeat in sorted({s.repeat for s in steps}):
        ramp = _by_rate(bundle.steps_of(repeat), Phase.RAMP)
        axis.plot([s.offered_rps for s in ramp], [s.achieved_rps for s in ramp], marker="o",
                  markersize=4, label=f"ramp, repeat {repeat}")
    for phase in (Phase.REFINE, Phase.CONFIRM):
        points = _by_rate(steps, phase)
        if points:
            axis.scatter([s.offered_rps for s in points], [s.achieved_rps for s in points],
                         marker=_PHASE_MARKERS[phase], s=60, color="black", zorder=3,
                         label=f"{phase.value} runs")
    _mark_answer(axis, bundle)
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0)
    axis.set_xlabel("offered rate (req/s)")
    axis.set_ylabel("achieved rate (responses/s)")
    axis.set_title(f"{bundle.label}: achieved vs offered")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    save(figure, path)


def plot_latency_spectrum(bundle: Bundle, path: Path) -> None:
    """Each step's latency by percentile, HdrHistogram style (log axis of 1 / (1 - q))."""
    figure, axis = plt.subplots(figsize=(8, 4.8))
    steps = bundle.steps_of(bundle.reference_repeat)
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(steps), 1)))
    widest = 1
    for step, colour in zip(steps, colours, strict=False):
        histogram = read_histogram_log(bundle.directory / step.histogram_log)
        count = histogram.get_total_count()
        if count == 0:
            continue
        nines = min(np.log10(count), SPECTRUM_NINES)
        widest = max(widest, int(np.ceil(nines)))
        x = np.logspace(0, nines, 200)  # 1 / (1 - q)
        values = [histogram.get_value_at_percentile(100 - 100 / v) / 1000 for v in x]
        axis.plot(x, values, color=colour, marker=_PHASE_MARKERS[step.phase], markevery=[-1],
                  label=f"{step.offered_rps:,.6g} req/s ({step.phase.value})")
    for sla in bundle.manifest.config.slas:
        axis.axhline(sla.threshold_ms, color="tab:red", linestyle="--", linewidth=1,
                     label=f"SLA {sla}")
    percentile_axes(axis, widest, "latency from intended send time (ms)")
    axis.set_title(f"{bundle.label}: latency by percentile, each step "
                   f"(repeat {bundle.reference_repeat})")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    save(figure, path)


def plot_cpu_by_component(bundle: Bundle, path: Path) -> bool:
    """CPU cores used by each component per ramp step (False when never measured)."""
    steps = [s for s in _by_rate(bundle.steps_of(bundle.reference_repeat), Phase.RAMP)
             if s.resources.available]
    if not steps:
        return False
    names = sorted({c.name for s in steps for c in s.resources.components})
    figure, axis = plt.subplots(figsize=(8, 4.8))
    labels = [f"{s.offered_rps:,.6g}" for s in steps]
    bottom = np.zeros(len(steps))
    colours = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(names), 1)))
    for name, colour in zip(names, colours, strict=False):
        cores = np.array([
            next((c.cpu_cores for c in s.resources.components if c.name == name), 0.0)
            for s in steps
        ])
        axis.bar(labels, cores, bottom=bottom, label=name, color=colour)
        bottom += cores
    per_request = axis.twinx()
    per_request.plot(labels, [s.resources.cpu_ms_per_request or 0.0 for s in steps],
                     color="black", marker="o", label="stack CPU ms per request")
    per_request.set_ylabel("CPU ms per request (whole stack)")
    per_request.set_ylim(bottom=0)
    per_request.legend(loc="upper right", fontsize=8)
    axis.set_xlabel("offered rate (req/s)")
    axis.set_ylabel("CPU cores busy (average over the step)")
    axis.set_title(f"{bundle.label}: where the CPU went")
    axis.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    save(figure, path)
    return True


@dataclass(frozen=True)
class ServiceTable:
    """One endpoint's latency by service, step by step: the report's table and bars."""

    endpoint: str
    steps: list[StepRecord]
    traces: list[int]  # per step
    parts: list[tuple[str, list[PartTime | None]]]  # each part's time per step, largest first


def service_tables(steps: Sequence[StepRecord]) -> list[ServiceTable]:
    """Per endpoint, each part's exclusive time at each of ``steps`` that was traced."""
    traced = [s for s in steps if s.latency_by_service is not None]
    found: dict[str, dict[int, EndpointTimes]] = {}
    for index, step in enumerate(traced):
        assert step.latency_by_service is not None
        for endpoint in step.latency_by_service.endpoints:
            found.setdefault(endpoint.endpoint, {})[index] = endpoint
    tables = []
    for name in sorted(found):
        by_step = found[name]
        cells: dict[str, list[PartTime | None]] = {}
        for index, endpoint in by_step.items():
            for part in endpoint.parts:
                cells.setdefault(part.name, [None] * len(traced))[index] = part
        order = sorted(cells, key=lambda n: -sum(p.share_ms for p in cells[n] if p))
        tables.append(ServiceTable(
            name, traced, [by_step[i].traces if i in by_step else 0 for i in range(len(traced))],
            [(part, cells[part]) for part in order]))
    return tables


def plot_latency_by_service(bundle: Bundle, path: Path) -> bool:
    """Per endpoint, one bar per step of each part's exclusive time, stacked: its share of the
    endpoint's mean time (the bar is the mean latency when no calls overlap), and its p99."""
    tables = service_tables(bundle.steps_of(bundle.reference_repeat))
    if not tables:
        return False
    names = list(dict.fromkeys(name for table in tables for name, _ in table.parts))
    colours = dict(zip(names, plt.get_cmap("tab20")(np.linspace(0, 1, max(len(names), 2))),
                       strict=False))
    legend_rows = -(-len(names) // 6)
    height = 3.4 * len(tables) + 0.3 * legend_rows + 0.3
    figure, axes = plt.subplots(len(tables), 2, figsize=(11, height), squeeze=False)
    for row, table in zip(axes, tables, strict=True):
        labels = [f"{s.offered_rps:,.6g}\n{s.phase.value}" for s in table.steps]
        for axis, key, title in ((row[0], "share_ms", "share of the mean"),
                                 (row[1], "p99_ms", "p99")):
            bottom = np.zeros(len(labels))
            for name, cells in table.parts:
                values = np.array([getattr(c, key) if c else 0.0 for c in cells])
                axis.bar(labels, values, bottom=bottom, color=colours[name], label=name)
                bottom += values
            for x, (total, traces) in enumerate(zip(bottom, table.traces, strict=True)):
                axis.annotate(f"{traces} traces", (x, total), ha="center", va="bottom",
                              fontsize=7, xytext=(0, 2), textcoords="offset points")
            axis.set_title(f"{table.endpoint}: exclusive time, {title} of each part",
                           fontsize=9)
            axis.set_ylabel("ms")
            axis.set_xlabel("offered rate (req/s), phase")
            axis.margins(y=0.12)
            axis.grid(True, axis="y", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[name]) for name in names]
    figure.legend(handles, names, loc="lower center", ncol=min(len(names), 6), fontsize=8)
    figure.tight_layout(rect=(0, (0.3 * legend_rows + 0.2) / height, 1, 1))
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return True


def plot_host_speed(bundle: Bundle, path: Path) -> bool:
    """The host's speed at each step's calibration and after the run, against the run's
    first, with the drift band (False when the run was not calibrated)."""
    calibrated = [s for s in bundle.steps if s.host is not None]
    if not calibrated:
        return False
    summary = bundle.summary
    start = calibrated[0].started_at
    figure, axis = plt.subplots(figsize=(8, 4.2))
    minutes = [(s.host.calibration.measured_at - start).total_seconds() / 60
               for s in calibrated if s.host]
    series = {"speed (geometric mean)": [s.host.speed for s in calibrated if s.host]}
    for part in ("cpu", "loopback", "memory"):
        series[part] = [s.host.parts[part] for s in calibrated if s.host]
    end = summary.host_calibration_end
    first = calibrated[0].host
    if end is not None and first is not None:
        minutes.append((end.measured_at - start).total_seconds() / 60)
        series["speed (geometric mean)"].append(end.speed_relative_to(first.calibration))
        for part, value in end.ratios_to(first.calibration).items():
            series[part].append(value)
    for name, values in series.items():
        main = name.startswith("speed")
        axis.plot(minutes, values, marker="o" if main else ".", linewidth=2 if main else 1,
                  markersize=5 if main else 3, label=name, alpha=1 if main else 0.6,
                  color="black" if main else None)
    drift = summary.host_drift or bundle.manifest.config.host_drift
    axis.axhspan(1 - drift, 1 + drift, color="tab:green", alpha=0.1,
                 label=f"within {drift:.0%} of the start")
    flagged = [s for s in calibrated if s.host and s.host.flagged]
    if flagged:
        axis.scatter([(s.host.calibration.measured_at - start).total_seconds() / 60
                      for s in flagged if s.host],
                     [s.host.speed for s in flagged if s.host], s=90, facecolors="none",
                     edgecolors="tab:red", label="flagged step")
    axis.set_xlabel("minutes since the first step")
    axis.set_ylabel("speed / the run's first calibration")
    axis.set_title(f"{bundle.label}: the host's speed before each step, and after the run")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    save(figure, path)
    return True


def make_plots(bundle: Bundle) -> list[Plot]:
    """Every plot of the bundle, written beside it."""
    directory = bundle.directory
    made: list[tuple[str, str, str]] = []
    plot_latency_vs_rate(bundle, directory / LATENCY_PLOT)
    made.append((LATENCY_PLOT, "Latency percentiles vs offered rate",
                 "From each request's intended send time (wrk2's method); dashed red: the SLA."))
    plot_achieved_vs_offered(bundle, directory / ACHIEVED_PLOT)
    made.append((ACHIEVED_PLOT, "Achieved vs offered rate",
                 "Responses per second received during each step's measured window."))
    plot_latency_spectrum(bundle, directory / SPECTRUM_PLOT)
    made.append((SPECTRUM_PLOT, "Latency spectrum per step",
                 "HdrHistogram's percentile distribution, from each step's .hlog file."))
    if plot_cpu_by_component(bundle, directory / RESOURCES_PLOT):
        made.append((RESOURCES_PLOT, "CPU by component",
                     "CPU time of each component of the stack (process tree, or container) over "
                     "each step (warm-up and "
                     "drain included), as cores busy; line: stack CPU per response."))
    if plot_latency_by_service(bundle, directory / SERVICE_PLOT):
        made.append((SERVICE_PLOT, "Latency by service",
                     "Each service's exclusive time (its server span less its calls), each "
                     "store's and each RPC's wait, from the traced requests of each step, "
                     "stacked; left each part's share of the mean (the bar is the mean "
                     "latency when no calls overlap), right the 99th percentiles (which do "
                     "not add up to the requests' p99)."))
    if plot_host_speed(bundle, directory / HOST_PLOT):
        made.append((HOST_PLOT, "The host's speed",
                     "Fixed work (one CPU-bound Python process per CPU, loopback TCP round "
                     "trips, memory copies) measured before each step with the target idle, "
                     "and after the run, against the run's first; circled: steps flagged "
                     "because it moved more than the band."))
    return [
        Plot(name, title, caption, base64.b64encode((directory / name).read_bytes()).decode())
        for name, title, caption in made
    ]


# ---------------------------------------------------------------- HTML


def render_html(bundle: Bundle, plots: Sequence[Plot]) -> str:
    """report.html's text."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATE.parent),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    environment.filters.update(rate=format_rate, latency=format_latency, mib=format_mib,
                               number=format_number)
    reference = bundle.steps_of(bundle.reference_repeat)
    components = sorted({c.name for s in reference for c in s.resources.components})
    usage = {
        (s.name, c.name): c for s in reference for c in s.resources.components
    }
    files = [MANIFEST, SUMMARY, STEPS_JSON, STEPS_CSV, RESOURCES_CSV, f"{SCHEMAS}/", f"{RAW}/"]
    if (bundle.directory / SERVICE_TIME_CSV).exists():
        files.insert(5, SERVICE_TIME_CSV)
    return environment.get_template(_TEMPLATE.name).render(
        bundle=bundle,
        manifest=bundle.manifest,
        summary=bundle.summary,
        config=bundle.manifest.config,
        reference=reference,
        components=components,
        usage=usage,
        plots=plots,
        files=files,
        config_json=bundle.manifest.config.model_dump_json(indent=2),
        hardware=bundle.manifest.hardware,
        software=bundle.manifest.software,
        git=bundle.manifest.git,
        command_line=" ".join(bundle.manifest.command_line),
        dataset=bundle.manifest.dataset,
        driver_rules=rules_text(),
        service_tables=service_tables(reference),
        meter_lines=meter_lines(bundle.manifest.energy_meter),
        json=json,
    )


def build_report(directory: Path) -> Path:
    """(Re)build every plot and report.html of the bundle in ``directory``."""
    bundle = read_bundle(directory)
    plots = make_plots(bundle)
    path = directory / REPORT
    path.write_text(render_html(bundle, plots))
    return path
