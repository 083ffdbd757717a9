"""``socialbench compare`` on cache bundles: machines (or servers) side by side, with ratios.

Bundles of ``cache run`` are compared at the pipeline depths every one ran and by their
peak (the depth with the most ops/s); bundles of ``cache scale`` at the instance counts
every one reached and by their answer (the best aggregate ops/s with the SLA held). For
each: ops/s, sets/s and gets/s, p99 of gets, sets and all operations, ops/s per
generator core (operations per generator CPU second), energy per operation and ops/s per
watt, with the ratio of each to the first bundle (the baseline), as the seed documents
compare x86 with Arm; an estimated energy is marked so, with the warnings its ratio needs
(:mod:`.energy_compare`). Printed as tables, rendered as ``compare.html`` + PNGs (the
seeds' three figures as bars normalised to the baseline) + JSON.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from matplotlib import pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter
from rich.console import Console
from rich.table import Table

from socialbench.workloads.cache.energy import OpsEnergy
from socialbench.workloads.reports.energy_compare import (
    EnergySide,
    Figure,
    energy_warnings,
    plot_seed_figures,
    ratio_band,
)
from socialbench.workloads.reports.formatting import (
    format_count,
    format_energy,
    format_latency,
    format_per_watt,
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
from socialbench.workloads.results.cache_runs import CacheManifest, RunRecord, read_records

RUN_KIND = "cache-run"
SCALE_KIND = "cache-scale"
COMPARE_PLOT = "ops-vs-pipeline.png"
FIGURES_PLOT = "seed-figures.png"
ESTIMATED = " (estimated)"
SCALE_COMPARE_PLOT = "aggregate-vs-instances.png"
P99_OPS = ("get", "set", "all")


@dataclass(frozen=True)
class CaseNumbers:
    """One pipeline depth (run bundle) or instance count (scale bundle) of a bundle."""

    ops_per_s: float
    sets_per_s: float
    gets_per_s: float
    p99_ms: dict[str, float]  # get, set, all; scale: the worst instance's
    ops_per_generator_core: float | None  # operations per generator CPU second
    energy: OpsEnergy | None
    held: bool | None = None  # scale: the SLA held at this instance count

    @property
    def joules_per_op(self) -> float | None:
        return self.energy.joules_per_op if self.energy else None

    @property
    def ops_per_s_per_watt(self) -> float | None:
        return self.energy.ops_per_s_per_watt if self.energy else None

    @classmethod
    def of(cls, records: Sequence[RunRecord], ops_per_s: float, energy: OpsEnergy | None,
           held: bool | None = None) -> CaseNumbers:
        cpu = sum(r.generator_cpu_s for r in records)
        return cls(
            ops_per_s=ops_per_s, sets_per_s=sum(r.sets_per_s for r in records),
            gets_per_s=sum(r.gets_per_s for r in records),
            p99_ms={op: max(r.latency_ms[op]["99"] for r in records) for op in P99_OPS},
            ops_per_generator_core=sum(r.ops for r in records) / cpu if cpu > 0 else None,
            energy=energy, held=held,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "ops_per_s": self.ops_per_s, "sets_per_s": self.sets_per_s,
            "gets_per_s": self.gets_per_s, "p99_ms": self.p99_ms,
            "ops_per_generator_core": self.ops_per_generator_core,
            "energy": self.energy.note if self.energy else "not measured",
            "energy_estimated": self.energy.estimated if self.energy else False,
            "energy_label": self.energy.label if self.energy else "",
            "ops_per_s_per_watt_band": [self.energy.ops_per_s_per_watt_low,
                                        self.energy.ops_per_s_per_watt_high]
            if self.energy and self.energy.estimated else None,
            "joules_per_op": self.joules_per_op, "ops_per_s_per_watt": self.ops_per_s_per_watt,
            "held": self.held,
        }


@dataclass(frozen=True)
class Metric:
    """A number compared between bundles, with its ratio to the baseline's."""

    key: str
    title: str
    phrase: str  # in the sentence: "12% more <phrase>" / "<phrase> 12% lower"
    value: Callable[[CaseNumbers], float | None]
    text: Callable[[float | None], str]
    higher_is_better: bool


METRICS = (
    Metric("ops_per_s", "ops/s", "ops/s", lambda c: c.ops_per_s, format_count, True),
    Metric("get_p99_ms", "get p99", "get p99", lambda c: c.p99_ms["get"], format_latency,
           False),
    Metric("set_p99_ms", "set p99", "set p99", lambda c: c.p99_ms["set"], format_latency,
           False),
    Metric("all_p99_ms", "p99", "p99", lambda c: c.p99_ms["all"], format_latency, False),
    Metric("ops_per_generator_core", "ops/s per gen. core", "ops/s per generator core",
           lambda c: c.ops_per_generator_core, format_count, True),
    Metric("joules_per_op", "energy / op", "energy per op", lambda c: c.joules_per_op,
           format_energy, False),
    Metric("ops_per_s_per_watt", "ops/s per W", "ops/s per watt",
           lambda c: c.ops_per_s_per_watt, format_per_watt, True),
)
HEADLINE_METRICS = ("ops_per_s", "all_p99_ms", "ops_per_generator_core", "joules_per_op",
                    "ops_per_s_per_watt")
CASE_METRICS = ("ops_per_s", "get_p99_ms", "set_p99_ms", "all_p99_ms",
                "ops_per_generator_core", "joules_per_op", "ops_per_s_per_watt")
_BY_KEY = {metric.key: metric for metric in METRICS}


def metric_ratio(metric: Metric, case: CaseNumbers | None,
                 base: CaseNumbers | None) -> float | None:
    if case is None or base is None:
        return None
    return ratio(metric.value(case), metric.value(base))


def _phrase(metric: Metric, value: float) -> str:
    change = f"{abs(value - 1):.0%}"
    if metric.higher_is_better:
        return f"{change} {'more' if value >= 1 else 'fewer'} {metric.phrase}"
    return f"{metric.phrase} {change} {'higher' if value >= 1 else 'lower'}"


@dataclass
class CacheNumbers:
    """What one cache bundle contributes: its cases and its headline case."""

    directory: Path
    manifest: CacheManifest
    cases: dict[int, CaseNumbers]
    headline_case: int | None  # run: the depth of the most ops/s; scale: the best count
    server: str

    @property
    def label(self) -> str:
        return self.manifest.label

    @property
    def machine(self) -> str:
        return machine_name(self.manifest.hardware)

    @property
    def headline(self) -> CaseNumbers | None:
        return None if self.headline_case is None else self.cases[self.headline_case]

    @classmethod
    def read(cls, directory: Path) -> CacheNumbers:
        manifest, records, outcome = read_records(directory)
        cases: dict[int, CaseNumbers] = {}
        if outcome is None:
            for depth in dict.fromkeys(r.pipeline for r in records):
                # a depth run several times (--runs): its median run counts
                runs = sorted((r for r in records if r.pipeline == depth),
                              key=lambda r: r.ops_per_s)
                record = runs[(len(runs) - 1) // 2]
                cases[depth] = CaseNumbers.of([record], record.ops_per_s, record.energy)
            headline = max(cases, key=lambda d: cases[d].ops_per_s) if cases else None
            protocol = records[0].protocol if records else "?"
            name = "redis" if protocol == "redis" else "memcached"
        else:
            for level in outcome.levels:
                of_level = [r for r in records if r.instances == level.instances
                            and r.repeat == outcome.repeat]
                if of_level:
                    probe = level.reported
                    cases[level.instances] = CaseNumbers.of(
                        of_level, probe.aggregate_ops_per_s, probe.energy, level.held is not None)
            headline = outcome.best_instances if outcome.best_instances in cases else None
            protocol = outcome.config.run.protocol.value
            name = outcome.config.server
        version = manifest.software.get(name)
        server = f"{name} {version or ''}".strip() + f" ({protocol})"
        return cls(directory, manifest, cases, headline, server)


@dataclass
class CacheComparison:
    """Cache bundles of one kind side by side; the first is the baseline."""

    kind: str
    runs: list[CacheNumbers]

    @property
    def baseline(self) -> CacheNumbers:
        return self.runs[0]

    @property
    def scale(self) -> bool:
        return self.kind == SCALE_KIND

    @property
    def case_title(self) -> str:
        return "instances" if self.scale else "pipeline"

    @property
    def common_cases(self) -> list[int]:
        """Depths (run) or instance counts (scale) every bundle has."""
        cases = set(self.runs[0].cases)
        for run in self.runs[1:]:
            cases &= set(run.cases)
        return sorted(cases)

    def headline_ratio(self, run: CacheNumbers, key: str) -> float | None:
        return metric_ratio(_BY_KEY[key], run.headline, self.baseline.headline)

    def case_ratio(self, run: CacheNumbers, key: str, case: int) -> float | None:
        return metric_ratio(_BY_KEY[key], run.cases.get(case), self.baseline.cases.get(case))

    def sentence(self, run: CacheNumbers) -> str:
        """``arm vs x86: 20% more ops/s at the peak (pipeline 126 vs 126), p99 ...``."""
        base = self.baseline
        parts = []
        for key in HEADLINE_METRICS:
            value = self.headline_ratio(run, key)
            if value is None:
                continue
            text = _phrase(_BY_KEY[key], value)
            if key == "ops_per_s":
                where = (f"with the SLA held ({run.headline_case} vs {base.headline_case} "
                         "instances)") if self.scale else (
                    f"at the peak (pipeline {run.headline_case} vs {base.headline_case})")
                text = f"{text} {where}"
            parts.append(text)
        detail = ", ".join(parts) or "no common answer to compare"
        return f"{run.label} vs {base.label}: {detail}"

    def headline_columns(self) -> list[str]:
        answer = ("best aggregate ops/s at the SLA (instances)" if self.scale
                  else "peak ops/s (pipeline)")
        columns = ["run", "machine", "server", answer, "ratio"]
        for key in HEADLINE_METRICS[1:]:
            columns += [f"{_BY_KEY[key].title} there", "ratio"]
        return columns

    def headline_rows(self) -> list[list[str]]:
        rows = []
        for run in self.runs:
            headline = run.headline
            answer = "none held" if headline is None else (
                f"{format_count(headline.ops_per_s)} ({run.headline_case})")
            row = [run.label, run.machine, run.server, answer,
                   format_ratio(self.headline_ratio(run, "ops_per_s"))]
            for key in HEADLINE_METRICS[1:]:
                metric = _BY_KEY[key]
                row += [self._cell(metric, headline),
                        format_ratio(self.headline_ratio(run, key))]
            rows.append(row)
        return rows

    @staticmethod
    def _cell(metric: Metric, numbers: CaseNumbers | None) -> str:
        """A metric's value as shown; an estimated energy says so."""
        if numbers is None:
            return "—"
        text = metric.text(metric.value(numbers))
        estimated = numbers.energy is not None and numbers.energy.estimated
        if estimated and metric.key in ("joules_per_op", "ops_per_s_per_watt"):
            text += ESTIMATED
        return text

    def case_columns(self) -> list[str]:
        columns = [self.case_title, "run", "sets/s + gets/s"]
        if self.scale:
            columns.append("SLA held")
        for key in CASE_METRICS:
            columns += [_BY_KEY[key].title, "ratio"]
        return columns

    def case_rows(self) -> list[list[str]]:
        rows = []
        for case in self.common_cases:
            for run in self.runs:
                numbers = run.cases[case]
                row = [str(case), run.label,
                       f"{format_count(numbers.sets_per_s)} + {format_count(numbers.gets_per_s)}"]
                if self.scale:
                    row.append("yes" if numbers.held else "no")
                for key in CASE_METRICS:
                    metric = _BY_KEY[key]
                    row += [self._cell(metric, numbers),
                            "" if run is self.baseline
                            else format_ratio(self.case_ratio(run, key, case))]
                rows.append(row)
        return rows

    def energy_notes(self) -> list[str]:
        return [f"{run.label}: energy {run.manifest.energy_source}" for run in self.runs]

    def energy_side(self, run: CacheNumbers) -> EnergySide:
        energy = run.headline.energy if run.headline else None
        return EnergySide(
            run=run.label, value=energy.ops_per_s_per_watt if energy else None,
            low=energy.ops_per_s_per_watt_low if energy else None,
            high=energy.ops_per_s_per_watt_high if energy else None,
            estimated=energy.estimated if energy else False,
            label=energy.label if energy else "", meter=run.manifest.energy_meter,
            utilisation=energy.utilisation if energy else None)

    def energy_warnings(self) -> list[str]:
        """What each ops/s-per-watt ratio rests on, when not two measurements alike."""
        base = self.energy_side(self.baseline)
        return [line for run in self.runs[1:]
                for line in energy_warnings(self.energy_side(run), base)]

    def seed_figures(self) -> list[Figure]:
        """ops/s at the headline, its p99, and ops/s per watt: each bundle / the baseline."""
        base = self.energy_side(self.baseline)
        sides = [self.energy_side(run) for run in self.runs]
        return [
            Figure("ops/s " + ("at the SLA" if self.scale else "at the peak"),
                   [self.headline_ratio(r, "ops_per_s") for r in self.runs]),
            Figure("p99 there (lower is better)",
                   [self.headline_ratio(r, "all_p99_ms") for r in self.runs]),
            Figure("ops/s per watt", [self.headline_ratio(r, "ops_per_s_per_watt")
                                      for r in self.runs],
                   [ratio_band(side, base) if side.estimated or base.estimated else None
                    for side in sides],
                   [side.estimated for side in sides]),
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "baseline": self.baseline.label,
            "case": self.case_title,
            "common_cases": self.common_cases,
            "energy_warnings": self.energy_warnings(),
            "runs": [
                {
                    "label": run.label,
                    "directory": str(run.directory),
                    "machine": run.machine,
                    "server": run.server,
                    "energy_source": run.manifest.energy_source,
                    "headline_case": run.headline_case,
                    "headline": run.headline.to_json() if run.headline else None,
                    "headline_ratios": {k: self.headline_ratio(run, k)
                                        for k in HEADLINE_METRICS},
                    "cases": {
                        str(case): numbers.to_json() | {
                            "ratios": {k: self.case_ratio(run, k, case) for k in CASE_METRICS}}
                        for case, numbers in sorted(run.cases.items())
                    },
                }
                for run in self.runs
            ],
        }

    def preset_notes(self) -> list[str]:
        """A line per bundle when their presets, or their deviations, differ."""
        presets = [run.manifest.preset.headline() if run.manifest.preset else "none"
                   for run in self.runs]
        if len(set(presets)) < 2:
            return []
        return ["Differs: preset (another published procedure, or the same one with other "
                "deviations): " + "; ".join(f"{run.label}: {preset}"
                                            for run, preset in zip(self.runs, presets,
                                                                   strict=True))]

    # ------------------------------------------------------------ output

    def print_to(self, console: Console) -> None:
        """The comparison as tables and one sentence per run."""
        table = Table(*self.headline_columns(), title=f"Baseline: {self.baseline.label}")
        for row in self.headline_rows():
            table.add_row(*row)
        console.print(table)
        if self.common_cases:
            cases = Table(*self.case_columns(),
                          title=f"At the {self.case_title} every bundle has (ratios: run / "
                          "baseline)")
            for row in self.case_rows():
                cases.add_row(*row)
            console.print(cases)
        else:
            console.print(f"No {self.case_title} value is common to every bundle.")
        for note in self.energy_notes() + self.preset_notes():
            console.print(note)
        for line in self.energy_warnings():
            console.print(f"[yellow]{line}[/]", soft_wrap=True)
        for run in self.runs[1:]:
            console.print(self.sentence(run))

    def plot(self, path: Path) -> None:
        figure, axis = plt.subplots(figsize=(8, 4.8))
        for run in self.runs:
            keys = sorted(run.cases)
            line = axis.plot(keys, [run.cases[k].ops_per_s for k in keys], marker="o",
                             label=run.label)[0]
            broken = [k for k in keys if run.cases[k].held is False]
            if broken:
                axis.scatter(broken, [run.cases[k].ops_per_s for k in broken], marker="x",
                             s=70, color=line.get_color())
        every = sorted({k for run in self.runs for k in run.cases}) or [1]
        if self.scale:
            axis.set_xlabel("server instances (x: SLA not held)")
            axis.set_ylabel("aggregate ops/s")
            axis.set_title("Aggregate ops/s vs instances")
        else:
            axis.set_xscale("log", base=2)
            axis.set_xlabel("pipeline depth")
            axis.set_ylabel("ops/s (sets + gets)")
            axis.set_title("ops/s vs pipeline depth")
        axis.xaxis.set_major_locator(FixedLocator(every))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)

    def render(self, directory: Path) -> Path:
        """compare.html (plot embedded), the plot as PNG, and compare.json in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        plot = SCALE_COMPARE_PLOT if self.scale else COMPARE_PLOT
        self.plot(directory / plot)
        warnings = self.energy_warnings()
        plot_seed_figures(directory / FIGURES_PLOT, [r.label for r in self.runs],
                          self.seed_figures(), self.baseline.label,
                          "hatched: an estimate (its band as the error bar)"
                          if any(self.energy_side(r).estimated for r in self.runs) else "")
        (directory / COMPARE_JSON).write_text(json.dumps(self.to_json(), indent=2))
        sentences = "".join(f"<li>{html.escape(self.sentence(r))}</li>" for r in self.runs[1:])
        notes = "".join(f"<li>{html.escape(n)}</li>"
                        for n in self.energy_notes() + self.preset_notes())
        cases = (html_table(self.case_columns(), self.case_rows()) if self.common_cases
                 else f"<p>No {self.case_title} value is common to every bundle.</p>")
        answer = ("Best aggregate with the SLA held" if self.scale
                  else "Peak (the pipeline depth with the most ops/s)")
        body = f"""<p>{self.kind} bundles. Baseline: <b>{html.escape(self.baseline.label)}</b>;
ratios are run / baseline. {datetime.now(UTC):%Y-%m-%d %H:%M UTC}</p>
<ul>{sentences}</ul>
<h2>{answer}</h2>
{html_table(self.headline_columns(), self.headline_rows())}
<h2>The seeds' three figures</h2>
<ul id="energy-warnings">{"".join(f"<li>{html.escape(w)}</li>" for w in warnings)}</ul>
{html_figure(directory, FIGURES_PLOT, "ops/s, p99 and ops/s per watt, run / baseline")}
<h2>At the {self.case_title} every bundle has</h2>
{cases}
{html_figure(directory, plot, "ops/s of every bundle")}
<h2>Energy</h2><ul>{notes}</ul>
<h2>Bundles</h2><ul>{html_sources([(r.label, r.directory) for r in self.runs])}</ul>"""
        path = directory / COMPARE_HTML
        path.write_text(html_page("socialbench compare: cache", body))
        return path


def compare_cache(directories: Sequence[Path]) -> CacheComparison:
    """Read cache bundles of one kind (the caller checked; the first is the baseline)."""
    runs = [CacheNumbers.read(directory) for directory in directories]
    return CacheComparison(runs[0].manifest.kind if runs else RUN_KIND, runs)
