"""'socialbench cache run|scale|report': memtier_benchmark-style memcached and Redis load."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from socialbench.cli.options import preset_values
from socialbench.workloads.cache import CacheConfig, CacheLoadError, CacheProtocol, run_cache
from socialbench.workloads.cache.config import parse_key_pattern, parse_ratio
from socialbench.workloads.cache.energy import Meter
from socialbench.workloads.cache.plan import plan_runs, plan_scale
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.scale import (
    DEFAULT_FRACTIONS,
    Level,
    Probe,
    ScaleConfig,
    ScaleOutcome,
    scale,
)
from socialbench.workloads.cache.servers import ServerKind, local_launcher
from socialbench.workloads.presets import PresetRecord

cache_app = typer.Typer(
    name="cache", no_args_is_help=True,
    help="memtier_benchmark-style load on memcached and Redis: one run, or instances scaled "
         "out under a p99 SLA.",
)
ResultsDir = Annotated[Path, typer.Option(help="Where the results bundle goes.")]
Label = Annotated[str | None, typer.Option(help="Bundle label (default: from the settings).")]
Ratio = Annotated[str, typer.Option(help="SET:GET ratio, memtier's --ratio.")]
DataSize = Annotated[int, typer.Option(min=1, help="Value size in bytes.")]
KeyPatternOption = Annotated[str, typer.Option(
    help="R (random), S (sequential), G (gaussian), or SET:GET, e.g. S:R.")]
KeyMinimum = Annotated[int, typer.Option(min=0, help="Lowest key number.")]
KeyMaximum = Annotated[int, typer.Option(min=0, help="Highest key number.")]
Clients = Annotated[int, typer.Option("--clients", "-c", min=1,
                                      help="Connections per thread.")]
Threads = Annotated[int, typer.Option("--threads", "-t", min=1, help="Generator processes.")]
Prefill = Annotated[bool, typer.Option(help="Set every key of the range once first.")]
Cpus = Annotated[str | None, typer.Option(
    help="Pin generator processes to these CPUs, e.g. 0 or 0,2 (round robin).")]
PowerCmd = Annotated[str | None, typer.Option(
    help="A command printing the machine's watts (when there is no RAPL); energy per "
         "operation is measured over each measured window.")]


def _cpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a list of CPU numbers") from None


def _patterns(ratio: str, key_pattern: str) -> dict[str, Any]:
    try:
        sets, gets = parse_ratio(ratio)
        set_pattern, get_pattern = parse_key_pattern(key_pattern)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return {"sets": sets, "gets": gets, "set_pattern": set_pattern, "get_pattern": get_pattern}


def _bundle_writer(results_dir: Path, label: str, kind: str, config: dict[str, Any],
                   power_cmd: str | None, preset: PresetRecord | None = None) -> Any:
    from socialbench.workloads.results.cache_runs import CacheBundleWriter

    return CacheBundleWriter(results_dir, label, kind, config, power_cmd=power_cmd,
                             preset=preset)


PresetName = Annotated[str | None, typer.Option(
    metavar="NAME", help="A published procedure's parameters (socialbench presets); an option "
    "it names given beside it overrides it, recorded as a deviation.")]
Plan = Annotated[bool, typer.Option(
    "--plan", help="Print the runs and the time they will take, then exit without load.")]
Runs = Annotated[int, typer.Option(min=1, help="Run the whole procedure this many times.")]


def _build_report(directory: Path) -> Path:
    from socialbench.workloads.reports.cache_report import build_cache_report

    return build_cache_report(directory)


def _meter(power_cmd: str | None) -> Meter:
    """RAPL where the machine has it, else ``--power-cmd``; else it says unavailable."""
    from socialbench.workloads.probes.energy import EnergyMeter

    return EnergyMeter(power_cmd=power_cmd)


def runs_summary(results: list[CacheResult], runs: int) -> list[str]:
    """Each depth's ops/s over the runs: every run's, the mean and the best."""
    lines = []
    for depth in dict.fromkeys(r.config.pipeline for r in results):
        rates = [r.ops_per_s for r in results if r.config.pipeline == depth]
        lines.append(f"pipeline {depth}: {runs} runs, "
                     + ", ".join(f"{rate:,.0f}" for rate in rates)
                     + f" ops/s; mean {statistics.mean(rates):,.0f}, best {max(rates):,.0f}")
    return lines


@cache_app.command("run")
def run(
    ctx: typer.Context,
    server: Annotated[str, typer.Option("--server", "-s", help="Server address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="Server port.")] = 11211,
    protocol: Annotated[CacheProtocol, typer.Option("--protocol", "-P", help="Wire protocol.")]
    = CacheProtocol.MEMCACHE_TEXT,
    ratio: Ratio = "1:10",
    data_size: DataSize = 128,
    key_pattern: KeyPatternOption = "R",
    key_minimum: KeyMinimum = 0,
    key_maximum: KeyMaximum = 99_999,
    pipeline: Annotated[list[int] | None, typer.Option(
        min=1, help="Requests in flight per connection; repeat for several runs (default 1).")]
    = None,
    clients: Clients = 10,
    threads: Threads = 1,
    test_time: Annotated[float | None, typer.Option(
        min=0.1, metavar="SECONDS", help="Measured time of each run (else --requests).")] = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", "-n", min=1, help="Requests per client (default 10000 untimed).")] = None,
    rate: Annotated[float | None, typer.Option(
        "--rate", "-R", min=1, help="Open loop: total ops/s on a fixed schedule "
        "(latency from the intended send time); needs --test-time.")] = None,
    warmup: Annotated[float, typer.Option(min=0, metavar="SECONDS",
                                          help="Sent, not measured (timed runs).")] = 0.0,
    prefill: Prefill = True,
    seed: Annotated[int | None, typer.Option(help="Seed of keys and schedule.")] = None,
    cpus: Cpus = None,
    power_cmd: PowerCmd = None,
    results_dir: ResultsDir = Path("results"),
    label: Label = None,
    bundle: Annotated[bool, typer.Option(help="Write a results bundle and report.")] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results "
                                                  "(a list, one per depth) here.")] = None,
    runs: Runs = 1,
    preset: PresetName = None,
    plan: Plan = False,
) -> None:
    """Load one memcached or Redis server and print ops/s, hits and latency per operation."""
    followed = None
    if preset is not None:
        values, followed = preset_values(ctx, preset, "cache run")
        threads, clients = values.get("threads", threads), values.get("clients", clients)
        pipeline, data_size = values.get("pipeline", pipeline), values.get("data_size",
                                                                           data_size)
        key_pattern, runs = values.get("key_pattern", key_pattern), values.get("runs", runs)
        protocol = CacheProtocol(values.get("protocol", protocol))
        typer.echo(followed.headline())
    if rate is not None and test_time is None:
        raise typer.BadParameter("--rate needs --test-time", param_hint="--rate")
    depths = pipeline or [1]
    try:
        configs = [CacheConfig(
            server=server, port=port, protocol=protocol, data_size=data_size,
            key_minimum=key_minimum, key_maximum=key_maximum, pipeline=depth,
            clients=clients, threads=threads, test_time_s=test_time, requests=requests,
            rate=rate, warmup_s=warmup, prefill=prefill and number == 0, seed=seed,
            cpus=_cpus(cpus), **_patterns(ratio, key_pattern),
        ) for number, depth in enumerate(depths)]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if plan:
        for line in plan_runs(configs, runs):
            typer.echo(line)
        return
    writer = None
    if bundle:
        name = label or f"{protocol.value}-{port}"
        writer = _bundle_writer(results_dir, name, "cache-run",
                                {"runs": [c.model_dump(mode="json") for c in configs],
                                 "repeats": runs}, power_cmd, followed)
    results: list[CacheResult] = []
    for number, config in ((n, c) for n in range(1, runs + 1) for c in configs):
        if runs > 1 and config is configs[0]:
            typer.echo(f"run {number} of {runs}:")
        try:
            result = run_cache(config, _meter(power_cmd))
        except CacheLoadError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        results.append(result)
        typer.echo(result.summary_line())
        typer.echo(f"  set p99 {result.p99_ms_of('set'):.3f} ms, get p99 "
                   f"{result.p99_ms_of('get'):.3f} ms; hits {result.hits:,}, misses "
                   f"{result.misses:,}; generator {result.generator_cpu_s:.2f} CPU s"
                   + (f"; prefilled {result.prefill_keys:,} keys" if result.prefill_keys else ""))
        if result.energy is not None:
            typer.echo(f"  energy: {result.energy.describe()}")
        for warning in result.warnings:
            typer.echo(f"  warning: {warning}", err=True)
        if writer is not None:
            writer.add(f"pipeline-{config.pipeline}" + (f"-run{number}" if runs > 1 else ""),
                       result)
    if runs > 1:
        for line in runs_summary(results, runs):
            typer.echo(line)
    if json_out is not None:
        json_out.write_text(json.dumps([r.model_dump(mode="json") for r in results], indent=2))
    if writer is not None:
        typer.echo(f"report: {_build_report(writer.directory)}")


@cache_app.command("scale")
def scale_command(
    ctx: typer.Context,
    kind: Annotated[ServerKind, typer.Option("--kind", help="Server to start.")]
    = ServerKind.MEMCACHED,
    max_instances: Annotated[int | None, typer.Option(
        min=1, help="Stop at this many instances (default: the CPUs).")] = None,
    protocol: Annotated[CacheProtocol | None, typer.Option(
        "--protocol", "-P", help="Default: memcache_text, or redis for --kind redis.")] = None,
    ratio: Ratio = "1:10",
    data_size: DataSize = 128,
    key_pattern: KeyPatternOption = "R",
    key_minimum: KeyMinimum = 0,
    key_maximum: KeyMaximum = 99_999,
    pipeline: Annotated[int, typer.Option(min=1, help="Requests in flight per connection.")]
    = 1,
    clients: Clients = 4,
    threads: Annotated[int, typer.Option("--threads", "-t", min=1,
                                         help="Generator processes per instance.")] = 1,
    step_time: Annotated[float, typer.Option(
        min=0.1, metavar="SECONDS", help="Measured time of each probe.")] = 5.0,
    sla_p99_ms: Annotated[float, typer.Option(min=0.001, help="The SLA: p99 in ms.")] = 1.0,
    fractions: Annotated[str, typer.Option(
        help="Open-loop rates to try, as fractions of the closed-loop max.")]
    = ",".join(f"{f:g}" for f in DEFAULT_FRACTIONS),
    min_gain: Annotated[float, typer.Option(
        min=0, help="Stop unless an added instance grows the aggregate by this share.")] = 0.02,
    server_cpus: Annotated[str | None, typer.Option(
        help="Pin instance i to CPU server_cpus[i % n], e.g. 1 or 1,2,3.")] = None,
    cpus: Cpus = None,
    seed: Annotated[int, typer.Option(help="Seed of keys and schedule.")] = 1,
    power_cmd: PowerCmd = None,
    results_dir: ResultsDir = Path("results"),
    label: Label = None,
    runs: Runs = 1,
    preset: PresetName = None,
    plan: Plan = False,
) -> None:
    """Add server instances one at a time, each at the highest rate holding the p99 SLA."""
    followed = None
    if preset is not None:
        values, followed = preset_values(ctx, preset, "cache scale")
        kind, ratio = ServerKind(values.get("kind", kind)), values.get("ratio", ratio)
        data_size, pipeline = values.get("data_size", data_size), values.get("pipeline",
                                                                             pipeline)
        step_time, runs = values.get("step_time", step_time), values.get("runs", runs)
        sla_p99_ms = values.get("sla_p99_ms", sla_p99_ms)
        typer.echo(followed.headline())
    chosen = protocol or (CacheProtocol.REDIS if kind is ServerKind.REDIS
                          else CacheProtocol.MEMCACHE_TEXT)
    try:
        steps = [float(part) for part in fractions.split(",") if part.strip()]
        run_config = CacheConfig(
            protocol=chosen, data_size=data_size, key_minimum=key_minimum,
            key_maximum=key_maximum, pipeline=pipeline, clients=clients, threads=threads,
            test_time_s=step_time, seed=seed, cpus=_cpus(cpus), **_patterns(ratio, key_pattern))
        config = ScaleConfig(
            server=kind.value, max_instances=max_instances or os.cpu_count() or 1,
            run=run_config, step_s=step_time, sla_p99_ms=sla_p99_ms, fractions=steps,
            min_gain=min_gain, server_cpus=_cpus(server_cpus))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if plan:
        for line in plan_scale(config, runs):
            typer.echo(line)
        return
    writer = _bundle_writer(results_dir, label or f"scale-{kind.value}-p{pipeline}",
                            "cache-scale", config.model_dump(mode="json") | {"repeats": runs},
                            power_cmd, followed)

    def on_probe(probe: Probe, _: list[CacheResult]) -> None:
        how = "closed loop" if probe.fraction is None else f"{probe.fraction:.0%} of max"
        verdict = "held" if probe.passed else "broken"
        energy = f"; energy: {probe.energy.describe()}" if probe.energy else ""
        typer.echo(f"{probe.instances} instance(s), {how}: {probe.aggregate_ops_per_s:,.0f} "
                   f"ops/s, worst p99 {probe.worst_p99_ms:.3f} ms: {verdict}{energy}")

    outcomes: list[ScaleOutcome] = []
    for number in range(1, runs + 1):
        if runs > 1:
            typer.echo(f"run {number} of {runs}:")

        def on_level(level: Level, results: list[CacheResult], repeat: int = number) -> None:
            writer.add_level(level, results, repeat)

        try:
            outcomes.append(scale(config, local_launcher(kind, config.server_cpus), on_probe,
                                  on_level, meter=lambda: _meter(power_cmd)).model_copy(
                update={"repeat": number}))
        except CacheLoadError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    bests = [o.best_aggregate_ops_per_s for o in outcomes]
    outcome = max(outcomes, key=lambda o: o.best_aggregate_ops_per_s or 0.0).model_copy(
        update={"repeat_bests": bests})
    if runs > 1:
        held = [b for b in bests if b is not None]
        typer.echo(f"{runs} runs: " + ", ".join("none" if b is None else f"{b:,.0f}"
                                               for b in bests) + " ops/s aggregate"
                   + (f"; mean {statistics.mean(held):,.0f}" if held else "")
                   + f"; the best is run {outcome.repeat}'s")
    writer.write_scale(outcome)
    if outcome.best_instances:
        typer.echo(f"best: {outcome.best_aggregate_ops_per_s:,.0f} ops/s with "
                   f"{outcome.best_instances} instance(s); stopped: {outcome.stop_detail}")
    else:
        typer.echo(f"no instance count held the SLA; stopped: {outcome.stop_detail}")
    typer.echo(f"report: {_build_report(writer.directory)}")


@cache_app.command("report")
def report(directory: Annotated[Path, typer.Argument(help="A cache results bundle.")]) -> None:
    """Rebuild a cache bundle's plots and report.html from its files."""
    typer.echo(_build_report(directory))
