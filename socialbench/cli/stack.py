"""``socialbench up / down / status / logs``: the local stack from the command line."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from socialbench import registry
from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir, run
from socialbench.registry import StoreLayout
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack
from socialbench.stack.up import UpOptions, run_up

console = Console()
err_console = Console(stderr=True)


class RedisMode(StrEnum):
    """The choices of Settings.redis_mode."""

    STANDALONE = "standalone"
    REPLICATED = "replicated"
    CLUSTER = "cluster"


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


STACK_DEFAULTS = launcher.StackConfig()


def up(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    fresh: Annotated[bool, typer.Option(help="Start from empty stores (deletes stored data).")]
    = False,
    cpus: Annotated[str | None, typer.Option(help=(
        "The CPUs the whole stack runs on: a count (the first N usable CPUs) or a list "
        "(0-3, 0,2; one CPU by number: 3-3). Every default below follows their number "
        "(default: every usable CPU)."))] = None,
    plan: Annotated[bool, typer.Option(help=(
        "Start nothing: print what up would start on --cpus CPUs (any count), each part's "
        "projected ceiling and the projected max rate (an estimate, docs/scaling.md)."))]
    = False,
    port: Annotated[int, typer.Option(help="Front-end port.")] = STACK_DEFAULTS.gateway_port,
    media_port: Annotated[int, typer.Option(help="Media front-end port.")]
    = STACK_DEFAULTS.media_port,
    workers: Annotated[str, typer.Option(help="Workers per service: NAME=N,NAME=N.")] = "",
    default_workers: Annotated[int | None, typer.Option(min=1, help=(
        "Workers of every service not named in --workers (default: from the CPU count, "
        "by each service's share of the stack's CPU)."))] = STACK_DEFAULTS.default_workers,
    nginx_workers: Annotated[str | None, typer.Option(help=(
        "nginx worker_processes (default: sized for the CPU count; auto: one per CPU of "
        "the stack)."))] = None,
    redis_port: Annotated[int, typer.Option()] = STACK_DEFAULTS.redis_port,
    memcached_port: Annotated[int, typer.Option()] = STACK_DEFAULTS.memcached_port,
    memcached_instances: Annotated[int | None, typer.Option(min=1, help=(
        "memcached processes, on consecutive ports from --memcached-port; the services "
        "spread the cached keys over them by consistent hashing (default: sized for the "
        "CPU count)."))] = None,
    memcached_threads: Annotated[int | None, typer.Option(min=1, help=(
        "Worker threads of each memcached (-t; default: sized for the CPU count)."))] = None,
    memcached_memory: Annotated[int, typer.Option(min=16, metavar="MB", help=(
        "Memory of each memcached process; past it, it evicts. The posts read take about "
        "160 MiB per 100k: at a million posts 1 GiB misses a tenth of the reads "
        "(docs/data-at-scale.md)."))]
    = STACK_DEFAULTS.memcached_memory_mb,
    mongodb_port: Annotated[int, typer.Option()] = STACK_DEFAULTS.mongodb_port,
    stores: Annotated[StoreLayout | None, typer.Option(help=(
        "shared: one MongoDB, Redis and memcached for every service (cheaper on one box); "
        "per-service: an instance of each store per service that uses it, as the original "
        "(MongoDB, Redis and memcached instances on consecutive ports from their port "
        "options). Default: the first whose stores keep up with the CPUs (sizing, "
        "docs/scaling.md)."))] = None,
    redis_mode: Annotated[RedisMode, typer.Option(help=(
        "standalone: one redis-server per Redis instance; replicated: a primary (writes) "
        "and --redis-replicas replicas (reads); cluster: a Redis Cluster of "
        "--redis-cluster-masters masters with --redis-replicas replicas each. Servers on "
        "consecutive ports from --redis-port."))] = RedisMode(STACK_DEFAULTS.redis_mode),
    redis_cluster: Annotated[list[str] | None, typer.Option(help=(
        "A Redis instance run as a Redis Cluster whatever --redis-mode says (e.g. "
        "home-timeline-redis); repeat for several."))] = None,
    redis_replicas: Annotated[int, typer.Option(
        min=0, help="replicated: the primary's replicas; cluster: each master's.")]
    = STACK_DEFAULTS.redis_replicas,
    redis_cluster_masters: Annotated[int | None, typer.Option(min=1, help=(
        "cluster: its masters (default: 3, or what the sizing needs)."))] = None,
    service_port_offset: Annotated[int, typer.Option(
        help="Added to every service's port (to run a second stack beside one).")]
    = STACK_DEFAULTS.service_port_offset,
    unix_sockets: Annotated[bool, typer.Option(
        "--unix-sockets/--tcp-only", help=(
            "The services and nginx call the services over Unix domain sockets (cheaper "
            "than loopback TCP), or over TCP only."))] = STACK_DEFAULTS.unix_sockets,
    tracing: Annotated[bool, typer.Option(
        help="Run Jaeger and send it every service's spans (costs throughput).")] = False,
    trace_ratio: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="With --tracing: share of front-end requests traced.")]
    = STACK_DEFAULTS.trace_sample_ratio,
    jaeger_port: Annotated[int, typer.Option(help="With --tracing: Jaeger's UI and API.")]
    = STACK_DEFAULTS.jaeger_ui_port,
    jaeger_otlp_port: Annotated[int, typer.Option(
        help="With --tracing: Jaeger's OTLP/HTTP port.")] = STACK_DEFAULTS.jaeger_otlp_port,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the stack.")] = 180.0,
) -> None:
    """Start the whole stack as local processes and wait until every part is healthy."""
    options = UpOptions(
        data_dir=data_dir, fresh=fresh, cpus=cpus, plan=plan, gateway_port=port,
        media_port=media_port, workers=parse_workers(workers),
        default_workers=default_workers, nginx_workers=nginx_workers, redis_port=redis_port,
        memcached_port=memcached_port, memcached_instances=memcached_instances,
        memcached_threads=memcached_threads, memcached_memory_mb=memcached_memory,
        mongodb_port=mongodb_port, stores=stores, redis_mode=redis_mode.value,
        redis_replicas=redis_replicas, redis_cluster_masters=redis_cluster_masters,
        redis_cluster=tuple(redis_cluster or ()), service_port_offset=service_port_offset,
        unix_sockets=unix_sockets,
        tracing=tracing, trace_ratio=trace_ratio, jaeger_ui_port=jaeger_port,
        jaeger_otlp_port=jaeger_otlp_port, timeout_s=timeout,
    )
    run(lambda: run_up(options, console, err_console), err_console)


def down(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Stop everything 'up' started, in reverse order, and leave no process behind."""
    leftovers = LocalStack(data_dir).stop()
    if leftovers is None:
        console.print("No stack state here; nothing to stop.")
        return
    console.print("Stack stopped." + (f" Killed {leftovers} leftover process groups."
                                      if leftovers else ""))


def status(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Each process of the stack: pid, alive, healthy, restarts (exit 1 if any is not)."""
    state = LocalStack(data_dir).state()
    if state is None or (not state.supervisor_running and state.status == "stopped"):
        console.print("The stack is stopped.")
        return
    if not state.supervisor_running:
        console.print(f"The stack is not running: its supervisor is gone (last status "
                      f"{state.status}: {state.message}). Start it with socialbench up.")
        raise typer.Exit(1)
    console.print(f"status: {state.status}; {state.message}")
    table = Table("component", "kind", "pid", "port", "alive", "healthy", "restarts")
    healthy_all = True
    for component in state.components:
        alive = launcher.pid_alive(component.pid)
        healthy = alive and component.is_healthy("127.0.0.1")
        healthy_all &= healthy
        table.add_row(component.name, component.kind, str(component.pid), str(component.port),
                      "yes" if alive else "[red]no[/]", "yes" if healthy else "[red]no[/]",
                      str(component.restarts))
    console.print(table)
    if not healthy_all:
        raise typer.Exit(1)


def logs(
    component: Annotated[str, typer.Argument(help="A service, nginx, redis, memcached, mongodb.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
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
