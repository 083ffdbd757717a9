"""``socialbench seed``: load a social graph into a running stack."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from socialbench.workloads.definitions import graph as graphs
from socialbench.workloads.definitions.seed import DEFAULT_CONCURRENCY, seed

console = Console()


def seed_command(
    graph: Annotated[str, typer.Option(
        help="synthetic[:USERS[:EDGES_PER_USER]] (default: shaped like socfb-Reed98), "
             "twitter[:USERS[:MEAN_FOLLOWS]] (directed, Twitter's heavy-tailed "
             "followers), a .mtx file, or the original's <name>.nodes/.edges pair.")]
    = "synthetic",
    url: Annotated[str, typer.Option(help="Front end of the stack.")] = "http://127.0.0.1:8080",
    posts_per_user: Annotated[int, typer.Option(
        min=0, help="Each user composes 0..N posts (0: none).")] = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight.")]
    = DEFAULT_CONCURRENCY,
    seed_value: Annotated[int, typer.Option("--seed", help="RNG seed (graph and posts).")] = 1,
) -> None:
    """Register users 0..N-1, follow every edge both ways, optionally compose posts."""
    try:
        social_graph = graphs.load(graph, seed=seed_value)
    except (graphs.GraphFormatError, OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--graph") from None
    how = "one way" if social_graph.directed else "both ways"
    console.print(f"Seeding {social_graph.name}: {social_graph.node_count:,} users, "
                  f"{len(social_graph.edges):,} edges (followed {how}: "
                  f"{social_graph.follows:,} follows) into {url}")
    report = asyncio.run(seed(url, social_graph, posts_per_user=posts_per_user,
                              concurrency=concurrency, seed_value=seed_value))
    table = Table("phase", "ok", "already there", "failed")
    for phase, counts in report.counts.items():
        failed = {k: n for k, n in counts.items() if k not in ("ok", "exists")}
        table.add_row(phase, str(counts["ok"]), str(counts["exists"]),
                      ", ".join(f"{k}: {n}" for k, n in failed.items()) or "0")
    console.print(table)
    if report.failures:
        raise typer.Exit(1)
