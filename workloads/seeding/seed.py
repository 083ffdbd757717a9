"""Seed a running stack with a social graph, as the original ``init_social_graph.py`` does.

Users ``0..N-1`` are registered (``username_<i>``, ``password_<i>``, ...; user id ``i``),
every edge followed (both ways for an undirected graph), then each user composes 0 to
``posts_per_user`` posts drawn from a generator seeded with the seed and the user
(:func:`posts_of`): the same whichever path, however often interrupted. Two paths, both
the services' own logic: ``api`` through the front end, ``bulk`` in this process
(:mod:`~socialbench.workloads.seeding.bulk`). With a state file each chunk is recorded as
it starts and ends, so a seeding run again with the same arguments continues and ends
with the stores one uninterrupted run leaves (how a compose is not repeated:
workloads/seeding/README.md). A first Ctrl-C or SIGTERM stops sending and records what
was in flight; a second stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from socialbench.errors import SocialbenchError
from socialbench.workloads.definitions.core import FORM_CONTENT_TYPE
from socialbench.workloads.definitions.socialnetwork import (
    USER_TIMELINE_PATH,
    PostFields,
    draw_post,
)
from socialbench.workloads.seeding import graph as graphs
from socialbench.workloads.seeding.graph import Graph
from socialbench.workloads.seeding.patience import (
    DEFAULT_RETRY_FOR_S,
    NOT_YET,
    Patience,
)

FORM = {"Content-Type": FORM_CONTENT_TYPE}
SAMPLE_BYTES = 300  # of the first answer of each failure kind, shown with the counts
# Requests in flight: enough to keep a small stack busy; 200 timed out composes on 2 cores.
DEFAULT_CONCURRENCY = 32
PHASES = ("users", "follows", "posts")
# Items per chunk (the unit of progress recorded): users, follows, and posts' authors.
USERS_PER_CHUNK = 1_000
FOLLOWS_PER_CHUNK = 20_000
AUTHORS_PER_CHUNK = 500
# The bulk path: items per call, and calls at once (enough to keep FerretDB busy; see bulk.py).
BULK_BATCH = {"users": 500, "follows": 1_000, "posts": 1_000}
BULK_CALLS_IN_FLIGHT = 4
STATE_VERSION = 1
STATE_FILE = "seed-state.json"
# Timeline entries read past a resumed author's planned posts (others' composes, a ramp's).
TIMELINE_SLACK = 1_000
OK, EXISTS = "ok", "exists"


class SeedPath(StrEnum):
    API = "api"
    BULK = "bulk"


class SeedError(SocialbenchError, RuntimeError):
    """Seeding failed: the graph could not be read, or some requests failed (says which)."""


class SeedInterrupted(SeedError):
    """Stopped by a signal; what was done is recorded, and the same command continues."""


# ---------------------------------------------------------------- what is seeded


class SeedDataset(BaseModel):
    """The data a seeding puts in the stores: what identifies it."""

    model_config = ConfigDict(extra="forbid")

    graph: str = Field(description="The graph's name, e.g. twitter-100000-50-1.")
    source: str = Field(description="The graph as given (--graph).")
    users: int
    edges: int
    follows: int = Field(description="Follow edges once seeded (both ways if undirected).")
    directed: bool
    posts_per_user: int = Field(description="Each user composes 0 to this many posts.")
    posts: int = Field(description="Posts composed in all.")
    seed: int = Field(description="Seed of the graph and of the posts.")


class PhaseRecord(BaseModel):
    """One phase's progress: its chunks done, and what its items came to."""

    model_config = ConfigDict(extra="forbid")

    items: int
    chunks: int
    done: list[int] = Field(default_factory=list)
    started: list[int] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    retried: dict[str, int] = Field(
        default_factory=dict, description="Answers that said 'not yet' (502, 503, 504, no "
        "connection), by kind: the item was sent again.")
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return len(self.done) == self.chunks

    def rate(self) -> float | None:
        """Items per second over the time spent on them (all runs)."""
        return self.items / self.elapsed_s if self.elapsed_s > 0 and self.complete else None


class SeedRecord(BaseModel):
    """What a seeding did: the dataset, the path, and each phase's time (a results
    manifest carries it: ``Dataset.seeded``)."""

    model_config = ConfigDict(extra="forbid")

    dataset: SeedDataset
    path: SeedPath
    target: str = Field(description="The front end (api) or the stack (bulk) seeded.")
    retry_for_s: float | None = Field(
        default=None, description="api: how long an item was sent again while the front "
        "end answered 'not yet' (--retry-for); None: bulk, or a record from before it.")
    phases: dict[str, PhaseRecord]
    complete: bool = False
    runs: int = Field(default=1, description="Runs it took (more: it was interrupted).")
    started_at: datetime
    finished_at: datetime | None = None
    version: int = STATE_VERSION

    @property
    def failures(self) -> int:
        return sum(n for phase in self.phases.values() for kind, n in phase.counts.items()
                   if kind not in (OK, EXISTS))

    def summary(self) -> str:
        """One line per phase: items, time and rate."""
        lines = []
        for name, phase in self.phases.items():
            rate = phase.rate()
            lines.append(f"{name}: {phase.items:,} in {phase.elapsed_s:,.1f} s"
                         + (f" ({rate:,.0f}/s)" if rate else ""))
        return "; ".join(lines)


@dataclass
class SeedReport:
    """What this run did, by phase: ``ok``, ``exists`` (already there) or an error kind;
    ``record``: the whole seeding's (every run's)."""

    graph: str
    users: int
    edges: int
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    record: SeedRecord | None = None
    resumed: bool = False
    already_done: bool = False
    retried: dict[str, Counter[str]] = field(default_factory=dict)  # "not yet", sent again
    answers: dict[str, str] = field(default_factory=dict)  # the first of each failure kind
    unavailable: str | None = None  # why the seeding stopped: the front end seemed down

    @property
    def failures(self) -> int:
        return sum(n for c in self.counts.values() for k, n in c.items()
                   if k not in (OK, EXISTS))


@dataclass(frozen=True)
class SeedPlan:
    """A graph and its posts, cut in chunks."""

    graph: Graph
    source: str
    posts_per_user: int
    seed_value: int
    post_counts: list[int]

    @classmethod
    def make(cls, graph: Graph, source: str, posts_per_user: int, seed_value: int) -> SeedPlan:
        counts = [post_count(seed_value, user, posts_per_user) if posts_per_user else 0
                  for user in range(graph.node_count)]
        return cls(graph, source, posts_per_user, seed_value, counts)

    def dataset(self) -> SeedDataset:
        return SeedDataset(graph=self.graph.name, source=self.source,
                           users=self.graph.node_count, edges=len(self.graph.edges),
                           follows=self.graph.follows, directed=self.graph.directed,
                           posts_per_user=self.posts_per_user, posts=sum(self.post_counts),
                           seed=self.seed_value)

    def phase_records(self) -> dict[str, PhaseRecord]:
        users, follows = self.graph.node_count, self.graph.follows
        return {
            "users": PhaseRecord(items=users, chunks=_chunks(users, USERS_PER_CHUNK)),
            "follows": PhaseRecord(items=follows, chunks=_chunks(follows, FOLLOWS_PER_CHUNK)),
            "posts": PhaseRecord(items=sum(self.post_counts),
                                 chunks=_chunks(users, AUTHORS_PER_CHUNK)
                                 if self.posts_per_user else 0),
        }

    def chunk_size(self, phase: str, chunk: int) -> int:
        """Items of ``chunk`` of ``phase`` (no need to draw them)."""
        if phase == "users":
            return len(_span(chunk, USERS_PER_CHUNK, self.graph.node_count))
        if phase == "follows":
            return len(_span(chunk, FOLLOWS_PER_CHUNK, self.graph.follows))
        return sum(self.post_counts[u] for u in _span(chunk, AUTHORS_PER_CHUNK,
                                                      self.graph.node_count))

    def users(self, chunk: int) -> list[int]:
        return list(_span(chunk, USERS_PER_CHUNK, self.graph.node_count))

    def follows(self, chunk: int) -> list[tuple[int, int]]:
        """The follows of ``chunk``: each edge, and of an undirected graph each edge both
        ways (a follows b, then b follows a)."""
        edges = self.graph.edges
        if self.graph.directed:
            return edges[chunk * FOLLOWS_PER_CHUNK:(chunk + 1) * FOLLOWS_PER_CHUNK]
        follows = []
        for index in _span(chunk, FOLLOWS_PER_CHUNK, self.graph.follows):
            a, b = edges[index // 2]
            follows.append((a, b) if index % 2 == 0 else (b, a))
        return follows

    def posts(self, chunk: int) -> list[PostFields]:
        users = self.graph.node_count
        return [post for user in _span(chunk, AUTHORS_PER_CHUNK, users)
                for post in posts_of(self.seed_value, user, users, self.posts_per_user)]


def _chunks(items: int, per_chunk: int) -> int:
    return -(-items // per_chunk)


def _span(chunk: int, per_chunk: int, items: int) -> range:
    return range(chunk * per_chunk, min((chunk + 1) * per_chunk, items))


def _user_rng(seed_value: int, user: int) -> random.Random:
    # A str seed is hashed with SHA-512: the same draws in every process.
    return random.Random(f"{seed_value}:{user}")


def post_count(seed_value: int, user: int, posts_per_user: int) -> int:
    """How many posts ``user`` composes: 0 to ``posts_per_user``."""
    return _user_rng(seed_value, user).randint(0, posts_per_user)


def posts_of(seed_value: int, user: int, users: int, posts_per_user: int) -> list[PostFields]:
    """The posts ``user`` composes (:func:`post_count` of them), drawn as the wrk2
    compose script draws a post (mentions among ``users``)."""
    rng = _user_rng(seed_value, user)
    return [draw_post(rng, user, users) for _ in range(rng.randint(0, posts_per_user))]


def register_body(user_id: int) -> str:
    return (f"first_name=first_name_{user_id}&last_name=last_name_{user_id}"
            f"&username=username_{user_id}&password=password_{user_id}&user_id={user_id}")


def follow_bodies(edges: Iterable[tuple[int, int]], directed: bool = False) -> Iterable[str]:
    for a, b in edges:
        yield f"user_id={a}&followee_id={b}"
        if not directed:
            yield f"user_id={b}&followee_id={a}"


def original_text(post: dict[str, Any]) -> str | None:
    """A stored post's text as it was composed: its short urls expanded again."""
    text = post.get("text")
    if not isinstance(text, str):
        return None
    for url in post.get("urls") or []:
        if isinstance(url, dict):
            text = text.replace(str(url.get("shortened_url")), str(url.get("expanded_url")))
    return text


# ---------------------------------------------------------------- the two paths


class Executor(Protocol):
    """One way of seeding: what each phase's call does with its items. A path without a
    network in between subclasses it for the defaults of the last three (never down, nothing
    retried, no answer to show)."""

    path: SeedPath
    in_flight: int  # calls at once
    batch: dict[str, int]  # items per call, by phase

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def users(self, user_ids: list[int]) -> Counter[str]: ...

    async def follows(self, follows: list[tuple[int, int]]) -> Counter[str]: ...

    async def posts(self, chunk: int, posts: list[PostFields]) -> Counter[str]: ...

    async def recover_posts(self, chunk: int, posts: list[PostFields]) -> list[PostFields]:
        """Before an unfinished chunk of posts runs again: the posts still to compose."""
        ...

    def chunk_done(self, chunk: int) -> None: ...

    def unavailable(self) -> str | None:
        """Why the target is taken for down (the seeding stops), or None."""
        return None

    def retried(self) -> Counter[str]:
        """The answers that said "not yet" and were sent again, by kind, so far."""
        return Counter()

    def answers(self) -> dict[str, str]:
        """The first answer of each failure kind (its body, or the error), to show."""
        return {}


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
    """POST each form body to ``url``, ``concurrency`` at once; each outcome counted."""
    semaphore = asyncio.Semaphore(concurrency)

    async def post(body: str) -> None:
        try:
            counts[await _post(session, url, body, exists_status)] += 1
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


async def _post(session: aiohttp.ClientSession, url: str, body: str,
                exists_status: int | None, samples: dict[str, str] | None = None) -> str:
    """One form POST: ``ok``, ``exists`` (the status that says so) or the failure (the
    first answer of each failure kind kept in ``samples``)."""
    try:
        async with session.post(url, data=body.encode(), headers=FORM) as response:
            answer = await response.read()
            if response.status == 200:
                return OK
            if response.status == exists_status:
                return EXISTS
            kind = f"http {response.status}"
            detail = answer[:SAMPLE_BYTES].decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError) as exc:
        kind = type(exc).__name__
        if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error,
                                                                         socket.gaierror):
            kind = "ClientConnectorDNSError"  # aiohttp 3.11's name: a failure, not "not yet"
        detail = str(exc)
    if samples is not None and kind not in samples:
        samples[kind] = " ".join(detail.split())
    return kind


# A compose answered 504 by nginx may still land (its read timeout passed, not the
# compose): sent again it could land twice, so for posts a 504 is a failure.
POSTS_NOT_YET = NOT_YET - {"http 504"}


class ApiExecutor:
    """Through the front end: one request per item, each sent again while the front end
    answers "not yet" (:class:`~socialbench.workloads.seeding.patience.Patience`)."""

    path = SeedPath.API

    def __init__(self, base_url: str, concurrency: int = DEFAULT_CONCURRENCY,
                 timeout_s: float = 60.0, patience: Patience | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.in_flight = concurrency
        self.batch = dict.fromkeys(PHASES, 1)
        self.timeout_s = timeout_s
        self.patience = patience or Patience()
        self.samples: dict[str, str] = {}  # the first answer of each failure kind
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "start() first"
        return self._session

    async def _each(self, path: str, bodies: list[str], exists_status: int | None,
                    retry_on: frozenset[str] = NOT_YET) -> Counter[str]:
        url = self.base_url + path

        def send(body: str) -> Callable[[], Awaitable[str]]:
            return lambda: _post(self.session, url, body, exists_status, self.samples)

        outcomes = await asyncio.gather(*(self.patience.attempt(send(body), retry_on)
                                          for body in bodies))
        return Counter(outcomes)

    def retried(self) -> Counter[str]:
        return self.patience.retried

    def answers(self) -> dict[str, str]:
        return self.samples

    def unavailable(self) -> str | None:
        gave_up = self.patience.gave_up
        return None if gave_up is None else f"the front end {self.base_url} {gave_up}"

    async def users(self, user_ids: list[int]) -> Counter[str]:
        return await self._each("/wrk2-api/user/register",
                                [register_body(user) for user in user_ids], 409)

    async def follows(self, follows: list[tuple[int, int]]) -> Counter[str]:
        return await self._each("/wrk2-api/user/follow",
                                list(follow_bodies(follows, directed=True)), None)

    async def posts(self, chunk: int, posts: list[PostFields]) -> Counter[str]:
        return await self._each("/wrk2-api/post/compose",
                                [post.form_body() for post in posts], None, POSTS_NOT_YET)

    async def recover_posts(self, chunk: int, posts: list[PostFields]) -> list[PostFields]:
        by_author: dict[int, list[PostFields]] = {}
        for post in posts:
            by_author.setdefault(post.user_id, []).append(post)
        semaphore = asyncio.Semaphore(self.in_flight)

        async def stored_texts(author: int, planned: int) -> set[str]:
            query = f"?user_id={author}&start=0&stop={planned + TIMELINE_SLACK}"
            answer: list[Any] = []  # the timeline read, or the error's text

            async def read() -> str:
                try:
                    async with self.session.get(self.base_url + USER_TIMELINE_PATH + query,
                                                headers=FORM) as response:
                        if response.status != 200:
                            answer[:] = [(await response.text())[:200]]
                            return f"http {response.status}"
                        answer[:] = [await response.json(content_type=None)]
                        return OK
                except aiohttp.ClientConnectorError:
                    return "ClientConnectorError"

            async with semaphore:
                outcome = await self.patience.attempt(read)
            if outcome != OK:
                raise SeedError(f"reading user {author}'s timeline to resume: {outcome}: "
                                f"{answer[0] if answer else ''}")
            (found,) = answer
            return {text for post in found if (text := original_text(post)) is not None}

        authors = list(by_author)
        stored = await asyncio.gather(*(stored_texts(a, len(by_author[a])) for a in authors))
        texts = dict(zip(authors, stored, strict=True))
        return [post for post in posts if post.text not in texts[post.user_id]]

    def chunk_done(self, chunk: int) -> None:
        return None


class BulkExecutor(Executor):
    """The services' logic in this process (bulk.py), many items per call."""

    path = SeedPath.BULK

    def __init__(self, services: Any, journal_dir: Path) -> None:
        self.services = services  # bulk.InProcessServices
        self.journal_dir = journal_dir
        self.in_flight = BULK_CALLS_IN_FLIGHT
        self.batch = dict(BULK_BATCH)

    async def start(self) -> None:
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        await self.services.start()

    async def close(self) -> None:
        await self.services.close()

    def _journal(self, chunk: int) -> Path:
        return self.journal_dir / f"posts-{chunk}.jsonl"

    async def users(self, user_ids: list[int]) -> Counter[str]:
        outcomes = await asyncio.gather(*(self.services.register(
            user, f"first_name_{user}", f"last_name_{user}", f"username_{user}",
            f"password_{user}") for user in user_ids), return_exceptions=True)
        return _counted(outcomes)

    async def follows(self, follows: list[tuple[int, int]]) -> Counter[str]:
        try:
            await self.services.follow_many(follows)
        except Exception as exc:
            return Counter({type(exc).__name__: len(follows)})
        return Counter({OK: len(follows)})

    async def posts(self, chunk: int, posts: list[PostFields]) -> Counter[str]:
        path = self._journal(chunk)

        def journal(published: Sequence[Any]) -> None:
            # Unbuffered: each line is with the kernel before the posts' writes start,
            # so even a kill -9 leaves it.
            lines = b"".join(json.dumps([p.post_id, p.user_id, p.mentioned]).encode() + b"\n"
                             for p in published)
            with path.open("ab", buffering=0) as out:
                out.write(lines)

        try:
            outcomes = await self.services.compose_many(posts, journal)
        except Exception as exc:
            return Counter({type(exc).__name__: len(posts)})
        return _counted(outcomes, ok=lambda outcome: isinstance(outcome, str))

    async def recover_posts(self, chunk: int, posts: list[PostFields]) -> list[PostFields]:
        from socialbench.workloads.seeding.bulk import Published

        path = self._journal(chunk)
        if path.exists():
            published = []
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):  # a line cut by the kill
                    post_id, user_id, mentioned = json.loads(line)
                    published.append(Published(post_id, user_id, mentioned))
            try:
                await self.services.undo(published)
            except Exception as exc:  # the journal stays: the next run undoes them again
                raise SeedError(f"undoing the {len(published)} posts of unfinished chunk "
                                f"{chunk} (to compose them again): {exc}; run the same "
                                "command again") from exc
            path.unlink()
        return posts

    def chunk_done(self, chunk: int) -> None:
        self._journal(chunk).unlink(missing_ok=True)


def _counted(outcomes: Iterable[Any], ok: Callable[[Any], bool] | None = None
             ) -> Counter[str]:
    counts: Counter[str] = Counter()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            counts[type(outcome).__name__] += 1
        elif ok is not None:
            counts[OK if ok(outcome) else str(outcome)] += 1
        else:
            counts[str(outcome)] += 1
    return counts


# ---------------------------------------------------------------- progress and state


class SeedState:
    """The record of a seeding, in a file (or only in memory), written whole each time."""

    def __init__(self, record: SeedRecord, path: Path | None) -> None:
        self.record = record
        self.path = path

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(self.record.model_dump_json(indent=1))
        os.replace(partial, self.path)

    @staticmethod
    def read(path: Path) -> SeedRecord | None:
        """The record in ``path``; None if there is none (or it cannot be read)."""
        try:
            return SeedRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return None


def default_state_path(data_dir: Path) -> Path:
    """Where ``socialbench seed`` records its progress for the local stack in ``data_dir``
    (``up --fresh`` deletes it with the stores)."""
    return data_dir / STATE_FILE


def journal_dir(state_path: Path) -> Path:
    """Where the bulk path journals the posts of unfinished chunks, beside the state."""
    return state_path.with_name(state_path.name + ".journal")


def _state_for(plan: SeedPlan, path: SeedPath, target: str, state_path: Path | None,
               restart: bool, note: Callable[[str], None]) -> tuple[SeedState, bool]:
    """The state to go on from (and whether it resumes one), or a new one."""
    dataset = plan.dataset()
    found = None if state_path is None or restart else SeedState.read(state_path)
    if found is not None and (found.dataset != dataset or found.target != target):
        note(f"The state file {state_path} is of another seeding ({found.dataset.graph} "
             f"into {found.target}); starting over.")
        found = None
    if found is not None and found.path != path and not found.complete:
        raise SeedError(f"the seeding in {state_path} was begun with --path {found.path}: "
                        f"continue it with that path, or start over with --restart")
    if found is not None:
        found.runs += 0 if found.complete else 1
        return SeedState(found, state_path), True
    if state_path is not None and journal_dir(state_path).exists():
        for stale in journal_dir(state_path).glob("*.jsonl"):
            stale.unlink()
    record = SeedRecord(dataset=dataset, path=path, target=target,
                        phases=plan.phase_records(), started_at=datetime.now(UTC))
    return SeedState(record, state_path), False


def _progress(show: bool, console: Console | None) -> Progress:
    return Progress(
        TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10}"), TimeElapsedColumn(), TextColumn("ETA"),
        TimeRemainingColumn(), disable=not show, console=console,
    )


@dataclass
class _Phase:
    """One phase being run: its chunks' calls in flight and their outcomes."""

    name: str
    record: PhaseRecord
    counts: Counter[str]
    progress: Progress
    task: TaskID
    started: float = field(default_factory=time.monotonic)
    done_this_run: int = 0

    def advance(self, outcome: Counter[str]) -> None:
        self.counts.update(outcome)
        for kind, n in outcome.items():
            self.record.counts[kind] = self.record.counts.get(kind, 0) + n
        items = sum(outcome.values())
        self.done_this_run += items
        elapsed = time.monotonic() - self.started
        bad = sum(n for k, n in self.counts.items() if k not in (OK, EXISTS))
        rate = f"{self.done_this_run / elapsed:,.0f}/s" if elapsed > 0 else ""
        self.progress.update(self.task, advance=items,
                             rate=f"{rate} failed {bad}" if bad else rate)


@dataclass
class _Chunk:
    """One chunk's calls: how many are still to answer, and what they came to."""

    number: int
    remaining: int
    counts: Counter[str] = field(default_factory=Counter)


async def _run_phase(plan: SeedPlan, executor: Executor, state: SeedState, phase: _Phase,
                     stop: asyncio.Event) -> None:
    """Every unfinished chunk of ``phase``: at most ``executor.in_flight`` calls at once,
    a chunk recorded done when all its calls were answered and its items succeeded."""
    record = phase.record
    semaphore = asyncio.Semaphore(executor.in_flight)
    tasks: set[asyncio.Task[None]] = set()
    per_call = executor.batch[phase.name]

    def finish(chunk: _Chunk) -> None:
        if all(kind in (OK, EXISTS) for kind in chunk.counts):
            record.done.append(chunk.number)
            record.started.remove(chunk.number)
            executor.chunk_done(chunk.number)
            state.save()

    async def call(chunk: _Chunk, items: Sequence[Any]) -> None:
        try:
            outcome = await _call(executor, phase.name, chunk.number, items)
            chunk.counts.update(outcome)
            phase.advance(outcome)
            chunk.remaining -= 1
            if chunk.remaining == 0:
                finish(chunk)
        finally:
            semaphore.release()

    for number in range(record.chunks):
        if stop.is_set() or executor.unavailable() is not None:
            break
        if number in record.done:
            continue
        items: Sequence[Any]
        if phase.name == "users":
            items = plan.users(number)
        elif phase.name == "follows":
            items = plan.follows(number)
        else:
            items = plan.posts(number)
            if number in record.started:
                left = await executor.recover_posts(number, list(items))
                if len(left) < len(items):
                    phase.advance(Counter({EXISTS: len(items) - len(left)}))
                items = left
        if number not in record.started:
            record.started.append(number)
        state.save()
        calls = [items[i:i + per_call] for i in range(0, len(items), per_call)]
        chunk = _Chunk(number, len(calls))  # stopped before all are sent: never done
        if not calls:
            finish(chunk)
        for call_items in calls:
            if stop.is_set() or executor.unavailable() is not None:
                break
            await semaphore.acquire()
            task = asyncio.create_task(call(chunk, call_items))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


def _call(executor: Executor, phase: str, chunk: int, items: Sequence[Any]
          ) -> Awaitable[Counter[str]]:
    if phase == "users":
        return executor.users(list(items))
    if phase == "follows":
        return executor.follows(list(items))
    return executor.posts(chunk, list(items))


async def run_seeding(plan: SeedPlan, executor: Executor, state: SeedState, *,
                      show_progress: bool = True, console: Console | None = None) -> SeedReport:
    """Every phase's unfinished chunks, recorded in ``state`` as they finish."""
    report = SeedReport(plan.graph.name, plan.graph.node_count, len(plan.graph.edges),
                        record=state.record)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            main.cancel()  # the second signal: at once
        stop.set()

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            handled.append(sig)
    progress = _progress(show_progress, console)
    await executor.start()
    try:
        with progress:
            for name in PHASES:
                record = state.record.phases[name]
                counts = report.counts.setdefault(name, Counter())
                if record.complete:
                    continue
                done_items = sum(plan.chunk_size(name, c) for c in record.done)
                task = progress.add_task(name, total=record.items, completed=done_items,
                                         rate="")
                phase = _Phase(name, record, counts, progress, task)
                retried_before = Counter(executor.retried())
                try:
                    await _run_phase(plan, executor, state, phase, stop)
                finally:
                    record.elapsed_s += time.monotonic() - phase.started
                    retried = executor.retried() - retried_before
                    report.retried[name] = retried
                    for kind, n in retried.items():
                        record.retried[kind] = record.retried.get(kind, 0) + n
                    state.save()
                if stop.is_set():
                    raise SeedInterrupted(_interrupted(state))
                report.unavailable = executor.unavailable()
                if report.unavailable is not None:
                    break  # the front end is down: what is left waits for a run
                if not record.complete:
                    break  # failures: the next phases wait for a run that has none
    except asyncio.CancelledError:
        state.save()
        raise SeedInterrupted(_interrupted(state)) from None
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        report.answers = dict(executor.answers())
        await executor.close()
    if all(phase.complete for phase in state.record.phases.values()):
        state.record.complete = True
        state.record.finished_at = datetime.now(UTC)
        state.save()
    return report


def _interrupted(state: SeedState) -> str:
    done = ", ".join(f"{name} {len(p.done)}/{p.chunks} chunks"
                     for name, p in state.record.phases.items())
    where = (f"recorded in {state.path}; the same command continues"
             if state.path is not None else "no state file: it starts over")
    return f"interrupted ({done}); {where}"


# ---------------------------------------------------------------- entry points


def load_graph(graph_spec: str, seed_value: int) -> Graph:
    try:
        return graphs.load(graph_spec, seed=seed_value)
    except (graphs.GraphFormatError, OSError, ValueError) as exc:
        raise SeedError(f"graph {graph_spec!r}: {exc}") from None


async def seed(
    base_url: str,
    graph: Graph,
    *,
    posts_per_user: int = 0,
    concurrency: int = DEFAULT_CONCURRENCY,
    seed_value: int = 1,
    timeout_s: float = 60.0,
    retry_for_s: float = DEFAULT_RETRY_FOR_S,
    show_progress: bool = True,
    source: str | None = None,
    executor: Executor | None = None,
    state_path: Path | None = None,
    restart: bool = False,
    console: Console | None = None,
) -> SeedReport:
    """Register every user, follow every edge (both ways unless the graph is directed),
    then compose posts: through the front end at ``base_url``, or with ``executor``.

    Through the front end, an item answered "not yet" (502, 503, 504, no connection) is
    sent again for up to ``retry_for_s``; when nothing else was answered for that long,
    the seeding stops and ``report.unavailable`` says why. With ``state_path``, progress
    is recorded there and a seeding it records is continued (unless ``restart``); a
    complete one is not done again.
    """
    plan = SeedPlan.make(graph, source or graph.name, posts_per_user, seed_value)
    notes = console or Console(stderr=True)
    patience = None
    if executor is None:
        patience = Patience(retry_for_s, note=lambda line: notes.print(
            f"[yellow]{line}[/]", soft_wrap=True))
        executor = ApiExecutor(base_url, concurrency, timeout_s, patience)
    state, resumed = _state_for(plan, executor.path, base_url.rstrip("/"), state_path,
                                restart, notes.print)
    if state.record.complete:
        return SeedReport(graph.name, graph.node_count, len(graph.edges),
                          record=state.record, resumed=True, already_done=True)
    if patience is not None:
        state.record.retry_for_s = retry_for_s
    report = await run_seeding(plan, executor, state, show_progress=show_progress,
                               console=console)
    report.resumed = resumed
    return report


def seed_graph(url: str, graph_spec: str, posts_per_user: int, seed_value: int,
               show_progress: bool = True) -> str:
    """Seed the stack at ``url`` with the graph ``graph_spec`` through its front end (no
    state file: a fresh stack's seeding); the graph's name.

    Raises :class:`SeedError` when the graph cannot be read or any request failed.
    """
    social_graph = load_graph(graph_spec, seed_value)
    report = asyncio.run(seed(url, social_graph, posts_per_user=posts_per_user,
                              seed_value=seed_value, show_progress=show_progress,
                              source=graph_spec))
    if report.unavailable is not None:
        raise SeedError(f"seeding {social_graph.name}: {report.unavailable}")
    if report.failures:
        counts = {phase: dict(c) for phase, c in report.counts.items()}
        raise SeedError(f"seeding {social_graph.name} had {report.failures} failures: {counts}")
    return social_graph.name
