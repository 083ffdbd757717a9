"""'socialbench cache run|scale|report': memtier_benchmark-style memcached and Redis load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from socialbench.cli.options import (
    CpuFamily,
    PowerCmd,
    PowerCoefficients,
    PowerMeter,
    energy_options,
    preset_values,
    run,
)
from socialbench.workloads.cache import CacheConfig, CacheProtocol
from socialbench.workloads.cache.config import parse_key_pattern, parse_protocol, parse_ratio
from socialbench.workloads.cache.plan import plan_runs, plan_scale
from socialbench.workloads.cache.scale import DEFAULT_FRACTIONS, ScaleConfig
from socialbench.workloads.cache.servers import ServerKind
from socialbench.workloads.probes.energy import MeterChoice
from socialbench.workloads.runs.cache_run import (
    CacheRunOptions,
    CacheScaleOptions,
    build_report,
    run_cache_runs,
    run_cache_scale,
)

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
PROTOCOL_HELP = ("memcache_text, memcache_meta, memcache_binary or redis (memtier's -P "
                 "names), or text, meta, binary")


def _cpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a list of CPU numbers") from None


def _message(exc: ValueError) -> str:
    """A config's refusal in one line (a pydantic error's messages, not its dump)."""
    if isinstance(exc, ValidationError):
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
    return str(exc)


def _protocol(text: str) -> CacheProtocol:
    try:
        return parse_protocol(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _patterns(ratio: str, key_pattern: str) -> dict[str, Any]:
    try:
        sets, gets = parse_ratio(ratio)
        set_pattern, get_pattern = parse_key_pattern(key_pattern)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return {"sets": sets, "gets": gets, "set_pattern": set_pattern, "get_pattern": get_pattern}


PresetName = Annotated[str | None, typer.Option(
    metavar="NAME", help="A published procedure's parameters (socialbench presets); an option "
    "it names given beside it overrides it, recorded as a deviation.")]
Plan = Annotated[bool, typer.Option(
    "--plan", help="Print the runs and the time they will take, then exit without load.")]
Runs = Annotated[int, typer.Option(min=1, help="Run the whole procedure this many times.")]


@cache_app.command("run")
def run_command(
    ctx: typer.Context,
    server: Annotated[str, typer.Option("--server", "-s", help="Server address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="Server port.")] = 11211,
    protocol: Annotated[CacheProtocol, typer.Option(
        "--protocol", "-P", parser=_protocol, metavar="PROTOCOL",
        help=f"Wire protocol: {PROTOCOL_HELP}.")] = CacheProtocol.MEMCACHE_TEXT,
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
    power_meter: PowerMeter = MeterChoice.AUTO,
    power_coefficients: PowerCoefficients = None,
    cpu_family: CpuFamily = None,
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
        protocol = _protocol(values.get("protocol", protocol))
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
        raise typer.BadParameter(_message(exc)) from None
    if plan:
        for line in plan_runs(configs, runs):
            typer.echo(line)
        return
    options = CacheRunOptions(
        configs=tuple(configs), runs=runs,
        label=(label or f"{protocol.value}-{port}") if bundle else None,
        results_dir=results_dir, json_out=json_out, preset=followed,
        energy=energy_options(power_cmd, power_meter, power_coefficients, cpu_family))
    run(lambda: run_cache_runs(options, typer.echo))


@cache_app.command("scale")
def scale_command(
    ctx: typer.Context,
    kind: Annotated[ServerKind, typer.Option("--kind", help="Server to start.")]
    = ServerKind.MEMCACHED,
    max_instances: Annotated[int | None, typer.Option(
        min=1, help="Stop at this many instances (default: the CPUs).")] = None,
    protocol: Annotated[CacheProtocol | None, typer.Option(
        "--protocol", "-P", parser=_protocol, metavar="PROTOCOL",
        help=f"{PROTOCOL_HELP}; default memcache_text, or redis for --kind redis.")] = None,
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
    power_meter: PowerMeter = MeterChoice.AUTO,
    power_coefficients: PowerCoefficients = None,
    cpu_family: CpuFamily = None,
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
        raise typer.BadParameter(_message(exc)) from None
    if plan:
        for line in plan_scale(config, runs):
            typer.echo(line)
        return
    options = CacheScaleOptions(
        config=config, kind=kind, label=label or f"scale-{kind.value}-p{pipeline}", runs=runs,
        results_dir=results_dir, preset=followed,
        energy=energy_options(power_cmd, power_meter, power_coefficients, cpu_family))
    run(lambda: run_cache_scale(options, typer.echo))


@cache_app.command("report")
def report(directory: Annotated[Path, typer.Argument(help="A cache results bundle.")]) -> None:
    """Rebuild a cache bundle's plots and report.html from its files."""
    typer.echo(build_report(directory))
