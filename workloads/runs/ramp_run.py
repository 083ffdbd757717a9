"""``socialbench ramp`` past its options: the local stack's part around a ramp job.

Entry points: :class:`RampOptions` (what the command parsed) and :func:`run_ramp` (the
ramp, or ``--grow``'s levels, from it: the exit status back); :data:`QUICK` and
:data:`FULL` (the steps' timings), :func:`ramp_memory` (the memory a ramp will need) and
:func:`release_pods` (a helm release's pods, measured instead of the local stack).
``run_ramp`` raises a :class:`socialbench.errors.SocialbenchError` when the run cannot
be set up (the stack, the seeding, a server missing) or cannot go on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.stack.servers import mongodb_flavour
from socialbench.stack.traced import spans_to_receiver
from socialbench.workloads.driver.placement import Placement, PlacementMode
from socialbench.workloads.presets import PresetRecord
from socialbench.workloads.probes.energy import EnergyOptions
from socialbench.workloads.probes.memory import (
    MemoryRecord,
    cache_warning,
    composed_at_most,
    memory_warning,
)
from socialbench.workloads.probes.otlp import SpanReceiver
from socialbench.workloads.probes.records import PodRecord
from socialbench.workloads.probes.resources import SamplerFactory
from socialbench.workloads.ramp.engine import RampConfig
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.runs.growth import run_grow, seed_graph_bulk
from socialbench.workloads.runs.local import check_hook, found_dataset, fresh_reset, stack_rss
from socialbench.workloads.runs.ramp_job import RampJob, execute
from socialbench.workloads.seeding.seed import SeedPath

QUICK = {"step_duration": "10s", "warmup": "3s", "pause": "1s", "settle_max": "30s"}
FULL = {"step_duration": "5m", "warmup": "30s", "pause": "2s", "settle_max": "2m"}


@dataclass(frozen=True)
class RampOptions:
    """What ``socialbench ramp`` was asked, parsed and checked: the ramp's config (its
    load's URL the target), and where and how it runs."""

    config: RampConfig
    label: str
    results_dir: Path
    data_dir: Path  # the local stack's
    placement: Placement
    fresh: bool = False  # before each repeat (each growth: once) the stack emptied, seeded
    graph: str = "synthetic"
    posts_per_user: int = 3
    graph_seed: int = 1
    grow_levels: tuple[int, ...] | None = None  # posts stored at each level (--grow)
    grow_posts_per_user: int = 0  # with --grow --fresh: the bulk seeding's posts per user
    trace_ratio: float | None = None
    containers: str | None = None  # a compose project measured instead of the local stack
    container_kinds: dict[str, str] | None = None  # its services' (deploy.compose's)
    pods: str | None = None  # a helm release measured instead of the local stack
    namespace: str = "default"
    energy: EnergyOptions = field(default_factory=EnergyOptions)
    quiet: bool = False
    preset: PresetRecord | None = None


Interruptible = Callable[[], AbstractContextManager[object]]


def ramp_memory(stack: LocalStack, url: str, config: RampConfig, dataset: Dataset,
                graph_seed: int, stored_posts: int | None = None) -> MemoryRecord:
    """The stack's memory projected for the data the ramp starts with (``stored_posts``
    when given, else the seeded posts) and the posts it may compose, with a warning when
    the machine has not that much."""
    users, follows, posts = dataset.users, 0, 0
    if dataset.seeded is not None:
        data = dataset.seeded.dataset
        users, follows, posts = data.users, data.follows, data.posts
    elif dataset.fresh and dataset.graph is not None:
        from socialbench.workloads.seeding.seed import SeedPlan, load_graph

        data = SeedPlan.make(load_graph(dataset.graph, graph_seed), dataset.graph,
                             dataset.posts_per_user or 0, graph_seed).dataset()
        users, follows, posts = data.users, data.follows, data.posts
    if stored_posts is not None:
        posts = stored_posts
    rates = [config.start_rate + step * config.step_rate for step in range(config.max_steps)]
    if config.max_rate is not None:
        rates = [min(rate, config.max_rate) for rate in rates]
    composed = composed_at_most(config.load.workload, rates,
                                config.step_duration_s + config.warmup_s)
    posts += composed * (1 if dataset.fresh else config.repeat)
    local = stack.serves(url)
    limit = stack.config.memcached_bytes if local else None
    instances = stack.config.memcached_instances
    rss = stack_rss(stack) if local else 0
    warning = memory_warning(users, follows, posts, memcached_limit=limit, stack_rss=rss,
                             what=f"the stack with {users:,} users, {follows:,} follows and "
                                  f"{posts:,} posts (the ramp's composes included)")
    return MemoryRecord.of(users, follows, posts, memcached_limit=limit, stack_rss=rss,
                           warning=warning, cache_warning=cache_warning(
                               users, posts, memcached_limit=limit, instances=instances))


def release_pods(release: str, namespace: str, console: Console
                 ) -> tuple[SamplerFactory, str, list[PodRecord] | None]:
    """The sampler of a helm release's pods, how it measures, and what the pods had."""
    from socialbench.workloads.probes.pods import PodError, pod_records, pod_sampler_factory

    sampler, source = pod_sampler_factory(namespace, release)
    try:
        return sampler, source, pod_records(namespace, release)
    except PodError as exc:
        console.print(f"[yellow]warning[/]: the manifest will not record the pods: {exc}")
        return sampler, source, None


def run_ramp(options: RampOptions, console: Console,
             interruptible: Interruptible = contextlib.nullcontext) -> int:
    """The ramp (or ``--grow``'s levels) as asked, printed as it goes; the command's exit
    status: 0, 1 (a repeat found no rate that held the SLA, or the stores' check failed)
    or 130 (interrupted). ``interruptible`` guards the parts a signal may cut short
    (the CLI's ``signals_as_interrupt``)."""
    config, levels = options.config, options.grow_levels
    url, stack = config.load.url, LocalStack(options.data_dir)
    placed = options.placement
    stack_cpus = placed.stack_cpus if placed.mode is PlacementMode.SPLIT else None
    if levels is not None and options.fresh:
        with interruptible():
            console.print(f"Emptying the local stack's stores and seeding {options.graph} "
                          "(bulk path) for the growth (--fresh)")
            stack.restart_fresh(cpus=stack_cpus)
            seed_graph_bulk(stack, options.graph, options.grow_posts_per_user,
                            options.graph_seed, console)
    dataset = (
        Dataset(fresh=True, graph=options.graph, users=config.load.users,
                posts_per_user=options.posts_per_user, seed=options.graph_seed,
                path=SeedPath.API.value)
        if options.fresh and levels is None else found_dataset(stack, url, config.load.users)
    )
    memory = ramp_memory(stack, url, config, dataset, options.graph_seed)
    for warning in (memory.warning, memory.cache_warning):
        if warning and levels is None:
            console.print(f"[bold yellow]warning[/]: {warning}", soft_wrap=True)
    with contextlib.ExitStack() as traced:  # with --trace-ratio: the stack traced, until the end
        spans = None if options.trace_ratio is None else traced.enter_context(
            spans_to_receiver(stack, options.trace_ratio, console.print))
        job = _job(options, stack, dataset, memory, spans, console)
        if levels is not None:
            seeded = dataset.seeded.dataset if dataset.seeded is not None else None
            try:
                with stack.placed(stack_cpus), interruptible():
                    grown = run_grow(job, stack, list(levels), users=config.load.users,
                                     seed_value=seeded.seed if seeded else options.graph_seed,
                                     memory_for=lambda posts: ramp_memory(
                                         stack, url, config, dataset, options.graph_seed,
                                         posts),
                                     console=console)
            except KeyboardInterrupt:
                console.print("[bold yellow]Interrupted[/]: the levels measured are in the "
                              "bundle; posts being added are undone by the next growth.")
                return 130
            return 130 if any(level.interrupted for level in grown) else 0
        with stack.placed(stack_cpus), interruptible():
            result = execute(job, console)
    print_headline(result, console)
    if result.outcome.interrupted:
        return 130
    failed = [run for run in result.outcome.runs if run.answer is None]
    if failed:
        # A script gets a non-zero exit, and the reason on the last line.
        console.print(f"[bold red]FAILED[/]: repeat {failed[0].repeat} found no rate that "
                      f"held the SLA: {failed[0].stop_detail}")
    check = result.summary.check
    if check is not None and not check.passed:
        console.print(f"[bold red]FAILED[/]: the check of the stores: {check.reason}",
                      soft_wrap=True)
    return 1 if failed or (check is not None and not check.passed) else 0


def _job(options: RampOptions, stack: LocalStack, dataset: Dataset, memory: MemoryRecord,
         spans: SpanReceiver | None, console: Console) -> RampJob:
    """The ramp job of ``options``: what it measures (the local stack's processes, a compose
    project's containers or a release's pods), its reset and its check."""
    config, placed = options.config, options.placement
    url = config.load.url
    sampler, resources_source = stack.sampler_factory(url), stack.resources_source(url)
    measured_pods = None
    # A compose stack or a release forwarded to the local stack's port is not the local
    # stack: neither its configuration nor its stores are the local one's.
    local = options.containers is None and options.pods is None
    if options.containers is not None:
        from socialbench.workloads.probes.containers import compose_sampler_factory

        sampler, resources_source = compose_sampler_factory(options.containers,
                                                            options.container_kinds)
    if options.pods is not None:
        sampler, resources_source, measured_pods = release_pods(options.pods,
                                                                options.namespace, console)
    return RampJob(
        config=config, label=options.label, results_dir=options.results_dir,
        sampler=sampler, resources_source=resources_source,
        dataset=dataset, mongodb_server=mongodb_flavour(),
        stack=stack.record(url) if local else None,
        pods=measured_pods, energy=options.energy,
        reset=fresh_reset(stack, options.graph, options.posts_per_user, options.graph_seed,
                          console.print,
                          placed.stack_cpus if placed.mode is PlacementMode.SPLIT else None)
        if options.fresh and options.grow_levels is None else None, placement=placed,
        quiet=options.quiet, check=check_hook(stack, url, console) if local else None,
        spans=spans, memory=memory, preset=options.preset,
    )
