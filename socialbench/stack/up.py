"""``socialbench up``: the local stack started on the CPUs asked, sized for them, or its plan.

:class:`UpOptions` is what the command was given (None: the sizing's default);
:func:`run_up` starts the stack (or, with ``plan``, prints what it would start on that many
CPUs and what each part is projected to hold, and starts nothing) and returns the exit
status. :func:`resolve_cpus` reads ``--cpus``: a count (the first N usable CPUs) or a CPU
list (``0-3``, ``0,2``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from socialbench import registry
from socialbench.errors import SocialbenchError
from socialbench.registry import StoreLayout
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack, StackError
from socialbench.stack.servers import ServerNotInstalled, mongodb_flavour
from socialbench.stack.sizing import Projection, Reference, StackSize, project, size_stack
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.driver.placement import cpu_list, parse_cpus
from socialbench.workloads.probes.ceilings import lift_advice


class CpuChoiceError(SocialbenchError, ValueError):
    """``--cpus`` names CPUs this process may not use, or more than it may."""


def resolve_cpus(text: str | None, *, plan: bool = False) -> tuple[int, list[int] | None]:
    """``--cpus``: the CPU count and the CPUs (None: every usable CPU).

    A bare number is a count: the first N CPUs this process may use (with ``plan``, any
    count: nothing starts). Anything else is a CPU list; a single CPU by number is the
    range ``3-3``.
    """
    usable = usable_cpus()
    if text is None or not text.strip():
        return len(usable), None
    text = text.strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise CpuChoiceError("--cpus: a stack needs a CPU or more")
        if plan:
            return count, None
        if count > len(usable):
            raise CpuChoiceError(f"--cpus {count}: this process may use {len(usable)} CPUs "
                                 f"({cpu_list(usable)}); --plan --cpus {count} shows what a "
                                 "machine of that size would run")
        return count, usable[:count]
    try:
        cpus = parse_cpus(text)
    except ValueError as exc:
        raise CpuChoiceError(f"--cpus: {exc}") from None
    unknown = sorted(set(cpus) - set(usable))
    if unknown and not plan:
        raise CpuChoiceError(f"--cpus: CPU {cpu_list(unknown)} is not among the CPUs this "
                             f"process may use ({cpu_list(usable)})")
    return len(cpus), cpus


@dataclass(frozen=True)
class UpOptions:
    """What ``up`` was given; None where the sizing for the CPU count decides."""

    data_dir: Path
    fresh: bool = False
    cpus: str | None = None
    plan: bool = False
    gateway_port: int = 8080
    media_port: int = 8081
    workers: dict[str, int] = field(default_factory=dict)
    default_workers: int | None = None
    nginx_workers: str | None = None
    redis_port: int = 6390
    memcached_port: int = 11222
    memcached_instances: int | None = None
    memcached_threads: int | None = None
    memcached_memory_mb: int = 1024
    mongodb_port: int = 27027
    stores: StoreLayout | None = None
    redis_mode: str = "standalone"
    redis_replicas: int = 1
    redis_cluster_masters: int | None = None
    redis_cluster: tuple[str, ...] = ()
    service_port_offset: int = 0
    unix_sockets: bool = True
    tracing: bool = False
    trace_ratio: float = 0.01
    jaeger_ui_port: int = 16686
    jaeger_otlp_port: int = 4318
    timeout_s: float = 180.0


def stack_config(options: UpOptions, size: StackSize, cpus: list[int] | None
                 ) -> launcher.StackConfig:
    """The configuration ``up`` starts: each option as given, else the sizing's."""
    sized_redis = not options.redis_cluster and options.redis_mode == "standalone"
    clusters = list(options.redis_cluster) if options.redis_cluster else (
        list(size.redis_clusters) if sized_redis and options.stores is None else [])
    masters = options.redis_cluster_masters or launcher.StackConfig.redis_cluster_masters
    sizes = ({name: size.redis_clusters[name] for name in clusters
              if name in size.redis_clusters} if options.redis_cluster_masters is None else {})
    return launcher.StackConfig(
        data_dir=options.data_dir.resolve(), gateway_port=options.gateway_port,
        media_port=options.media_port, workers=dict(options.workers),
        default_workers=options.default_workers,
        nginx_workers=options.nginx_workers or str(size.nginx_workers),
        redis_port=options.redis_port, memcached_port=options.memcached_port,
        memcached_instances=options.memcached_instances or size.memcached_instances,
        memcached_threads=options.memcached_threads or size.memcached_threads,
        memcached_memory_mb=options.memcached_memory_mb, mongodb_port=options.mongodb_port,
        store_layout=(options.stores or size.store_layout).value,
        redis_mode=options.redis_mode, redis_replicas=options.redis_replicas,
        redis_cluster_masters=masters, redis_cluster_instances=clusters,
        redis_cluster_sizes=sizes,
        service_port_offset=options.service_port_offset,
        unix_sockets=options.unix_sockets, tracing=options.tracing,
        trace_sample_ratio=options.trace_ratio, jaeger_ui_port=options.jaeger_ui_port,
        jaeger_otlp_port=options.jaeger_otlp_port, cpus=cpus, worker_cpus=size.cpus,
        sizing={choice.what: f"{choice.value} ({choice.why})" for choice in size.choices},
    )


def _check(config: launcher.StackConfig) -> None:
    unknown = sorted(set(config.redis_cluster_instances) - set(config.redis_modes()))
    if unknown:
        raise CpuChoiceError(f"--redis-cluster: no Redis instance {', '.join(unknown)} in the "
                             f"{config.store_layout} layout (its Redis instances: "
                             f"{', '.join(config.redis_modes())})")
    if config.redis_mode == "replicated" and config.redis_replicas < 1:
        raise CpuChoiceError("replicated Redis needs a replica or more (--redis-replicas)")


def run_up(options: UpOptions, console: Console, errors: Console | None = None) -> int:
    """Start the stack (or print its plan) as ``options`` say; the exit status (2: a
    server is not installed; 1: it did not start). Failures go to ``errors``."""
    errors = errors or console
    count, cpus = resolve_cpus(options.cpus, plan=options.plan)
    flavour = mongodb_flavour()
    reference = Reference.load()
    size = size_stack(count, reference, flavour, options.stores)
    config = stack_config(options, size, cpus)
    _check(config)
    if options.plan:
        print_plan(config, size, reference, flavour, console)
        return 0
    stack = LocalStack(options.data_dir)
    if stack.running_state() is not None and not options.fresh:
        console.print(f"The stack is already running: [bold]{stack.config.url}[/]")
        return 0
    describe_config(config, console)
    try:
        stack.start(config, fresh=options.fresh, timeout_s=options.timeout_s,
                    on_progress=lambda message: console.print(f"  {message}"))
    except ServerNotInstalled as exc:
        errors.print(f"[red]{exc}[/]")
        return 2
    except StackError as exc:
        errors.print(f"[red]{exc}[/]")
        return 1
    console.print(f"Stack ready: front end at [bold]{config.url}[/] "
                  f"(media {config.host}:{config.media_port}); logs in {config.log_dir}")
    if config.tracing:
        console.print(f"Tracing {config.trace_sample_ratio:g} of requests: Jaeger at "
                      f"[bold]{config.jaeger_url}[/]")
    return 0


def describe_workers(config: launcher.StackConfig) -> str:
    """The worker counts ``up`` chose, in one line: those above 1, and how they were chosen."""
    workers = config.service_workers()
    how = ("as given" if config.workers_chosen == "given"
           else f"for {config.cpu_count} CPU{'s' if config.cpu_count != 1 else ''}")
    if len(set(workers.values())) == 1:
        count = next(iter(workers.values()))
        return f"{count} worker{'s' if count != 1 else ''} per service ({how})"
    named = ", ".join(f"{name} {count}" for name, count in workers.items() if count > 1)
    rest = "; 1 for every other service" if 1 in workers.values() else ""
    return f"Workers: {named}{rest} ({how})"


def describe_config(config: launcher.StackConfig, console: Console) -> None:
    """What ``up`` is starting, in a few lines."""
    where = f"CPUs {cpu_list(config.cpus)}" if config.cpus else "every CPU"
    console.print(f"On {where} ({config.cpu_count}): {describe_workers(config)}")
    instances = config.store_instances()
    modes = sorted(set(config.redis_modes().values()))
    console.print(f"Stores: {config.store_layout}, {len(instances)} instances "
                  f"({', '.join(instance.name for instance in instances)}); Redis "
                  f"{'/'.join(modes)}, {config.redis_servers} server(s)"
                  + (" (Redis Cluster: " + ", ".join(
                      f"{name} of {config.cluster_masters(name)} masters"
                      for name in config.redis_cluster_instances) + ")"
                     if config.redis_cluster_instances else "")
                  + f"; memcached {config.memcached_instances} x {config.memcached_threads} "
                    f"threads; nginx {config.nginx_workers} workers")


def print_plan(config: launcher.StackConfig, size: StackSize, reference: Reference,
               flavour: str, console: Console) -> None:
    """What ``up`` would start on ``size.cpus`` CPUs, and each workload's projection."""
    console.print(f"[bold]Plan for {size.cpus} CPUs[/] (nothing started)")
    describe_config(dataclasses.replace(config, cpus=None), console)
    choices = Table("default", "chosen", "why", title="What follows the CPU count")
    for choice in size.choices:
        choices.add_row(choice.what, choice.value, choice.why)
    console.print(choices)
    for workload in reference.workloads:
        print_projection(project(size, reference, workload, flavour), reference, console)
    console.print(f"Projected (an estimate, not a measurement) from the reference measured "
                  f"{reference.measured} on {reference.machine} at {reference.commit}, for "
                  "cores as fast as its; docs/scaling.md has the measurement and the model.",
                  soft_wrap=True)


def print_projection(projection: Projection, reference: Reference, console: Console) -> None:
    fit = reference.fit(projection.workload)
    table = Table("part", "units x cores", "CPU ms/req", "ceiling req/s (projected)",
                  title=f"{projection.workload}: projected ceilings, lowest first")
    for row in projection.ceilings[:8]:
        table.add_row(row.component + (f" ({row.role})" if row.role != "process" else ""),
                      f"{row.units} x {row.capacity_cores:g}", f"{row.ms_per_request:.3f}",
                      f"{row.rps:,.0f}" + (f" ({row.estimate_note})" if row.estimate_note
                                           else ""))
    console.print(table)
    console.print(
        f"  the cores (USL: {fit.describe()}): {projection.machine_rps:,.0f} req/s; projected max "
        f"[bold]{projection.max_rps:,.0f} req/s[/] (an estimate), set by "
        f"{projection.capped_by}; the driver needs about {projection.driver_cores:.1f} "
        "cores of its own there", soft_wrap=True)
    first = projection.ceilings[0] if projection.ceilings else None
    if first is not None and first.rps < projection.machine_rps:
        kind = ("service" if first.component in registry.BY_NAME else
                "gateway" if first.component == "nginx" else "store")
        role = "writer" if first.role.startswith("SQLite writer") else first.role
        console.print(f"  to lift {first.component}: "
                      f"{lift_advice(first.component, kind, role, first.units)}",
                      soft_wrap=True)
