"""Runs side by side: ``socialbench compare DIR...`` (the first bundle is the baseline).

The comparison the seed documents make between platforms: max rate at the SLA and its
ratio, p99 there, p99 at the offered rates every run measured, perf per watt and CPU per
request, each bundle by its best repeat; printed, and rendered as ``compare.html`` + PNGs
(the seeds' three figures as bars normalised to the baseline, :mod:`.energy_compare`) +
JSON. A perf-per-watt ratio with an estimate on either side says so. Above the tables,
every setting that differs and changes the number
(:mod:`.differences`; different SLAs or workloads are refused unless forced), and beside
the ratio of max rates the ratio of the hosts' speeds. Each bundle's kind is read from its
manifest: ramp bundles are compared here, cache bundles by :mod:`.cache_compare`, and
kinds are not mixed.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib import pyplot as plt
from matplotlib.ticker import FuncFormatter
from rich.console import Console
from rich.table import Table

from socialbench.workloads.ramp.engine import format_ms, sla_text
from socialbench.workloads.reports.cache_compare import CacheComparison, compare_cache
from socialbench.workloads.reports.differences import (
    Difference,
    differences,
    host_speed_ratio,
    refusals,
)
from socialbench.workloads.reports.energy_compare import (
    EnergySide,
    Figure,
    energy_warnings,
    plot_seed_figures,
    ratio_band,
)
from socialbench.workloads.reports.formatting import (
    format_latency,
    format_per_watt_band,
    format_rate,
    format_ratio,
    machine_name,
    ratio,
)
from socialbench.workloads.reports.html import (
    COMPARE_HTML,
    COMPARE_JSON,
    html_figure,
    html_page,
    html_sources,
    html_table,
)
from socialbench.workloads.reports.plotting import log_tick_label
from socialbench.workloads.results.files import BundleError, read_bundle
from socialbench.workloads.results.schema import MANIFEST, Bundle

COMPARE_PLOT = "p99-vs-rate.png"
FIGURES_PLOT = "seed-figures.png"
RATE_DIGITS = 3  # offered rates equal to this many decimals are the same rate
RAMP = "ramp"  # the kind of a bundle whose manifest names none (cache bundles name theirs)


def bundle_kind(directory: Path) -> str:
    """``ramp``, ``cache-run`` or ``cache-scale``, from the bundle's manifest."""
    try:
        manifest = json.loads((directory / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{directory} is not a bundle: {MANIFEST} is missing") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"{directory}: {MANIFEST} is not readable: {exc}") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{directory}: {MANIFEST} is not a JSON object")
    return str(manifest.get("kind", RAMP))


@dataclass
class RunNumbers:
    """What one bundle contributes to a comparison."""

    bundle: Bundle
    max_rate_rps: float | None
    p99_ms: float | None
    joules_per_request: float | None
    cpu_ms_per_request: float | None
    p99_by_rate: dict[float, float] = field(default_factory=dict)
    energy: EnergySide | None = None  # perf per watt at the answer

    @property
    def label(self) -> str:
        return self.bundle.label

    @property
    def machine(self) -> str:
        return machine_name(self.bundle.manifest.hardware)

    @classmethod
    def of(cls, bundle: Bundle) -> RunNumbers:
        best = bundle.summary.best
        p99_by_rate: dict[float, float] = {}
        for step in bundle.steps_of(bundle.reference_repeat):  # later runs at a rate win
            p99_by_rate[round(step.offered_rps, RATE_DIGITS)] = step.latency_ms["99"]
        answer = next((s for s in bundle.steps if best and s.name == best.step), None)
        energy = EnergySide(
            run=bundle.label, value=best.requests_per_joule if best else None,
            low=best.requests_per_joule_low if best else None,
            high=best.requests_per_joule_high if best else None,
            estimated=best.energy_estimated if best else False,
            label=best.energy_label if best else "", meter=bundle.manifest.energy_meter,
            utilisation=answer.energy.utilisation if answer else None)
        return cls(
            bundle=bundle,
            max_rate_rps=best.max_rate_rps if best else None,
            p99_ms=best.p99_ms if best else None,
            joules_per_request=best.joules_per_request if best else None,
            cpu_ms_per_request=best.cpu_ms_per_request if best else None,
            p99_by_rate=p99_by_rate, energy=energy,
        )


@dataclass
class Comparison:
    runs: list[RunNumbers]
    differences: list[Difference] = field(default_factory=list)

    @property
    def baseline(self) -> RunNumbers:
        return self.runs[0]

    @property
    def common_rates(self) -> list[float]:
        """Offered rates that every run measured (in its best repeat)."""
        rates = set(self.runs[0].p99_by_rate)
        for run in self.runs[1:]:
            rates &= set(run.p99_by_rate)
        return sorted(rates)

    def rate_ratio(self, run: RunNumbers) -> float | None:
        return ratio(run.max_rate_rps, self.baseline.max_rate_rps)

    def p99_ratio(self, run: RunNumbers) -> float | None:
        return ratio(run.p99_ms, self.baseline.p99_ms)

    def energy_ratio(self, run: RunNumbers) -> float | None:
        return ratio(run.joules_per_request, self.baseline.joules_per_request)

    def per_watt_ratio(self, run: RunNumbers) -> float | None:
        """Perf per watt (req/s per W at the answer), run / baseline."""
        return ratio(run.energy.value if run.energy else None,
                     self.baseline.energy.value if self.baseline.energy else None)

    def per_watt_band(self, run: RunNumbers) -> tuple[float, float] | None:
        """Where the perf-per-watt ratio can lie given the estimates' bands (None: both
        measured, or a side without a value)."""
        if run.energy is None or self.baseline.energy is None or not (
                run.energy.estimated or self.baseline.energy.estimated):
            return None
        return ratio_band(run.energy, self.baseline.energy)

    def energy_warnings(self) -> list[str]:
        """What each perf-per-watt ratio rests on, when not two measurements alike."""
        base = self.baseline.energy
        return [line for run in self.runs[1:] if run.energy is not None and base is not None
                for line in energy_warnings(run.energy, base)]

    def per_watt_text(self, run: RunNumbers) -> str:
        """``1.40x (+40%)``, an estimate's ``1.40x (+40%), estimated: 1.1x-1.8x``."""
        text = format_ratio(self.per_watt_ratio(run))
        band = self.per_watt_band(run)
        if band is not None and run is not self.baseline:
            text += f", estimated: {band[0]:.2f}x-{band[1]:.2f}x"
        return text

    def host_ratio(self, run: RunNumbers) -> float | None:
        """The run's host speed over the baseline's, from their first calibrations."""
        return host_speed_ratio(run.bundle, self.baseline.bundle)

    def host_part_ratios(self, run: RunNumbers) -> dict[str, float] | None:
        mine = run.bundle.summary.host_calibration_start
        theirs = self.baseline.bundle.summary.host_calibration_start
        return mine.ratios_to(theirs) if mine and theirs else None

    def difference_lines(self) -> list[str]:
        """Each difference in a sentence, and each run whose own number is not comparable."""
        labels = [run.label for run in self.runs]
        lines = [difference.describe(labels) for difference in self.differences]
        lines.extend(f"{run.label} is not comparable on its own: "
                     f"{run.bundle.summary.not_comparable}"
                     for run in self.runs if not run.bundle.summary.comparable)
        return lines

    def sentence(self, run: RunNumbers) -> str:
        """The seed documents' phrasing: "20% more req/s at the SLA, p99 34% lower"."""
        parts = []
        rates = self.rate_ratio(run)
        if rates is not None:
            parts.append(f"{abs(rates - 1):.0%} {'more' if rates >= 1 else 'fewer'} req/s "
                         "at the SLA")
        p99 = self.p99_ratio(run)
        if p99 is not None:
            parts.append(f"p99 there {abs(p99 - 1):.0%} {'higher' if p99 >= 1 else 'lower'}")
        per_watt = self.per_watt_ratio(run)
        if per_watt is not None:
            estimated = run.energy is not None and self.baseline.energy is not None and (
                run.energy.estimated or self.baseline.energy.estimated)
            parts.append(f"perf per watt {abs(per_watt - 1):.0%} "
                         f"{'higher' if per_watt >= 1 else 'lower'}"
                         + (" (an estimate: see the warnings)" if estimated else ""))
        host = self.host_ratio(run)
        if host is not None and parts:
            parts.append(f"host speed {format_ratio(host)}")
        detail = ", ".join(parts) or "no common answer to compare"
        return f"{run.label} vs {self.baseline.label}: {detail}"

    def to_json(self) -> dict[str, object]:
        return {
            "baseline": self.baseline.label,
            "differences": [
                {"name": d.name, "values": list(d.values), "refuses": d.refuses, "why": d.why}
                for d in self.differences
            ],
            "energy_warnings": self.energy_warnings(),
            "runs": [
                {
                    "label": run.label,
                    "directory": str(run.bundle.directory),
                    "machine": run.machine,
                    "sla": [sla.model_dump() for sla in run.bundle.manifest.config.slas],
                    "max_rate_rps": run.max_rate_rps,
                    "max_rate_ratio": self.rate_ratio(run),
                    "p99_ms": run.p99_ms,
                    "p99_ratio": self.p99_ratio(run),
                    "joules_per_request": run.joules_per_request,
                    "energy_ratio": self.energy_ratio(run),
                    "requests_per_joule": run.energy.value if run.energy else None,
                    "requests_per_joule_band": [run.energy.low, run.energy.high]
                    if run.energy and run.energy.estimated else None,
                    "energy_estimated": run.energy.estimated if run.energy else False,
                    "energy_label": run.energy.label if run.energy else "",
                    "energy_meter": run.energy.meter.kind
                    if run.energy and run.energy.meter else None,
                    "per_watt_ratio": self.per_watt_ratio(run),
                    "per_watt_ratio_band": self.per_watt_band(run),
                    "cpu_ms_per_request": run.cpu_ms_per_request,
                    "host_speed_ratio": self.host_ratio(run),
                    "host_part_ratios": self.host_part_ratios(run),
                    "comparable": run.bundle.summary.comparable,
                    "p99_at_common_rates_ms": {
                        f"{rate:g}": run.p99_by_rate[rate] for rate in self.common_rates
                    },
                    "p99_ratio_at_common_rates": {
                        f"{rate:g}": ratio(run.p99_by_rate[rate],
                                           self.baseline.p99_by_rate[rate])
                        for rate in self.common_rates
                    },
                }
                for run in self.runs
            ],
        }


class IncomparableError(BundleError):
    """Bundles that answer different questions (SLA, workload); --force compares anyway."""


def compare(directories: Sequence[Path], force: bool = False) -> Comparison | CacheComparison:
    """Read the bundles (the first is the baseline); all must be of one kind."""
    kinds = [bundle_kind(directory) for directory in directories]
    for directory, kind in zip(directories[1:], kinds[1:], strict=True):
        if kind != kinds[0]:
            raise BundleError(
                f"cannot compare a {kinds[0]} bundle ({directories[0]}) with a {kind} bundle "
                f"({directory}): compare ramps with ramps, cache runs with cache runs and "
                "cache scales with cache scales")
    if kinds and kinds[0] != RAMP:
        return compare_cache(directories)
    return compare_ramps(directories, force)


def compare_ramps(directories: Sequence[Path], force: bool = False) -> Comparison:
    """Read ramp bundles (the first is the baseline); refuse, unless ``force``, bundles
    measured against different SLAs or of different workloads."""
    bundles = [read_bundle(directory) for directory in directories]
    found = differences(bundles)
    refused = refusals(found)
    if refused and not force:
        labels = [bundle.label for bundle in bundles]
        raise IncomparableError(
            "these runs answer different questions: "
            + "; ".join(d.describe(labels) for d in refused)
            + " (--force compares them anyway)")
    return Comparison([RunNumbers.of(bundle) for bundle in bundles], found)


def headline_rows(comparison: Comparison) -> list[list[str]]:
    """Rows of the headline table (the same printed and rendered)."""
    return [
        [
            run.label, run.machine, sla_text(run.bundle.manifest.config.slas),
            format_rate(run.max_rate_rps), format_ratio(comparison.rate_ratio(run)),
            format_latency(run.p99_ms), format_ratio(comparison.p99_ratio(run)),
            format_per_watt_band(run.energy.value, run.energy.low, run.energy.high,
                                 run.energy.estimated) if run.energy else "unavailable",
            comparison.per_watt_text(run),
            "—" if run.cpu_ms_per_request is None else f"{run.cpu_ms_per_request:.3g}",
            host_speed_text(comparison, run),
        ]
        for run in comparison.runs
    ]


def host_speed_text(comparison: Comparison, run: RunNumbers) -> str:
    """``0.82x (-18%): cpu 0.80, loopback 0.85, memory 0.81``, or why there is none."""
    parts = comparison.host_part_ratios(run)
    if parts is None:
        return "not calibrated"
    overall = format_ratio(comparison.host_ratio(run))
    return f"{overall}: " + ", ".join(f"{name} {value:.2f}" for name, value in parts.items())


HEADLINE_COLUMNS = ["run", "machine", "SLA", "max req/s at SLA", "ratio", "p99 there", "ratio",
                    "req/s per W there", "ratio", "CPU ms / request", "host speed ratio"]


def common_rate_rows(comparison: Comparison) -> list[list[str]]:
    base = comparison.baseline
    rows = []
    for rate in comparison.common_rates:
        row = [format_rate(rate)]
        for run in comparison.runs:
            row.append(format_latency(run.p99_by_rate[rate]))
            if run is not base:
                row.append(format_ratio(ratio(run.p99_by_rate[rate], base.p99_by_rate[rate])))
        rows.append(row)
    return rows


def common_rate_columns(comparison: Comparison) -> list[str]:
    columns = ["offered req/s"]
    for run in comparison.runs:
        columns.append(f"p99 {run.label}")
        if run is not comparison.baseline:
            columns.append("ratio")
    return columns


def print_comparison(comparison: Comparison | CacheComparison, console: Console) -> None:
    """The comparison as tables and one sentence per run."""
    if not isinstance(comparison, Comparison):
        comparison.print_to(console)
        return
    lines = comparison.difference_lines()
    if lines:
        console.print("[bold yellow]Differences that change the number:[/]")
        for line in lines:
            console.print(f"  - {line}", soft_wrap=True)
    else:
        console.print("Same SLA, workload, steps, placement, data, store layout, code, "
                      "driver settings, and host speed within its drift.")
    table = Table(*HEADLINE_COLUMNS, title=f"Baseline: {comparison.baseline.label}")
    for row in headline_rows(comparison):
        table.add_row(*row)
    console.print(table)
    if comparison.common_rates:
        rates = Table(*common_rate_columns(comparison), title="p99 at the rates every run offered")
        for row in common_rate_rows(comparison):
            rates.add_row(*row)
        console.print(rates)
    else:
        console.print("No offered rate is common to every run (compare with the same "
                      "--start-rate and --step).")
    for line in comparison.energy_warnings():
        console.print(f"[yellow]{line}[/]", soft_wrap=True)
    for run in comparison.runs[1:]:
        console.print(comparison.sentence(run))


def seed_figures(comparison: Comparison) -> list[Figure]:
    """Throughput at the SLA, p99 there, and perf per watt: each bundle / the baseline."""
    runs = comparison.runs
    return [
        Figure("throughput at the SLA", [comparison.rate_ratio(r) for r in runs]),
        Figure("p99 there (lower is better)", [comparison.p99_ratio(r) for r in runs]),
        Figure("perf per watt", [comparison.per_watt_ratio(r) for r in runs],
               [comparison.per_watt_band(r) for r in runs],
               [bool(r.energy and r.energy.estimated) for r in runs]),
    ]


def plot_p99(comparison: Comparison, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(8, 4.8))
    for run in comparison.runs:
        rates = sorted(run.p99_by_rate)
        line = axis.plot(rates, [run.p99_by_rate[r] for r in rates], marker="o", markersize=4,
                         label=run.label)[0]
        if run.max_rate_rps is not None:
            axis.axvline(run.max_rate_rps, color=line.get_color(), linestyle=":", linewidth=1)
    thresholds = {(s.key, s.threshold_ms) for run in comparison.runs
                  for s in run.bundle.manifest.config.slas}
    for key, threshold in sorted(thresholds):
        axis.axhline(threshold, color="tab:red", linestyle="--", linewidth=1,
                     label=f"SLA {key} <= {format_ms(threshold)}")
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(FuncFormatter(log_tick_label))
    axis.yaxis.set_minor_formatter(FuncFormatter(log_tick_label))
    axis.set_xlabel("offered rate (req/s)")
    axis.set_ylabel("p99 latency (ms)")
    axis.set_title("p99 vs offered rate (dotted: each run's max rate at its SLA)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def render_comparison(comparison: Comparison | CacheComparison, directory: Path) -> Path:
    """compare.html (plot embedded), the plot as PNG, and compare.json in ``directory``."""
    if not isinstance(comparison, Comparison):
        return comparison.render(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plot_p99(comparison, directory / COMPARE_PLOT)
    warnings = comparison.energy_warnings()
    plot_seed_figures(directory / FIGURES_PLOT, [r.label for r in comparison.runs],
                      seed_figures(comparison), comparison.baseline.label,
                      "hatched: an estimate (its band as the error bar)" if any(
                          r.energy and r.energy.estimated for r in comparison.runs) else "")
    (directory / COMPARE_JSON).write_text(json.dumps(comparison.to_json(), indent=2))
    sentences = "".join(f"<li>{html.escape(comparison.sentence(r))}</li>"
                        for r in comparison.runs[1:])
    sources = html_sources([(r.label, r.bundle.directory) for r in comparison.runs])
    rates = (html_table(common_rate_columns(comparison), common_rate_rows(comparison))
             if comparison.common_rates else "<p>No offered rate is common to every run.</p>")
    differing = "".join(f"<li>{html.escape(line)}</li>" for line in comparison.difference_lines())
    body = f"""<p>Baseline: <b>{html.escape(comparison.baseline.label)}</b>; ratios are run /
baseline. Each run contributes its best repeat. {datetime.now(UTC):%Y-%m-%d %H:%M UTC}</p>
<h2>Differences that change the number</h2>
<ul id="differences">{differing or "<li>none</li>"}</ul>
<ul>{sentences}</ul>
<h2>Max rate at the SLA</h2>
{html_table(HEADLINE_COLUMNS, headline_rows(comparison))}
<h2>The seeds' three figures</h2>
<ul id="energy-warnings">{"".join(f"<li>{html.escape(w)}</li>" for w in warnings)}</ul>
{html_figure(directory, FIGURES_PLOT, "throughput, p99 and perf per watt, run / baseline")}
<h2>p99 at the rates every run offered</h2>
{rates}
{html_figure(directory, COMPARE_PLOT, "p99 vs offered rate")}
<h2>Bundles</h2><ul>{sources}</ul>"""
    path = directory / COMPARE_HTML
    path.write_text(html_page("socialbench compare", body))
    return path
