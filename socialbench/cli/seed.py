"""``socialbench seed``: load a social graph into a running stack.

The logic is :mod:`socialbench.workloads.seeding.seed` (and ``bulk`` for ``--path bulk``,
given the local stack's stores by :func:`socialbench.workloads.runs.local.bulk_executor`);
this module keeps the progress in ``<data dir>/seed-state.json`` (``--state``), warns when
the stack would not fit in the machine's memory, and prints what was done.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir
from socialbench.stack.local import LocalStack
from socialbench.workloads.probes.memory import cache_warning, memory_warning
from socialbench.workloads.runs.local import bulk_executor, stack_rss
from socialbench.workloads.seeding import graph as graphs
from socialbench.workloads.seeding.seed import (
    DEFAULT_CONCURRENCY,
    STATE_FILE,
    Executor,
    SeedDataset,
    SeedError,
    SeedInterrupted,
    SeedPath,
    SeedPlan,
    SeedReport,
    default_state_path,
    seed,
)

console = Console()


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
    record = report.record
    table = Table("phase", "items", "ok", "already there", "failed", "time", "rate")
    for phase, counts in report.counts.items():
        failed = {k: n for k, n in counts.items() if k not in ("ok", "exists")}
        whole = record.phases[phase] if record is not None else None
        rate = whole.rate() if whole is not None else None
        table.add_row(phase, f"{whole.items:,}" if whole else "", f"{counts['ok']:,}",
                      f"{counts['exists']:,}",
                      ", ".join(f"{k}: {n}" for k, n in failed.items()) or "0",
                      f"{whole.elapsed_s:,.1f} s" if whole else "",
                      f"{rate:,.0f}/s" if rate else "")
    out.print(table)


def seed_command(
    graph: Annotated[str, typer.Option(
        help="synthetic[:USERS[:EDGES_PER_USER]] (default: shaped like socfb-Reed98), "
             "twitter[:USERS[:MEAN_FOLLOWS]] (directed, Twitter's heavy-tailed "
             "followers), a .mtx file, or the original's <name>.nodes/.edges pair.")]
    = "synthetic",
    url: Annotated[str | None, typer.Option(
        help="Front end of the stack (default: the local stack's in --data-dir).")] = None,
    posts_per_user: Annotated[int, typer.Option(
        min=0, help="Each user composes 0..N posts (0: none).")] = 0,
    path: Annotated[SeedPath, typer.Option(
        "--path", help="api: through the front end, a request per item. bulk: the "
        "services' own logic in this process on the local stack's stores, many items per "
        "call (for 100k+ users and millions of posts).")] = SeedPath.API,
    concurrency: Annotated[int, typer.Option(
        min=1, help="Requests in flight (--path api).")] = DEFAULT_CONCURRENCY,
    seed_value: Annotated[int, typer.Option("--seed", help="RNG seed (graph and posts).")] = 1,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    state: Annotated[Path | None, typer.Option(
        help=f"Progress file: an interrupted seeding run again with the same arguments "
             f"continues from it (default: <data dir>/{STATE_FILE}).")] = None,
    restart: Annotated[bool, typer.Option(
        "--restart", help="Ignore the progress file: seed everything again.")] = False,
) -> None:
    """Register users 0..N-1, follow every edge (both ways unless directed), optionally
    compose posts; resumable, with progress."""
    stack = LocalStack(data_dir)
    target = (url or stack.config.url).rstrip("/")
    state_path = state or default_state_path(data_dir)
    if path is SeedPath.BULK and stack.running_state() is None:
        raise typer.BadParameter(f"--path bulk writes the stores of the local stack in "
                                 f"{data_dir}, which is not running (socialbench up)",
                                 param_hint="--path")
    if path is SeedPath.BULK and not stack.serves(target):
        raise typer.BadParameter(f"--path bulk seeds the local stack in {data_dir}, and "
                                 f"{target} is not its front end", param_hint="--path/--url")
    try:
        social_graph = graphs.load(graph, seed=seed_value)
    except (graphs.GraphFormatError, OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--graph") from None
    plan = SeedPlan.make(social_graph, graph, posts_per_user, seed_value)
    dataset = plan.dataset()
    how = "one way" if social_graph.directed else "both ways"
    console.print(f"Seeding {social_graph.name}: {dataset.users:,} users, "
                  f"{dataset.edges:,} edges (followed {how}: {dataset.follows:,} follows), "
                  f"{dataset.posts:,} posts into {target} (--path {path.value})")
    for warning in seed_memory_warnings(dataset, stack if stack.serves(target) else None):
        console.print(f"[bold yellow]warning[/]: {warning}", soft_wrap=True)
    executor: Executor | None = (bulk_executor(stack, state_path)
                                 if path is SeedPath.BULK else None)
    try:
        report = asyncio.run(seed(target, social_graph, posts_per_user=posts_per_user,
                                  concurrency=concurrency, seed_value=seed_value,
                                  source=graph, executor=executor, state_path=state_path,
                                  restart=restart, console=console))
    except SeedInterrupted as exc:
        console.print(f"[bold yellow]Stopped[/]: {exc}", soft_wrap=True)
        raise typer.Exit(130) from None
    except SeedError as exc:
        console.print(f"[bold red]error[/]: {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    record = report.record
    if report.already_done and record is not None:
        console.print(f"Already seeded (recorded in {state_path}, --path {record.path.value}): "
                      f"{record.summary()}. --restart seeds it again.", soft_wrap=True)
        return
    if report.resumed:
        console.print(f"Continued the seeding recorded in {state_path}.")
    print_report(report, console)
    if record is not None and record.complete:
        console.print(f"Seeded with --path {record.path.value} in {record.runs} run(s): "
                      f"{record.summary()}", soft_wrap=True)
    if report.failures:
        console.print("Some items failed: run the same command again to retry them.")
        raise typer.Exit(1)
