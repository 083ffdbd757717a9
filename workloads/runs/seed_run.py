"""``socialbench seed`` past its options: a graph loaded into a stack, resumably, printed.

Entry points: :class:`SeedOptions` (what the command parsed, the graph read) and
:func:`run_seed` (the seeding, its memory warnings and its table; the exit status back).
The logic is :mod:`socialbench.workloads.seeding.seed` (and ``bulk`` for ``--path bulk``,
given the local stack's stores by :func:`socialbench.workloads.runs.local.bulk_executor`).
A seeding that fails raises :class:`~socialbench.workloads.seeding.seed.SeedError`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from socialbench.stack.local import LocalStack
from socialbench.workloads.probes.memory import cache_warning, memory_warning
from socialbench.workloads.runs.local import bulk_executor, stack_rss
from socialbench.workloads.seeding.graph import Graph
from socialbench.workloads.seeding.patience import DEFAULT_RETRY_FOR_S, seconds_text
from socialbench.workloads.seeding.seed import (
    DEFAULT_CONCURRENCY,
    Executor,
    SeedDataset,
    SeedInterrupted,
    SeedPath,
    SeedPlan,
    SeedReport,
    seed,
)


@dataclass(frozen=True)
class SeedOptions:
    """What ``socialbench seed`` was asked, parsed and checked (the graph read)."""

    target: str  # the stack's front end, without a trailing /
    graph: Graph
    source: str  # the graph as given (--graph)
    data_dir: Path  # the local stack's
    state_path: Path  # the progress file
    posts_per_user: int = 0
    path: SeedPath = SeedPath.API
    concurrency: int = DEFAULT_CONCURRENCY
    seed_value: int = 1
    restart: bool = False
    retry_for_s: float = DEFAULT_RETRY_FOR_S  # --path api: items answered "not yet", again


def seed_memory_warnings(dataset: SeedDataset, stack: LocalStack | None) -> list[str]:
    """The warnings when the stack would outgrow the machine's memory with ``dataset``, or
    the local stack's memcached would not hold its posts."""
    limit = stack.config.memcached_bytes if stack is not None else None
    instances = stack.config.memcached_instances if stack is not None else 1
    warnings = (
        memory_warning(dataset.users, dataset.follows, dataset.posts, memcached_limit=limit,
                       stack_rss=stack_rss(stack) if stack is not None else 0,
                       what=f"the stack with {dataset.graph} and {dataset.posts:,} posts"),
        cache_warning(dataset.users, dataset.posts, memcached_limit=limit,
                      instances=instances))
    return [warning for warning in warnings if warning]


def print_report(report: SeedReport, out: Console) -> None:
    """Each phase's items, done, already there, failed, retried (answered "not yet", sent
    again), time and rate; the first answer of each failure kind."""
    record = report.record
    table = Table("phase", "items", "ok", "already there", "failed", "retried", "time",
                  "rate")
    for phase, counts in report.counts.items():
        failed = {k: n for k, n in counts.items() if k not in ("ok", "exists")}
        retried = report.retried.get(phase) or Counter()
        whole = record.phases[phase] if record is not None else None
        rate = whole.rate() if whole is not None else None
        table.add_row(phase, f"{whole.items:,}" if whole else "", f"{counts['ok']:,}",
                      f"{counts['exists']:,}",
                      ", ".join(f"{k}: {n}" for k, n in failed.items()) or "0",
                      ", ".join(f"{k}: {n}" for k, n in retried.items()) or "0",
                      f"{whole.elapsed_s:,.1f} s" if whole else "",
                      f"{rate:,.0f}/s" if rate else "")
    out.print(table)
    for kind, answer in report.answers.items():
        out.print(f"  {kind}, the first answered: {answer or '(empty)'}", soft_wrap=True,
                  markup=False, highlight=False)


def run_seed(options: SeedOptions, console: Console) -> int:
    """Seed as asked, printed; the exit status: 0, 1 (some items failed: run it again)
    or 130 (stopped, kept in the progress file)."""
    stack = LocalStack(options.data_dir)
    target, social_graph, path = options.target, options.graph, options.path
    plan = SeedPlan.make(social_graph, options.source, options.posts_per_user,
                         options.seed_value)
    dataset = plan.dataset()
    how = "one way" if social_graph.directed else "both ways"
    console.print(f"Seeding {social_graph.name}: {dataset.users:,} users, "
                  f"{dataset.edges:,} edges (followed {how}: {dataset.follows:,} follows), "
                  f"{dataset.posts:,} posts into {target} (--path {path.value})"
                  + ("" if path is SeedPath.BULK else
                     f"; an item answered 'not yet' (502, 503, 504, no connection) is sent "
                     f"again for up to {seconds_text(options.retry_for_s)} (--retry-for)"),
                  soft_wrap=True)
    for warning in seed_memory_warnings(dataset, stack if stack.serves(target) else None):
        console.print(f"[bold yellow]warning[/]: {warning}", soft_wrap=True)
    executor: Executor | None = (bulk_executor(stack, options.state_path)
                                 if path is SeedPath.BULK else None)
    try:
        report = asyncio.run(seed(target, social_graph, posts_per_user=options.posts_per_user,
                                  concurrency=options.concurrency,
                                  retry_for_s=options.retry_for_s,
                                  seed_value=options.seed_value, source=options.source,
                                  executor=executor, state_path=options.state_path,
                                  restart=options.restart, console=console))
    except SeedInterrupted as exc:
        console.print(f"[bold yellow]Stopped[/]: {exc}", soft_wrap=True)
        return 130
    record = report.record
    if report.already_done and record is not None:
        console.print(f"Already seeded (recorded in {options.state_path}, --path "
                      f"{record.path.value}): {record.summary()}. --restart seeds it again.",
                      soft_wrap=True)
        return 0
    if report.resumed:
        console.print(f"Continued the seeding recorded in {options.state_path}.")
    print_report(report, console)
    if record is not None and record.complete:
        console.print(f"Seeded with --path {record.path.value} in {record.runs} run(s): "
                      f"{record.summary()}", soft_wrap=True)
    if report.unavailable is not None:
        console.print(f"[bold red]error[/]: {report.unavailable}. Is the stack up and "
                      "healthy? The seeding stopped; run the same command again once it "
                      "serves (what was done is kept).", soft_wrap=True)
        return 1
    if report.failures:
        console.print("Some items failed: run the same command again to retry them.")
        return 1
    return 0
