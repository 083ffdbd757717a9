"""``socialbench up / down / status / logs``: the local stack from the command line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from socialbench import registry
from socialbench.stack import launcher
from socialbench.stack.servers import ServerNotInstalled

console = Console()
err_console = Console(stderr=True)

DataDir = Annotated[
    Path, typer.Option("--data-dir", envvar="SOCIALBENCH_DATA_DIR",
                       help="Where the stack keeps its state, logs and store data."),
]


def parse_workers(spec: str) -> dict[str, int]:
    """``compose-post=2,home-timeline=2`` -> ``{"compose-post": 2, "home-timeline": 2}``."""
    workers: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, count = item.partition("=")
        if not sep or not count.isdigit() or int(count) < 1:
            raise typer.BadParameter(f"expected NAME=COUNT, got {item!r}", param_hint="--workers")
        try:
            registry.get(name)
        except KeyError as exc:
            raise typer.BadParameter(str(exc.args[0]), param_hint="--workers") from None
        workers[name] = int(count)
    return workers


def _running_state(data_dir: Path) -> dict[str, object] | None:
    state = launcher.read_state(data_dir)
    if state and launcher.pid_alive(state.get("supervisor_pid")):
        return state
    return None


def up(
    data_dir: DataDir = Path(".socialbench"),
    fresh: Annotated[bool, typer.Option(help="Start from empty stores (deletes stored data).")]
    = False,
    port: Annotated[int, typer.Option(help="Front-end port.")] = 8080,
    media_port: Annotated[int, typer.Option(help="Media front-end port.")] = 8081,
    workers: Annotated[str, typer.Option(help="Workers per service: NAME=N,NAME=N.")] = "",
    default_workers: Annotated[int, typer.Option(min=1, help="Workers of other services.")] = 1,
    nginx_workers: Annotated[str, typer.Option(help="nginx worker_processes.")] = "auto",
    redis_port: Annotated[int, typer.Option()] = 6390,
    memcached_port: Annotated[int, typer.Option()] = 11222,
    mongodb_port: Annotated[int, typer.Option()] = 27027,
    service_port_offset: Annotated[int, typer.Option(
        help="Added to every service's port (to run a second stack beside one).")] = 0,
    tracing: Annotated[bool, typer.Option(
        help="Run Jaeger and send it every service's spans (costs throughput).")] = False,
    trace_ratio: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="With --tracing: share of front-end requests traced.")] = 0.01,
    jaeger_port: Annotated[int, typer.Option(help="With --tracing: Jaeger's UI and API.")]
    = 16686,
    jaeger_otlp_port: Annotated[int, typer.Option(
        help="With --tracing: Jaeger's OTLP/HTTP port.")] = 4318,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the stack.")] = 180.0,
) -> None:
    """Start the whole stack as local processes and wait until every part is healthy."""
    data_dir = data_dir.resolve()
    if _running_state(data_dir):
        if not fresh:
            console.print(f"The stack is already running: [bold]http://127.0.0.1:{port}[/]")
            return
        console.print("Stopping the running stack first (--fresh).")
        down(data_dir)
    if fresh:
        for store_dir in ("mongodb", "redis"):
            shutil.rmtree(data_dir / store_dir, ignore_errors=True)
    config = launcher.StackConfig(
        data_dir=data_dir, gateway_port=port, media_port=media_port,
        workers=parse_workers(workers), default_workers=default_workers,
        nginx_workers=nginx_workers, redis_port=redis_port,
        memcached_port=memcached_port, mongodb_port=mongodb_port,
        service_port_offset=service_port_offset, tracing=tracing,
        trace_sample_ratio=trace_ratio, jaeger_ui_port=jaeger_port,
        jaeger_otlp_port=jaeger_otlp_port,
    )
    config.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        launcher.plan(config)  # fails early, here, on a missing binary
    except ServerNotInstalled as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    config_path = data_dir / launcher.CONFIG_FILE
    config_path.write_text(config.to_json())
    (data_dir / launcher.STATE_FILE).unlink(missing_ok=True)
    with open(config.log_dir / "supervisor.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "socialbench.stack.launcher", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    with console.status("starting the stack") as status:
        while time.monotonic() < deadline:
            state = launcher.read_state(data_dir) or {}
            if state.get("status") == "ready":
                break
            if state.get("status") in ("failed", "stopped"):
                err_console.print(f"[red]The stack failed to start: {state.get('message')}[/]")
                raise typer.Exit(1)
            status.update(str(state.get("message") or "starting the stack"))
            time.sleep(0.2)
        else:
            err_console.print(f"[red]The stack was not ready after {timeout:.0f} s; "
                              f"see {config.log_dir}[/]")
            down(data_dir)
            raise typer.Exit(1)
    console.print(f"Stack ready: front end at [bold]{config.url}[/] "
                  f"(media {config.host}:{config.media_port}); logs in {config.log_dir}")
    if config.tracing:
        console.print(f"Tracing {config.trace_sample_ratio:g} of requests: Jaeger at "
                      f"[bold]{config.jaeger_url}[/]")


def down(data_dir: DataDir = Path(".socialbench")) -> None:
    """Stop everything ``up`` started, in reverse order, and leave no process behind."""
    data_dir = data_dir.resolve()
    state = launcher.read_state(data_dir)
    if state is None:
        console.print("No stack state here; nothing to stop.")
        return
    supervisor = int(state.get("supervisor_pid") or 0)
    if launcher.pid_alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while launcher.pid_alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.1)
    leftovers = [c for c in state.get("components", []) if launcher.pid_alive(c.get("pid"))]
    for component in leftovers:
        launcher.kill_group(component["pid"], signal.SIGKILL)
    if launcher.pid_alive(supervisor):
        os.kill(supervisor, signal.SIGKILL)
    console.print("Stack stopped." + (f" Killed {len(leftovers)} leftover process groups."
                                      if leftovers else ""))


def status(data_dir: DataDir = Path(".socialbench")) -> None:
    """Each process of the stack: pid, alive, healthy, restarts."""
    data_dir = data_dir.resolve()
    state = launcher.read_state(data_dir)
    if state is None:
        console.print("The stack is not running (no state).")
        raise typer.Exit(1)
    running = launcher.pid_alive(state.get("supervisor_pid"))
    console.print(f"supervisor: {'running' if running else 'not running'}; "
                  f"status: {state.get('status')}; {state.get('message', '')}")
    table = Table("component", "kind", "pid", "port", "alive", "healthy", "restarts")
    healthy_all = True
    for data in state.get("components", []):
        component = launcher.Component(**data | {"env": {}})
        alive = launcher.pid_alive(component.pid)
        healthy = alive and component.is_healthy("127.0.0.1")
        healthy_all &= healthy
        table.add_row(component.name, component.kind, str(component.pid), str(component.port),
                      "yes" if alive else "[red]no[/]", "yes" if healthy else "[red]no[/]",
                      str(component.restarts))
    console.print(table)
    if not (running and healthy_all):
        raise typer.Exit(1)


def logs(
    component: Annotated[str, typer.Argument(help="A service, nginx, redis, memcached, mongodb.")],
    data_dir: DataDir = Path(".socialbench"),
    lines: Annotated[int, typer.Option("-n", help="Lines to show.")] = 50,
    follow: Annotated[bool, typer.Option("-f", help="Keep following the log.")] = False,
) -> None:
    """Show the log of one process of the stack."""
    log_path = data_dir.resolve() / "logs" / f"{component}.log"
    if not log_path.exists():
        known = sorted(p.stem for p in log_path.parent.glob("*.log"))
        err_console.print(f"[red]No log for {component!r}[/]; logs: {', '.join(known) or 'none'}")
        raise typer.Exit(1)
    argv = ["tail", "-n", str(lines)] + (["-F"] if follow else []) + [str(log_path)]
    os.execvp("tail", argv)
