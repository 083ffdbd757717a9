"""``socialbench locust`` past its options: Locust's web UI (or a headless run) over the
social-network workloads.

Entry points: :class:`LocustOptions` (what the command parsed) and :func:`run_locust_command`
(Locust run, its bundle's manifest written; Locust's exit status back). Locust runs in child
processes ('python -m locust' with workloads/definitions/locustfile.py):
gevent patches the process it runs in, which the rest of socialbench must not be (so this
module finds the locustfile without importing it). With
``--workers N`` it is a master and N local workers (Locust's own distributed mode, as the
helm chart runs it). Every child is stopped when the command ends, however it ends.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_port, mongodb_flavour
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

Interruptible = Callable[[], AbstractContextManager[object]]


@dataclass(frozen=True)
class LocustOptions:
    """What ``socialbench locust`` was asked, parsed."""

    host: str | None  # the front end; None: the local stack's in data_dir, else DEFAULT_HOST
    data_dir: Path
    users: int
    spawn_rate: float
    graph_users: int
    headless: bool
    run_time_s: int  # with headless and no ramp
    label: str
    results_dir: Path
    workers: int
    web_host: str
    web_port: int
    ramp: dict[str, int] | None  # start, step, hold (s)
    extra: tuple[str, ...] = ()  # more Locust options


def default_host(data_dir: Path) -> str:
    """The front end of the local stack running in ``data_dir``, else the default port's."""
    state = LocalStack(data_dir).running_state()
    if state is not None:
        return state.url
    return DEFAULT_HOST


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


def run_locust(master: list[str], workers: int, interruptible: Interruptible) -> int:
    """Run Locust (and ``workers`` local workers) until it ends or we are interrupted.

    Children get their own process group: a Ctrl+C or SIGTERM reaches this process only,
    which stops the master first (so it tells its workers) and then anything left
    (``interruptible``: the CLI's ``signals_as_interrupt``, SIGTERM as Ctrl+C).
    """
    port = free_port() if workers else 0
    if workers:
        master = [*master, "--master", "--master-bind-host", "127.0.0.1",
                  "--master-bind-port", str(port), "--expect-workers", str(workers),
                  "--expect-workers-max-wait", str(WORKERS_MAX_WAIT_S)]
    commands = [master] + [worker_argv(port)] * workers
    processes: list[subprocess.Popen[bytes]] = []
    with interruptible():
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


def run_locust_command(options: LocustOptions, console: Console,
                       interruptible: Interruptible) -> int:
    """Locust as asked (headless: into a bundle with its manifest); Locust's exit status."""
    host = options.host or default_host(options.data_dir)
    seconds, ramp_config, ramp = options.run_time_s, options.ramp, options.ramp is not None
    users, spawn_rate, graph_users = options.users, options.spawn_rate, options.graph_users
    workers, web_host, web_port = options.workers, options.web_host, options.web_port
    bundle = bundle_dir(options.results_dir, options.label) if options.headless else None
    master = locust_argv(host=host, users=users, spawn_rate=spawn_rate, graph_users=graph_users,
                         headless=options.headless, run_time=seconds, bundle=bundle,
                         web_host=web_host, web_port=web_port, ramp=ramp_config,
                         extra=list(options.extra))
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
    code = run_locust(master, workers, interruptible)
    if bundle is not None:
        _write_manifest(bundle, config, started_at=started,
                        finished_at=datetime.now(UTC).isoformat(), exit_code=code)
        console.print(f"Results: {bundle}/ (exit code {code})")
    return code
