"""``socialbench ramp --grow``: the ramp at each of several numbers of posts stored.

The levels' order is :func:`socialbench.workloads.runs.grow_levels.run_levels`; this module gives
it the local stack: posts added with the seeder's bulk path (workloads/seeding/add_posts.py),
the stores measured (socialbench/stack/store_stats.py), and each level's ramp run as
``socialbench ramp`` runs one. Entry points: :func:`run_grow`, and
:func:`seed_graph_bulk` (the graph seeded first, with ``--fresh``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from socialbench import __version__
from socialbench.stack.local import LocalStack
from socialbench.stack.store_stats import memcached_counters, store_figures
from socialbench.workloads.probes import machine
from socialbench.workloads.probes.memory import MemoryRecord
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.files import bundle_dir
from socialbench.workloads.results.growth import (
    GrowLevel,
    GrowManifest,
    GrowWriter,
    LevelRamp,
    level_record,
)
from socialbench.workloads.runs.grow_levels import run_levels
from socialbench.workloads.runs.local import bulk_executor, service_settings
from socialbench.workloads.runs.ramp_job import RampJob, execute
from socialbench.workloads.seeding import add_posts as growth
from socialbench.workloads.seeding.seed import (
    BulkExecutor,
    SeedError,
    default_state_path,
    load_graph,
    seed,
)

HOW = ("the seeder's bulk path (socialbench seed --path bulk: compose-post's logic and its "
       "neighbours' in process, on the stack's stores; workloads/seeding/add_posts.py), on the "
       "graph already seeded: post k by user (k // {run}) % users, {run} posts a round "
       "each, drawn as compose-post.lua draws a post; each level counted in post-storage's "
       "collection (a ramp's own composes count)")


def seed_graph_bulk(stack: LocalStack, graph: str, posts_per_user: int, seed_value: int,
                    console: Console) -> None:
    """Seed ``graph`` into the (fresh) local stack with the bulk path, recorded in its
    data dir as ``socialbench seed`` records it."""
    state_path = default_state_path(stack.data_dir)
    report = asyncio.run(seed(stack.config.url, load_graph(graph, seed_value),
                              posts_per_user=posts_per_user, seed_value=seed_value,
                              source=graph, executor=bulk_executor(stack, state_path),
                              state_path=state_path, console=console))
    if report.failures:
        raise SeedError(f"seeding {graph} had {report.failures} failures: run it again")


def add_posts(stack: LocalStack, users: int, seed_value: int, console: Console
              ) -> Callable[[int, int], None]:
    """Adds posts ``first`` .. ``first + count - 1`` of the growth to the stack."""
    from socialbench.workloads.seeding.bulk import InProcessServices

    def add(first: int, count: int) -> None:
        console.print(f"Adding {count:,} posts (from {first:,} stored) with the bulk path…")
        executor = BulkExecutor(InProcessServices(service_settings(stack)),
                                growth.journal_dir(stack.data_dir))
        started = time.monotonic()
        asyncio.run(growth.add_posts(executor, users=users, first=first, count=count,
                                     seed_value=seed_value))
        elapsed = time.monotonic() - started
        console.print(f"Added {count:,} posts in {elapsed:,.0f} s ({count / elapsed:,.0f}/s)")

    return add


def run_grow(job: RampJob, stack: LocalStack, levels: list[int], *, users: int,
             seed_value: int, memory_for: Callable[[int], MemoryRecord],
             console: Console) -> list[GrowLevel]:
    """Each level: the posts brought up to it, the stores measured, a ramp; the growth's
    bundle (grow.json, grow.csv, the curve, report.html) around the levels' bundles."""
    config = stack.config
    described = machine.describe(job.mongodb_server)
    memory = memory_for(levels[-1])
    for warning in (memory.warning, memory.cache_warning):
        if warning:
            console.print(f"[bold yellow]warning[/]: at {levels[-1]:,} posts: {warning}",
                          soft_wrap=True)
    writer = GrowWriter(bundle_dir(job.results_dir, f"{job.label}-grow"), GrowManifest(
        socialbench_version=__version__, created_at=datetime.now(UTC), label=job.label,
        command_line=described["command_line"], git=described["git"],
        hardware=described["hardware"], software=described["software"], levels=levels,
        how=HOW.format(run=growth.AUTHOR_RUN), users=users, seed=seed_value,
        dataset=job.dataset, memory=memory))
    console.print(f"Growth bundle: {writer.directory}")

    def measure(level: int, grown: int, grow_s: float, last: bool) -> GrowLevel:
        stored = store_figures(config)
        console.print(
            f"[bold]Level {level:,}[/]: {stored.posts:,} posts, {stored.users:,} users stored; "
            f"Redis {stored.redis_used_memory_bytes / 2**30:.2f} GiB, MongoDB files "
            f"{stored.mongodb_file_bytes / 2**30:.2f} GiB, post read indexed: "
            f"{stored.post_read_indexed}")
        dataset = job.dataset.model_copy(update={"note": (
            f"{job.dataset.note}; grown to {stored.posts:,} posts by ramp --grow")})
        level_job = dataclasses.replace(
            job, label=f"{job.label}-{level}-posts", results_dir=writer.levels_dir,
            dataset=dataset, memory=memory_for(stored.posts),
            check=job.check if last else None)
        before = memcached_counters(config)
        report = execute(level_job, console)
        print_headline(report, console)
        return level_record(level, grown, grow_s, stored,
                            LevelRamp(report.directory, before, memcached_counters(config),
                                      report.outcome.interrupted), writer.directory)

    done = run_levels(levels, count_posts=lambda: store_figures(config).posts,
                      add_posts=add_posts(stack, users, seed_value, console),
                      measure=measure, on_level=writer.add)
    # matplotlib: imported only when run (every command, `serve` too, starts without it)
    from socialbench.workloads.reports.growth_report import build_grow_report

    report = build_grow_report(writer.directory)
    print_curve(done, console)
    console.print(f"Curve: {report}")
    return done


def print_curve(levels: list[GrowLevel], console: Console) -> None:
    """The levels as a table: the curve in numbers."""
    table = Table("posts", "users", "max req/s", "p99 ms", "CPU ms/req", "memcached hits",
                  "Redis GiB", "MongoDB files GiB")
    for level in levels:
        stored = level.stored
        table.add_row(
            f"{stored.posts:,}", f"{stored.users:,}",
            f"{level.max_rate_rps:,.6g}" if level.max_rate_rps is not None else "—",
            f"{level.p99_ms:,.0f}" if level.p99_ms is not None else "—",
            f"{level.cpu_ms_per_request:.2f}" if level.cpu_ms_per_request is not None else "—",
            f"{level.memcached_hit_ratio:.1%}" if level.memcached_hit_ratio is not None else "—",
            f"{stored.redis_used_memory_bytes / 2**30:.2f}",
            f"{stored.mongodb_file_bytes / 2**30:.2f}")
    console.print(table)

