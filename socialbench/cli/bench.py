"""'socialbench bench …': the benchmarks of socialbench.bench (numbers, not tests)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from socialbench.bench.cache_generator import CacheBench
from socialbench.bench.drills import PARTS, DrillBench
from socialbench.bench.driver import DriverBench
from socialbench.bench.hop import SERVERS as HOP_SERVERS
from socialbench.bench.hop import HopBench
from socialbench.bench.hot_users import PLAIN, HotUsersBench
from socialbench.bench.mongodb import MongoBench
from socialbench.bench.stack_cpu import StackBench
from socialbench.bench.store_clients import StoreClientsBench
from socialbench.bench.store_modes import StoreModesBench
from socialbench.cli.options import DataDir, require_extra
from socialbench.workloads.driver.config import Distribution

bench_app = typer.Typer(
    name="bench", no_args_is_help=True,
    help="How fast the driver and the stack are on this machine (numbers, not tests).",
)
DRIVER = DriverBench()
STACK = StackBench()
MONGODB = MongoBench()
CACHE = CacheBench()
DRILLS = DrillBench()
HOP = HopBench()
HOT_USERS = HotUsersBench()
STORE_CLIENTS = StoreClientsBench()
STORE_MODES = StoreModesBench()
ResultsDir = Annotated[Path, typer.Option(help="Where the JSON of the table goes.")]


@bench_app.command()
def driver(
    duration: Annotated[float, typer.Option(
        min=0.1, metavar="SECONDS", help="Measured time of each run.")] = DRIVER.duration_s,
    warmup: Annotated[float, typer.Option(
        min=0, metavar="SECONDS", help="Warm-up of each run.")] = DRIVER.warmup_s,
    connections: Annotated[int, typer.Option(min=1, help="The driver's connections.")]
    = DRIVER.connections,
    processes: Annotated[list[int] | None, typer.Option(
        min=1, help=f"Driver processes; repeat for several (default: "
        f"{', '.join(map(str, DRIVER.processes))}).")] = None,
    rates: Annotated[list[float] | None, typer.Option(
        min=1, help="An exact rate to try (no search); repeat for several.")] = None,
    start: Annotated[float, typer.Option(min=1, help="First rate per process.")] = DRIVER.start,
    step: Annotated[float, typer.Option(min=1, help="Step per process.")] = DRIVER.step,
    resolution: Annotated[float, typer.Option(min=1, help="Bisection resolution, req/s.")]
    = DRIVER.resolution,
    repeat: Annotated[int, typer.Option(
        min=1, help="Runs per rate; the median run (by p99) is judged.")] = DRIVER.repeat,
    distribution: Annotated[Distribution, typer.Option(help="Inter-arrival times.")]
    = DRIVER.distribution,
    nginx_workers: Annotated[int, typer.Option(min=1, help="nginx worker_processes.")]
    = DRIVER.nginx_workers,
    pin: Annotated[bool, typer.Option(
        "--pin", help="One driver process (and the tools) on CPU 0, nginx on the last "
        "(on a quiet machine only: pinned, the driver cannot flee others).")] = DRIVER.pin,
    workload: Annotated[str, typer.Option(help=(
        "What the driver sends (nginx answers 200 to any path): url, or a social network "
        "workload such as mixed."))] = DRIVER.workload,
    results_dir: ResultsDir = DRIVER.results_dir,
) -> None:
    """The driver's highest rate against nginx on loopback, beside vegeta and wrk."""
    from socialbench.bench.driver import run

    run(DriverBench(
        duration_s=duration, warmup_s=warmup, connections=connections,
        processes=tuple(processes or DRIVER.processes), rates=tuple(rates or ()), start=start,
        step=step, resolution=resolution, repeat=repeat, distribution=distribution,
        nginx_workers=nginx_workers, pin=pin, results_dir=results_dir, workload=workload,
    ))


def parse_rates(specs: list[str]) -> dict[str, float]:
    """``["mixed=300"]`` -> ``{"mixed": 300.0}``; a clear error for anything else."""
    rates: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            rate = float(value) if sep and name else 0.0
            rate = rate if math.isfinite(rate) else 0.0
        except ValueError:
            rate = 0.0
        if not rate > 0:
            raise typer.BadParameter(f"expected WORKLOAD=REQ/S with a rate above 0, got {spec!r}",
                                     param_hint="--rate")
        rates[name] = rate
    return rates


@bench_app.command()
def stack(
    url: Annotated[str, typer.Option(help="The local stack's front end.")] = STACK.url,
    data_dir: DataDir = STACK.data_dir,
    connections: Annotated[int, typer.Option(min=1, help="The driver's connections.")]
    = STACK.connections,
    processes: Annotated[int, typer.Option(min=1, help="The driver's processes.")]
    = STACK.processes,
    duration: Annotated[int, typer.Option(
        min=1, metavar="SECONDS", help="Time per workload.")] = STACK.duration_s,
    users: Annotated[int, typer.Option(min=2, help="Users the requests draw from.")]
    = STACK.users,
    workloads: Annotated[list[str] | None, typer.Option(
        help=f"A workload; repeat for several (default: {', '.join(STACK.workloads)}).")]
    = None,
    results_dir: ResultsDir = STACK.results_dir,
    warm: Annotated[bool, typer.Option(
        help="Read every timeline once first (memcached is empty after a restart).")]
    = STACK.warm,
    rate: Annotated[list[str] | None, typer.Option(
        metavar="WORKLOAD=REQ/S", help="A workload's rate; repeat for several (default: "
        + ", ".join(f"{name}={rate:g}" for name, rate in STACK.rates.items()) + ").")] = None,
) -> None:
    """Each workload at a fixed rate against the local stack: the stack's CPU per request."""
    from socialbench.bench.stack_cpu import NoStack, run

    try:
        run(StackBench(url=url, data_dir=data_dir, connections=connections, processes=processes,
                       duration_s=duration, users=users,
                       workloads=tuple(workloads or STACK.workloads), results_dir=results_dir,
                       warm=warm, rates=STACK.rates | parse_rates(rate or [])))
    except NoStack as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@bench_app.command()
def mongodb(
    documents: Annotated[int, typer.Option(min=1, help="Post documents inserted first.")]
    = MONGODB.documents,
    reads: Annotated[int, typer.Option(min=1, help="Timed reads of each kind.")]
    = MONGODB.reads,
    in_size: Annotated[int, typer.Option(min=1, help="Ids per $in read.")] = MONGODB.in_size,
    inserts: Annotated[int, typer.Option(min=1, help="Timed single inserts.")]
    = MONGODB.inserts,
    max_seconds: Annotated[float, typer.Option(
        min=0.1, metavar="SECONDS", help="Time limit of each timed series.")]
    = MONGODB.max_seconds,
    ferretdb: Annotated[Path | None, typer.Option(
        help="The FerretDB binary (default: the one scripts/build-ferretdb.sh built).")]
    = None,
    results_dir: ResultsDir = MONGODB.results_dir,
) -> None:
    """FerretDB (SQLite) on posts: point reads by _id and an index, $in reads, inserts."""
    from socialbench.bench.mongodb import run

    run(MongoBench(documents=documents, reads=reads, in_size=in_size, inserts=inserts,
                   max_seconds=max_seconds, ferretdb=ferretdb, results_dir=results_dir))


@bench_app.command("cache")
def cache(
    duration: Annotated[float, typer.Option(
        min=0.5, metavar="SECONDS", help="Measured time of each run.")] = CACHE.duration_s,
    pipelines: Annotated[list[int] | None, typer.Option(
        min=1, help=f"A pipeline depth; repeat for several (default: "
        f"{', '.join(map(str, CACHE.pipelines))}).")] = None,
    clients: Annotated[int, typer.Option(min=1, help="Connections (both tools).")]
    = CACHE.clients,
    client_cpu: Annotated[int, typer.Option(min=0, help="CPU of the load generators.")]
    = CACHE.client_cpu,
    server_cpu: Annotated[int, typer.Option(min=0, help="CPU of the servers.")]
    = CACHE.server_cpu,
    results_dir: ResultsDir = CACHE.results_dir,
) -> None:
    """The cache generator against memcached -t 1 and Redis, beside redis-benchmark."""
    from socialbench.bench.cache_generator import run

    run(CacheBench(duration_s=duration, pipelines=tuple(pipelines or CACHE.pipelines),
                   clients=clients, client_cpu=client_cpu, server_cpu=server_cpu,
                   results_dir=results_dir))


@bench_app.command("drills")
def drills(
    data_dir: Annotated[Path, typer.Option(
        help="The drills' own stack (started with empty stores, stopped after).")]
    = DRILLS.data_dir,
    rate: Annotated[float, typer.Option(min=1, help="The driver's rate, req/s.")] = DRILLS.rate,
    users: Annotated[int, typer.Option(min=10, help="Users of the synthetic graph.")]
    = DRILLS.users,
    parts: Annotated[list[str] | None, typer.Option(
        "--part", help=f"A part to kill; repeat for several (default: {', '.join(PARTS)}).")]
    = None,
    settle: Annotated[float, typer.Option(
        min=3, metavar="SECONDS", help="Steady load before each kill (the baseline).")]
    = DRILLS.settle_s,
    observe: Annotated[float, typer.Option(
        min=5, metavar="SECONDS", help="Watched after each kill.")] = DRILLS.observe_s,
    down_up: Annotated[bool, typer.Option(
        help="Also down and up (no --fresh), reading every timeline before and after.")]
    = DRILLS.down_up,
    keep_running: Annotated[bool, typer.Option(
        "--keep-running", help="Leave the drills' stack running afterwards.")] = False,
    results_dir: ResultsDir = DRILLS.results_dir,
) -> None:
    """Kill -9 each part of a local stack under load: errors, recovery, posts lost."""
    from socialbench.bench.drills import run

    config = DrillBench(data_dir=data_dir, rate=rate, users=users,
                        parts=tuple(parts or PARTS), settle_s=settle, observe_s=observe,
                        down_up=down_up, keep_running=keep_running, results_dir=results_dir)
    try:
        config.check_parts()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--part") from None
    if not run(config).passed:
        raise typer.Exit(1)


@bench_app.command()
def hop(
    rate: Annotated[list[float] | None, typer.Option(
        min=1, help=f"Calls per second; repeat for several (default: "
        f"{', '.join(f'{r:g}' for r in HOP.rates)}).")] = None,
    duration: Annotated[float, typer.Option(
        min=1, metavar="SECONDS", help="Measured time at each rate.")] = HOP.duration_s,
    server: Annotated[list[str] | None, typer.Option(
        help=f"Servers to measure; repeat for several (default: {', '.join(HOP.servers)}).")]
    = None,
    connection_requests: Annotated[list[int] | None, typer.Option(
        min=0, help="Close each client connection after this many calls (0: never); repeat "
        "to compare bounds.")] = None,
    results_dir: ResultsDir = HOP.results_dir,
) -> None:
    """One service hop's CPU per call against its floors: a bare ASGI app under our server
    and uvicorn, an HTTP protocol with no ASGI, a process that only answers."""
    from socialbench.bench.hop import run

    unknown = sorted(set(server or ()) - set(HOP_SERVERS))
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: the servers are "
                                 f"{', '.join(HOP_SERVERS)}", param_hint="--server")
    if "uvicorn" in (server or HOP.servers):
        require_extra("bench", "bench hop against uvicorn (or --server unique-id --server bare)")
    run(HopBench(rates=tuple(rate or HOP.rates), duration_s=duration,
                 servers=tuple(server or HOP.servers),
                 connection_requests=tuple(connection_requests or HOP.connection_requests),
                 results_dir=results_dir))


@bench_app.command("store-clients")
def store_clients(
    commands: Annotated[int, typer.Option(
        min=100, help="Commands per client and caller count.")] = STORE_CLIENTS.commands,
    callers: Annotated[list[int] | None, typer.Option(
        min=1, help=f"Concurrent callers; repeat for several (default: "
        f"{', '.join(map(str, STORE_CLIENTS.callers))}).")] = None,
    store: Annotated[list[str] | None, typer.Option(
        help=f"A store whose clients are measured ({', '.join(STORE_CLIENTS.stores)}); "
        "repeat for several (default: all).")] = None,
    results_dir: ResultsDir = STORE_CLIENTS.results_dir,
) -> None:
    """The services' store clients' CPU per command against the libraries they replaced."""
    from socialbench.bench.store_clients import run

    unknown = sorted(set(store or ()) - set(STORE_CLIENTS.stores))
    if unknown:
        raise typer.BadParameter(f"no store named {', '.join(unknown)}", param_hint="--store")
    require_extra("bench", "bench store-clients")
    run(StoreClientsBench(commands=commands, callers=tuple(callers or STORE_CLIENTS.callers),
                          stores=tuple(store or STORE_CLIENTS.stores), results_dir=results_dir))


@bench_app.command("hot-users")
def hot_users(
    url: Annotated[str, typer.Option(help="The stack's front end.")] = HOT_USERS.url,
    followers: Annotated[int, typer.Option(
        min=PLAIN + 1, help="The celebrity's followers.")] = HOT_USERS.followers,
    rate: Annotated[float, typer.Option(
        min=0.1, help="Composes per second, by each author in turn.")] = HOT_USERS.rate,
    duration: Annotated[float, typer.Option(
        min=1, metavar="SECONDS", help="Each author's run.")] = HOT_USERS.duration_s,
    read_rate: Annotated[float, typer.Option(
        min=0.1, help="Background home-timeline reads per second.")] = HOT_USERS.read_rate,
    users: Annotated[int, typer.Option(
        min=2, help="The seeded graph's users the reads draw from.")] = HOT_USERS.users,
    results_dir: ResultsDir = HOT_USERS.results_dir,
) -> None:
    """Compose latency by an author with many followers and one with few, and the reads'."""
    from socialbench.bench.hot_users import run

    run(HotUsersBench(url=url, followers=followers, rate=rate, duration_s=duration,
                      read_rate=read_rate, users=users, results_dir=results_dir))


@bench_app.command("store-modes")
def store_modes(
    mode: Annotated[list[str] | None, typer.Option(
        help="A store mode to measure; repeat for several (default: all, shared first).")]
    = None,
    repeats: Annotated[int, typer.Option(min=1, help="Rounds of every mode, alternated.")]
    = STORE_MODES.repeats,
    start_rate: Annotated[float, typer.Option(min=1, help="The ramp's first rate.")]
    = STORE_MODES.start_rate,
    step: Annotated[float, typer.Option(min=1, help="The ramp's step.")] = STORE_MODES.step,
    results_dir: ResultsDir = STORE_MODES.results_dir,
) -> None:
    """Each store mode's max mixed rate and stack CPU per request, as a ratio to shared."""
    from socialbench.bench.store_modes import MODES, run

    unknown = sorted(set(mode or ()) - set(MODES))
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: the modes are {', '.join(MODES)}",
                                 param_hint="--mode")
    run(StoreModesBench(modes=tuple(mode or MODES), repeats=repeats, start_rate=start_rate,
                        step=step, results_dir=results_dir))


def parse_points(specs: list[str]) -> dict[str, list[tuple[float, float]]]:
    """``["mixed=1:975", "mixed=2:1800"]`` -> ``{"mixed": [(1.0, 975.0), (2.0, 1800.0)]}``."""
    points: dict[str, list[tuple[float, float]]] = {}
    for spec in specs:
        workload, _, point = spec.partition("=")
        cores, _, rate = point.partition(":")
        try:
            parsed = (float(cores), float(rate))
        except ValueError:
            parsed = (0.0, 0.0)
        if not workload or min(parsed) <= 0:
            raise typer.BadParameter(f"expected WORKLOAD=CORES:REQ/S, got {spec!r}",
                                     param_hint="--point")
        points.setdefault(workload, []).append(parsed)
    return points


@bench_app.command("reference")
def reference(
    shared: Annotated[Path, typer.Option(exists=True, dir_okay=False, help=(
        "bench stack's JSON of the workloads on the shared stores."))],
    per_service: Annotated[Path, typer.Option(exists=True, dir_okay=False, help=(
        "... and on the per-service stores (up --stores per-service)."))],
    point: Annotated[list[str], typer.Option(help=(
        "WORKLOAD=CORES:REQ/S: a max rate at the SLA with the stack on that many cores "
        "(less the driver's where it shared them); repeat for each."))],
    driver_rps: Annotated[float, typer.Option(min=1, help=(
        "One driver process's highest rate (bench driver)."))],
    note: Annotated[str, typer.Option(help="When, where and how it was measured.")] = "",
    out: Annotated[Path, typer.Option(help="Where the reference goes.")]
    = Path("socialbench/stack/scaling_reference.json"),
    doc: Annotated[Path, typer.Option(help="The document whose tables are rewritten.")]
    = Path("docs/scaling.md"),
) -> None:
    """Write the reference that up --plan projects from, and docs/scaling.md's tables."""
    from socialbench.bench.scaling_reference import ReferenceBench, run

    run(ReferenceBench(shared=shared, per_service=per_service, points=parse_points(point),
                       driver_rps=driver_rps, out=out, note=note, doc=doc))
