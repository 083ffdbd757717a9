"""Runs side by side: ``socialbench compare DIR...`` (the first bundle is the baseline).

The comparison the seed documents make between platforms: max rate at the SLA and its
ratio, p99 there, p99 at the offered rates every run measured, and energy and CPU per
request, each bundle by its best repeat; printed, and rendered as ``compare.html`` + PNG
+ JSON. Above the tables, every setting that differs and changes the number
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
from socialbench.workloads.reports.formatting import (
    format_energy,
    format_latency,
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
        return cls(
            bundle=bundle,
            max_rate_rps=best.max_rate_rps if best else None,
            p99_ms=best.p99_ms if best else None,
            joules_per_request=best.joules_per_request if best else None,
            cpu_ms_per_request=best.cpu_ms_per_request if best else None,
            p99_by_rate=p99_by_rate,
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
        energy = self.energy_ratio(run)
        if energy is not None:
            parts.append(f"energy per request {abs(energy - 1):.0%} "
                         f"{'higher' if energy >= 1 else 'lower'}")
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
            format_energy(run.joules_per_request), format_ratio(comparison.energy_ratio(run)),
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
                    "energy / request", "ratio", "CPU ms / request", "host speed ratio"]


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
    for run in comparison.runs[1:]:
        console.print(comparison.sentence(run))


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
<h2>p99 at the rates every run offered</h2>
{rates}
{html_figure(directory, COMPARE_PLOT, "p99 vs offered rate")}
<h2>Bundles</h2><ul>{sources}</ul>"""
    path = directory / COMPARE_HTML
    path.write_text(html_page("socialbench compare", body))
    return path
