"""'socialbench load': the command line of the open-loop driver."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_stop
from socialbench.cli.options import (
    DEFAULT_DATA_DIR,
    CpuPlacement,
    DataDir,
    DriverCpus,
    load_default,
    model_default,
    percent,
    placement,
    placement_for,
    ratio,
    run,
    seconds_text,
)
from socialbench.workloads.driver.config import (
    Distribution,
    LoadConfig,
    driver_size,
    parse_duration,
)
from socialbench.workloads.driver.placement import PlacementMode
from socialbench.workloads.ramp.engine import RampConfig


def load(
    url: Annotated[str, typer.Argument(
        metavar="URL", help="Target, e.g. http://127.0.0.1:8080 (plain http).")],
    rate: Annotated[float, typer.Option("--rate", "-R", help="Requests per second, in total.")],
    duration: Annotated[str, typer.Option("--duration", "-d", help="Measured time.")] = "30s",
    warmup: Annotated[str, typer.Option(help="Load sent first, left out of the results.")] = (
        seconds_text(load_default("warmup_s"))),
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            help="url (GET the URL), compose-post, read-home-timeline, read-user-timeline, "
            "mixed (60/30/10), or path.py:Name.",
        ),
    ] = load_default("workload"),
    users: Annotated[int, typer.Option(help="Social-network users: ids in [0, users).")] = (
        load_default("users")),
    distribution: Annotated[
        Distribution, typer.Option("--distribution", "-D", help="Inter-arrival times.")
    ] = load_default("distribution"),
    connections: Annotated[
        int | None, typer.Option("--connections", "-c", help=(
            "Connections (the start, if growing; default: 64, or 32 a driver process when "
            "that is more)."))
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(help="Grow the pool on demand up to this many; beyond, drop and count."),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option("--processes", "-P", help="Driver processes (default: the cores available)."),
    ] = None,
    timeout: Annotated[str, typer.Option(help="Per request, from its send.")] = (
        seconds_text(load_default("timeout_s"))),
    seed: Annotated[int | None, typer.Option(help="Seed of every random draw.")] = None,
    absolute_form: Annotated[
        bool,
        typer.Option(
            "--absolute-form/--origin-form",
            help="Request line with http://host:port/path (as wrk2's Lua scripts) or /path.",
        ),
    ] = load_default("absolute_form"),
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the full result, histograms included.")
    ] = None,
    max_errors: Annotated[str, typer.Option(
        help="Exit 1 when errors pass this share of the requests.")]
    = percent(model_default(RampConfig, "max_error_ratio")),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live line.")] = False,
    cpu_placement: CpuPlacement = PlacementMode.SHARED,
    driver_cpus: DriverCpus = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Open-loop load at a fixed rate (wrk2-style): latency from each request's intended time."""
    from pydantic import ValidationError

    from socialbench.stack.local import LocalStack
    from socialbench.workloads.definitions.core import WorkloadError, load_workload
    from socialbench.workloads.runs.load_run import LoadOptions, run_fixed_rate

    console = Console(highlight=False, soft_wrap=True)
    error_limit = ratio(max_errors, "--max-errors")
    stack = LocalStack(data_dir)
    try:
        pinned = stack.pinned_cpus(url)
        placed = placement_for(placement(cpu_placement, driver_cpus, stack_cpus=pinned),
                               stack.serves(url))
        processes, connections = driver_size(len(placed.driver_cpus), processes, connections)
        config = LoadConfig(
            url=url,
            rate=rate,
            duration_s=parse_duration(duration),
            warmup_s=parse_duration(warmup),
            workload=workload,
            users=users,
            distribution=distribution,
            connections=connections,
            max_connections=max_connections,
            processes=processes,
            timeout_s=parse_duration(timeout),
            seed=seed if seed is not None else secrets.randbits(32),
            absolute_form=absolute_form,
            cpus=placed.driver_affinity,
        )
        load_workload(config.workload, users=config.users, path=config.target.path)
    except (ValidationError, WorkloadError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    options = LoadOptions(config=config, placement=placed, data_dir=data_dir,
                          max_error_ratio=error_limit, json_file=json_file, quiet=quiet)
    run(lambda: run_fixed_rate(options, console, signals_as_stop), console)
