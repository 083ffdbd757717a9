"""'socialbench locust': Locust's web UI (or a headless run) over the social-network workloads.

Its options into :class:`socialbench.workloads.runs.locust_run.LocustOptions`, and Locust
run (:func:`~socialbench.workloads.runs.locust_run.run_locust_command`) from them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_interrupt
from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir, run
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS
from socialbench.workloads.driver.config import parse_duration
from socialbench.workloads.runs.locust_run import DEFAULT_HOST, LocustOptions, run_locust_command

console = Console()


def whole_seconds(text: str, option: str) -> int:
    """``30s``, ``5m``, ... as the whole seconds Locust takes (at least 1)."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if seconds < 1:
        raise typer.BadParameter(f"{text!r} is shorter than Locust's 1 s", param_hint=option)
    return math.ceil(seconds)


def locust(
    host: Annotated[str | None, typer.Option(
        help="Front end (default: the local stack's in --data-dir, else "
             f"{DEFAULT_HOST}).")] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    users: Annotated[int, typer.Option(
        "--users", "-u", min=1,
        help="Concurrent Locust users (closed loop); the top of the ramp with --ramp.")] = 50,
    spawn_rate: Annotated[float, typer.Option(
        "--spawn-rate", "-r", min=0.01, help="Users started per second.")] = 10.0,
    graph_users: Annotated[int, typer.Option(
        min=2, help="Users of the seeded graph: user ids are drawn in [0, N).")] = DEFAULT_USERS,
    headless: Annotated[bool, typer.Option(
        "--headless", help="No web UI: run for --run-time, CSV and HTML into a results bundle.")]
    = False,
    run_time: Annotated[str, typer.Option(
        "--run-time", "-t", help="With --headless (without --ramp): e.g. 30s, 5m.")] = "1m",
    label: Annotated[str, typer.Option(
        help="Bundle name: results/<UTC time>-locust-<label>/.")] = "mixed",
    results_dir: Annotated[Path, typer.Option(help="Where bundles go.")] = Path("results"),
    workers: Annotated[int, typer.Option(
        min=0, help="Local worker processes under a master (Locust's distributed mode).")] = 0,
    web_host: Annotated[str, typer.Option(help="Address of the web UI.")] = "127.0.0.1",
    web_port: Annotated[int, typer.Option(help="Port of the web UI.")] = 8089,
    ramp: Annotated[bool, typer.Option(
        "--ramp",
        help="Step ramp: --ramp-start users, +--ramp-step every --ramp-hold, up to --users.")]
    = False,
    ramp_start: Annotated[int, typer.Option(min=1, help="Users of the first step.")] = 10,
    ramp_step: Annotated[int, typer.Option(min=1, help="Users added at each step.")] = 10,
    ramp_hold: Annotated[str, typer.Option(help="How long each step holds: 30s, 5m.")] = "60s",
    locust_args: Annotated[list[str] | None, typer.Argument(
        metavar="LOCUST_ARGS", help="More Locust options, after --: e.g. -- --loglevel DEBUG.")]
    = None,
) -> None:
    """Locust over the mixed workload (60/30/10): explore with it, quote the driver."""
    seconds = whole_seconds(run_time, "--run-time")
    ramp_config = ({"start": ramp_start, "step": ramp_step,
                    "hold": whole_seconds(ramp_hold, "--ramp-hold")} if ramp else None)
    options = LocustOptions(
        host=host, data_dir=data_dir, users=users, spawn_rate=spawn_rate,
        graph_users=graph_users, headless=headless, run_time_s=seconds, label=label,
        results_dir=results_dir, workers=workers, web_host=web_host, web_port=web_port,
        ramp=ramp_config, extra=tuple(locust_args or []))
    run(lambda: run_locust_command(options, console, signals_as_interrupt), console)
