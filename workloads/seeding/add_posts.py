"""Posts added to a seeded stack, to bring it to a number of posts (``socialbench ramp --grow``).

The posts are composed as ``socialbench seed --path bulk`` composes them (its
:class:`~socialbench.workloads.seeding.seed.BulkExecutor`: every service's logic in
process, journaled before it is published), on the graph already seeded: no user or
follow is added. Post ``k`` of the growth (``k`` counts the posts stored when it began,
then on) is by user ``(k // AUTHOR_RUN) % users``: every user composes ``AUTHOR_RUN``
posts a round, in turn, so the posts per user stay even as the data grows, and an
author's run is fanned out together (one read of its followers). Its text, mentions, urls
and media are drawn as compose-post.lua draws them, from a generator seeded with the seed
and ``k``.

Interrupted, a growth leaves the journals of the calls in flight; the next growth undoes
their posts first (compose-post's undo), so the stores hold whole posts only, and the
posts counted in MongoDB say where to go on from.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from socialbench.workloads.definitions.socialnetwork import PostFields, draw_post
from socialbench.workloads.seeding.seed import OK, BulkExecutor, SeedError

AUTHOR_RUN = 10  # posts of one author in a row
JOURNAL_DIR = "grow.journal"


def grown_post(seed_value: int, index: int, users: int) -> PostFields:
    """Post ``index`` of a growth on ``users`` users."""
    rng = random.Random(f"{seed_value}:grown:{index}")
    return draw_post(rng, (index // AUTHOR_RUN) % users, users)


def journal_dir(data_dir: Path) -> Path:
    """Where a growth of the local stack in ``data_dir`` journals its calls in flight."""
    return data_dir / JOURNAL_DIR


async def undo_unfinished(executor: BulkExecutor) -> int:
    """Undo the posts of the calls an interrupted growth left journaled; how many calls."""
    unfinished = sorted(executor.journal_dir.glob("posts-*.jsonl"))
    for path in unfinished:
        await executor.recover_posts(int(path.stem.removeprefix("posts-")), [])
    return len(unfinished)


async def add_posts(executor: BulkExecutor, *, users: int, first: int, count: int,
                    seed_value: int, advance: Callable[[int], None] | None = None) -> None:
    """Compose posts ``first`` .. ``first + count - 1`` of the growth, in calls of the
    executor's batch of posts, as many at once as it takes.

    Raises :class:`SeedError` when some failed (their calls stay journaled: the next
    growth undoes them before it counts the posts).
    """
    if users < 1:
        raise SeedError("growing the posts needs the users they are composed by")
    await executor.start()
    try:
        await undo_unfinished(executor)
        per_call = executor.batch["posts"]
        semaphore = asyncio.Semaphore(executor.in_flight)
        counts: Counter[str] = Counter()

        async def call(start: int) -> None:
            try:
                end = min(start + per_call, first + count)
                posts = [grown_post(seed_value, k, users) for k in range(start, end)]
                outcome = await executor.posts(start // per_call, posts)
                counts.update(outcome)
                if set(outcome) == {OK}:
                    executor.chunk_done(start // per_call)
                if advance is not None:
                    advance(len(posts))
            finally:
                semaphore.release()

        tasks = []
        for start in range(first, first + count, per_call):
            await semaphore.acquire()
            tasks.append(asyncio.create_task(call(start)))
        await asyncio.gather(*tasks)
    finally:
        await executor.close()
    failed = {kind: n for kind, n in counts.items() if kind != OK}
    if failed:
        raise SeedError(f"{sum(failed.values())} of {count} posts failed ({failed}); their "
                        "calls are journaled and undone by the next growth")
