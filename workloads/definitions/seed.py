"""Seed a running stack with a social graph, as the original ``init_social_graph.py`` does.

Users ``0..N-1`` are registered as ``first_name_<i>``, ``last_name_<i>``,
``username_<i>``, ``password_<i>`` with user id ``i``; every edge of an undirected graph
is followed both ways, of a directed one (``twitter``) one way; optionally each user
composes posts. Requests go through the front end with
bounded concurrency. Running it twice is safe: a user that exists is counted as
such, and following twice is a no-op.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from socialbench.workloads.definitions import graph as graphs
from socialbench.workloads.definitions.core import FORM_CONTENT_TYPE
from socialbench.workloads.definitions.graph import Graph
from socialbench.workloads.definitions.socialnetwork import compose_post_body

FORM = {"Content-Type": FORM_CONTENT_TYPE}
# Requests in flight: enough to keep a small stack busy; 200 timed out composes on 2 cores.
DEFAULT_CONCURRENCY = 32


class SeedError(RuntimeError):
    """Seeding failed: the graph could not be read, or some requests failed (says which)."""


@dataclass
class SeedReport:
    """What seeding did, by phase: ``ok``, ``exists`` (already there) or an error kind."""

    graph: str
    users: int
    edges: int
    counts: dict[str, Counter[str]] = field(default_factory=dict)

    @property
    def failures(self) -> int:
        return sum(n for c in self.counts.values() for k, n in c.items()
                   if k not in ("ok", "exists"))


def register_body(user_id: int) -> str:
    return (f"first_name=first_name_{user_id}&last_name=last_name_{user_id}"
            f"&username=username_{user_id}&password=password_{user_id}&user_id={user_id}")


def follow_bodies(edges: Iterable[tuple[int, int]], directed: bool = False) -> Iterable[str]:
    for a, b in edges:
        yield f"user_id={a}&followee_id={b}"
        if not directed:
            yield f"user_id={b}&followee_id={a}"


async def post_all(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Iterable[str],
    *,
    concurrency: int,
    counts: Counter[str],
    exists_status: int | None,
    advance: Callable[[], None],
) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def post(body: str) -> None:
        try:
            async with session.post(url, data=body.encode(), headers=FORM) as response:
                await response.read()
                if response.status == 200:
                    counts["ok"] += 1
                elif response.status == exists_status:
                    counts["exists"] += 1
                else:
                    counts[f"http {response.status}"] += 1
        except (aiohttp.ClientError, TimeoutError) as exc:
            counts[type(exc).__name__] += 1
        finally:
            semaphore.release()
            advance()

    tasks: set[asyncio.Task[None]] = set()
    for body in bodies:
        await semaphore.acquire()
        task = asyncio.create_task(post(body))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def seed(
    base_url: str,
    graph: Graph,
    *,
    posts_per_user: int = 0,
    concurrency: int = DEFAULT_CONCURRENCY,
    seed_value: int = 1,
    timeout_s: float = 60.0,
    show_progress: bool = True,
) -> SeedReport:
    """Register every user, follow every edge (both ways unless the graph is directed),
    then compose posts."""
    base_url = base_url.rstrip("/")
    report = SeedReport(graph.name, graph.node_count, len(graph.edges))
    rng = random.Random(seed_value)
    phases: list[tuple[str, str, list[str], int | None]] = [
        ("users", "/wrk2-api/user/register",
         [register_body(i) for i in range(graph.node_count)], 409),
        ("follows", "/wrk2-api/user/follow",
         list(follow_bodies(graph.edges, graph.directed)), None),
    ]
    if posts_per_user:
        posts = [compose_post_body(rng, user, graph.node_count) for user in range(graph.node_count)
                 for _ in range(rng.randint(0, posts_per_user))]
        phases.append(("posts", "/wrk2-api/post/compose", posts, None))
    progress = Progress(
        TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), disable=not show_progress,
    )
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=timeout_s)
    )
    async with session:
        with progress:
            for name, path, bodies, exists_status in phases:
                counts = report.counts.setdefault(name, Counter())
                task = progress.add_task(name, total=len(bodies), rate="")

                def advance(task: TaskID = task, counts: Counter[str] = counts) -> None:
                    bad = sum(n for k, n in counts.items() if k not in ("ok", "exists"))
                    progress.update(task, advance=1, rate=f"failed {bad}" if bad else "")

                await post_all(session, base_url + path, bodies, concurrency=concurrency,
                                counts=counts, exists_status=exists_status, advance=advance)
    return report


def seed_graph(url: str, graph_spec: str, posts_per_user: int, seed_value: int,
               show_progress: bool = True) -> str:
    """Seed the stack at ``url`` with the graph ``graph_spec``; the graph's name.

    Raises :class:`SeedError` when the graph cannot be read or any request failed.
    """
    try:
        social_graph = graphs.load(graph_spec, seed=seed_value)
    except (graphs.GraphFormatError, OSError, ValueError) as exc:
        raise SeedError(f"graph {graph_spec!r}: {exc}") from None
    report = asyncio.run(seed(url, social_graph, posts_per_user=posts_per_user,
                              seed_value=seed_value, show_progress=show_progress))
    if report.failures:
        counts = {phase: dict(c) for phase, c in report.counts.items()}
        raise SeedError(f"seeding {social_graph.name} had {report.failures} failures: {counts}")
    return social_graph.name
