"""'socialbench locust': Locust's web UI (or a headless run) over the social-network workloads.

Locust runs in child processes ('python -m locust' with workloads/definitions/locustfile.py):
gevent patches the process it runs in, which the rest of socialbench must not be (so this
module finds the locustfile without importing it). With
``--workers N`` it is a master and N local workers (Locust's own distributed mode, as the
helm chart runs it). Every child is stopped when the command ends, however it ends.
"""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_interrupt
from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_port, mongodb_flavour
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS
from socialbench.workloads.driver.config import parse_duration
from socialbench.workloads.results import files as bundle_files


def _locustfile() -> Path:
    """Where the locustfile is, found without importing it (and so gevent)."""
    spec = importlib.util.find_spec("socialbench.workloads.definitions.locustfile")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


LOCUSTFILE = _locustfile()
DEFAULT_HOST = "http://127.0.0.1:8080"
CSV_PREFIX = "locust"  # locust_stats.csv, locust_stats_history.csv, locust_failures.csv, ...
STOP_GRACE_S = 15.0  # Locust writes its last CSV rows and report on the way out
WORKERS_MAX_WAIT_S = 60

console = Console()


def default_host(data_dir: Path) -> str:
    """The front end of the local stack running in ``data_dir``, else the default port's."""
    state = LocalStack(data_dir).running_state()
    if state is not None:
        return state.url
    return DEFAULT_HOST


def whole_seconds(text: str, option: str) -> int:
    """``30s``, ``5m``, ... as the whole seconds Locust takes (at least 1)."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if seconds < 1:
        raise typer.BadParameter(f"{text!r} is shorter than Locust's 1 s", param_hint=option)
    return math.ceil(seconds)


def bundle_dir(results_dir: Path, label: str, now: datetime | None = None) -> Path:
    """``results/<UTC time>-locust-<label>/`` (not created), named as the ramp's bundles."""
    return bundle_files.bundle_dir(results_dir, f"locust-{label}", now)


def locust_argv(*, host: str, users: int, spawn_rate: float, graph_users: int,
                headless: bool, run_time: int | None, bundle: Path | None,
                web_host: str, web_port: int, ramp: dict[str, int] | None,
                extra: list[str]) -> list[str]:
    """The ``python -m locust`` command line of a single process or of the master."""
    argv = [sys.executable, "-m", "locust", "--locustfile", str(LOCUSTFILE), "--host", host,
            "--users", str(users), "--spawn-rate", f"{spawn_rate:g}",
            "--graph-users", str(graph_users)]
    if ramp is not None:
        argv += ["--ramp", "--ramp-start", str(ramp["start"]), "--ramp-step", str(ramp["step"]),
                 "--ramp-hold", str(ramp["hold"])]
    if headless:
        argv.append("--headless")
        if run_time and ramp is None:
            argv += ["--run-time", str(run_time)]
        if bundle is not None:
            argv += ["--csv", str(bundle / CSV_PREFIX), "--csv-full-history",
                     "--html", str(bundle / "report.html")]
    else:
        argv += ["--web-host", web_host, "--web-port", str(web_port)]
    return argv + extra


def worker_argv(master_port: int) -> list[str]:
    """A local worker of a master on ``master_port`` (it gets the options from the master)."""
    return [sys.executable, "-m", "locust", "--locustfile", str(LOCUSTFILE), "--worker",
            "--master-host", "127.0.0.1", "--master-port", str(master_port)]


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGINT (Locust's graceful stop: last CSV rows, HTML report) to those still running.

    SIGKILL after a grace, or at a second interrupt.
    """
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        for process in processes:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def run_locust(master: list[str], workers: int) -> int:
    """Run Locust (and ``workers`` local workers) until it ends or we are interrupted.

    Children get their own process group: a Ctrl+C or SIGTERM reaches this process only,
    which stops the master first (so it tells its workers) and then anything left.
    """
    port = free_port() if workers else 0
    if workers:
        master = [*master, "--master", "--master-bind-host", "127.0.0.1",
                  "--master-bind-port", str(port), "--expect-workers", str(workers),
                  "--expect-workers-max-wait", str(WORKERS_MAX_WAIT_S)]
    commands = [master] + [worker_argv(port)] * workers
    processes: list[subprocess.Popen[bytes]] = []
    with signals_as_interrupt():
        try:
            for command in commands:
                processes.append(subprocess.Popen(command, process_group=0))
            return processes[0].wait()
        except KeyboardInterrupt:
            return 130
        finally:
            _stop(processes)


def _write_manifest(bundle: Path, config: dict[str, Any], **outcome: Any) -> None:
    from socialbench.workloads.probes import machine

    manifest = {
        "tool": "locust",
        "locust_version": metadata.version("locust"),
        "note": "Closed loop: latencies suffer coordinated omission. Explore with Locust; "
                "quote socialbench load / socialbench ramp.",
        "config": config,
        **outcome,
        **machine.describe(mongodb_flavour()),
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


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
    host = host or default_host(data_dir)
    seconds = whole_seconds(run_time, "--run-time")
    ramp_config = ({"start": ramp_start, "step": ramp_step,
                    "hold": whole_seconds(ramp_hold, "--ramp-hold")} if ramp else None)
    bundle = bundle_dir(results_dir, label) if headless else None
    master = locust_argv(host=host, users=users, spawn_rate=spawn_rate, graph_users=graph_users,
                         headless=headless, run_time=seconds, bundle=bundle,
                         web_host=web_host, web_port=web_port, ramp=ramp_config,
                         extra=list(locust_args or []))
    config = {"host": host, "users": users, "spawn_rate": spawn_rate,
              "graph_users": graph_users, "workload": "mixed (60/30/10)", "workers": workers,
              "run_time_s": None if ramp else seconds, "ramp": ramp_config,
              "locust_argv": master[1:]}
    console.print("Locust is closed loop (its latencies suffer coordinated omission): "
                  "explore with it, quote [bold]socialbench load[/] / [bold]ramp[/].")
    if bundle is not None:
        bundle.mkdir(parents=True)
        started = datetime.now(UTC).isoformat()
        _write_manifest(bundle, config, started_at=started)
        console.print(f"Headless against {host}; results into {bundle}/")
    else:
        shown_host = "127.0.0.1" if web_host in ("", "*", "0.0.0.0") else web_host
        console.print(f"Web UI at [bold]http://{shown_host}:{web_port}[/] against {host} "
                      "(Ctrl+C stops it)")
    code = run_locust(master, workers)
    if bundle is not None:
        _write_manifest(bundle, config, started_at=started,
                        finished_at=datetime.now(UTC).isoformat(), exit_code=code)
        console.print(f"Results: {bundle}/ (exit code {code})")
    if code:
        raise typer.Exit(code)
