"""``socialbench cache run`` and ``cache scale`` past their options, printed and bundled.

Entry points: :class:`CacheRunOptions` and :func:`run_cache_runs` (one server loaded at
each pipeline depth, ``runs`` times), :class:`CacheScaleOptions` and
:func:`run_cache_scale` (instances added under a p99 SLA, ``runs`` times); each returns
the exit status. The load itself is :mod:`socialbench.workloads.cache`; a generator that
cannot run raises its :class:`~socialbench.workloads.cache.runner.CacheLoadError`. They
print through ``echo`` (the CLI's ``typer.echo``: ``err=True`` for standard error).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from socialbench.workloads.cache import CacheConfig, run_cache
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.scale import Level, Probe, ScaleConfig, ScaleOutcome, scale
from socialbench.workloads.cache.servers import ServerKind, local_launcher
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes.energy import EnergyOptions, EnergyPlan, plan_energy


class Echo(Protocol):
    def __call__(self, message: str, *, err: bool = False) -> Any: ...


def print_line(message: str, *, err: bool = False) -> None:
    """A line to standard output (or error), flushed."""
    print(message, file=sys.stderr if err else sys.stdout, flush=True)


@dataclass(frozen=True)
class CacheRunOptions:
    """What ``socialbench cache run`` was asked, parsed: a config per pipeline depth."""

    configs: tuple[CacheConfig, ...]
    runs: int = 1
    label: str | None = None  # the bundle's; None: no bundle (--no-bundle)
    results_dir: Path = Path("results")
    energy: EnergyOptions = field(default_factory=EnergyOptions)
    json_out: Path | None = None
    preset: PresetRecord | None = None


@dataclass(frozen=True)
class CacheScaleOptions:
    """What ``socialbench cache scale`` was asked, parsed."""

    config: ScaleConfig
    kind: ServerKind
    label: str
    runs: int = 1
    results_dir: Path = Path("results")
    energy: EnergyOptions = field(default_factory=EnergyOptions)
    preset: PresetRecord | None = None


def bundle_writer(results_dir: Path, label: str, kind: str, config: dict[str, Any],
                  energy: EnergyPlan, preset: PresetRecord | None = None) -> Any:
    from socialbench.workloads.results.cache_runs import CacheBundleWriter

    return CacheBundleWriter(results_dir, label, kind, config, energy=energy, preset=preset)


def build_report(directory: Path) -> Path:
    from socialbench.workloads.reports.cache_report import build_cache_report

    return build_cache_report(directory)


def runs_summary(results: list[CacheResult], runs: int) -> list[str]:
    """Each depth's ops/s over the runs: every run's, the mean and the best."""
    lines = []
    for depth in dict.fromkeys(r.config.pipeline for r in results):
        rates = [r.ops_per_s for r in results if r.config.pipeline == depth]
        lines.append(f"pipeline {depth}: {runs} runs, "
                     + ", ".join(f"{rate:,.0f}" for rate in rates)
                     + f" ops/s; mean {statistics.mean(rates):,.0f}, best {max(rates):,.0f}")
    return lines


def run_cache_runs(options: CacheRunOptions, echo: Echo = print_line) -> int:
    """Each depth's run, ``runs`` times, a line each; the bundle and its report."""
    configs, runs = options.configs, options.runs
    energy = plan_energy(options.energy)
    echo(f"energy: {energy.describe()}")
    writer = None
    if options.label is not None:
        writer = bundle_writer(options.results_dir, options.label, "cache-run",
                               {"runs": [c.model_dump(mode="json") for c in configs],
                                "repeats": runs}, energy, options.preset)
    results: list[CacheResult] = []
    for number, config in ((n, c) for n in range(1, runs + 1) for c in configs):
        if runs > 1 and config is configs[0]:
            echo(f"run {number} of {runs}:")
        result = run_cache(config, energy.meter())
        results.append(result)
        echo(result.summary_line())
        echo(f"  set p99 {result.p99_ms_of('set'):.3f} ms, get p99 "
             f"{result.p99_ms_of('get'):.3f} ms; hits {result.hits:,}, misses "
             f"{result.misses:,}; generator {result.generator_cpu_s:.2f} CPU s"
             + (f"; prefilled {result.prefill_keys:,} keys" if result.prefill_keys else ""))
        if result.energy is not None:
            echo(f"  energy: {result.energy.describe()}")
        for warning in result.warnings:
            echo(f"  warning: {warning}", err=True)
        if writer is not None:
            writer.add(f"pipeline-{config.pipeline}" + (f"-run{number}" if runs > 1 else ""),
                       result)
    if runs > 1:
        for line in runs_summary(results, runs):
            echo(line)
    if options.json_out is not None:
        options.json_out.write_text(json.dumps([r.model_dump(mode="json") for r in results],
                                               indent=2))
    if writer is not None:
        echo(f"report: {build_report(writer.directory)}")
    return 0


def run_cache_scale(options: CacheScaleOptions, echo: Echo = print_line) -> int:
    """The scaling, ``runs`` times, a line a probe; the best run's outcome, the bundle and
    its report."""
    config, runs = options.config, options.runs
    energy = plan_energy(options.energy)
    echo(f"energy: {energy.describe()}")
    writer = bundle_writer(options.results_dir, options.label, "cache-scale",
                           config.model_dump(mode="json") | {"repeats": runs},
                           energy, options.preset)

    def on_probe(probe: Probe, _: list[CacheResult]) -> None:
        how = "closed loop" if probe.fraction is None else f"{probe.fraction:.0%} of max"
        verdict = "held" if probe.passed else "broken"
        energy = f"; energy: {probe.energy.describe()}" if probe.energy else ""
        echo(f"{probe.instances} instance(s), {how}: {probe.aggregate_ops_per_s:,.0f} "
             f"ops/s, worst p99 {probe.worst_p99_ms:.3f} ms: {verdict}{energy}")

    outcomes: list[ScaleOutcome] = []
    for number in range(1, runs + 1):
        if runs > 1:
            echo(f"run {number} of {runs}:")

        def on_level(level: Level, results: list[CacheResult], repeat: int = number) -> None:
            writer.add_level(level, results, repeat)

        outcomes.append(scale(config, local_launcher(options.kind, config.server_cpus),
                              on_probe, on_level, meter=energy.meter).model_copy(
            update={"repeat": number}))
    bests = [o.best_aggregate_ops_per_s for o in outcomes]
    outcome = max(outcomes, key=lambda o: o.best_aggregate_ops_per_s or 0.0).model_copy(
        update={"repeat_bests": bests})
    if runs > 1:
        held = [b for b in bests if b is not None]
        echo(f"{runs} runs: " + ", ".join("none" if b is None else f"{b:,.0f}"
                                         for b in bests) + " ops/s aggregate"
             + (f"; mean {statistics.mean(held):,.0f}" if held else "")
             + f"; the best is run {outcome.repeat}'s")
    writer.write_scale(outcome)
    if outcome.best_instances:
        echo(f"best: {outcome.best_aggregate_ops_per_s:,.0f} ops/s with "
             f"{outcome.best_instances} instance(s); stopped: {outcome.stop_detail}")
    else:
        echo(f"no instance count held the SLA; stopped: {outcome.stop_detail}")
    echo(f"report: {build_report(writer.directory)}")
    return 0
