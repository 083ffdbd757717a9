"""The seeder's plan, its progress record, and how an interrupted seeding goes on
(workloads/seeding/seed.py), with an executor that records what it is asked."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from socialbench.workloads.definitions.socialnetwork import PostFields, compose_post_body
from socialbench.workloads.seeding import graph, seed
from socialbench.workloads.seeding.seed import (
    EXISTS,
    OK,
    SeedInterrupted,
    SeedPath,
    SeedPlan,
    SeedState,
)

URL = "http://stack.test"


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seed, "USERS_PER_CHUNK", 10)
    monkeypatch.setattr(seed, "FOLLOWS_PER_CHUNK", 25)
    monkeypatch.setattr(seed, "AUTHORS_PER_CHUNK", 7)


def plan_of(source: str = "synthetic:40:3", posts_per_user: int = 3, seed_value: int = 5
            ) -> SeedPlan:
    return SeedPlan.make(graph.load(source, seed=seed_value), source, posts_per_user,
                         seed_value)


def test_the_plan_cuts_every_item_into_chunks_once() -> None:
    plan = plan_of()
    records = plan.phase_records()
    users = [u for c in range(records["users"].chunks) for u in plan.users(c)]
    assert users == list(range(40))
    follows = [f for c in range(records["follows"].chunks) for f in plan.follows(c)]
    # Undirected: each edge both ways, in the order the api path has always sent them.
    assert follows == [pair for a, b in plan.graph.edges for pair in ((a, b), (b, a))]
    posts = [p for c in range(records["posts"].chunks) for p in plan.posts(c)]
    assert len(posts) == records["posts"].items == plan.dataset().posts
    assert [plan.chunk_size("posts", c) for c in range(records["posts"].chunks)] == [
        len(plan.posts(c)) for c in range(records["posts"].chunks)]
    directed = plan_of("twitter:60:4")
    assert [f for c in range(directed.phase_records()["follows"].chunks)
            for f in directed.follows(c)] == directed.graph.edges


def test_a_users_posts_depend_on_the_seed_and_the_user_only() -> None:
    first = seed.posts_of(5, 17, 40, 6)
    assert first == seed.posts_of(5, 17, 40, 6)
    assert len(first) == seed.post_count(5, 17, 6)
    assert first != seed.posts_of(6, 17, 40, 6)
    assert {p.user_id for p in first} == {17}
    assert all(f" @username_{17} " not in p.text for p in first)


def test_a_post_is_sent_as_the_wrk2_script_writes_it() -> None:
    import random

    body = compose_post_body(random.Random(3), 4, 10)
    assert body.startswith("username=username_4&user_id=4&text=")
    assert body.endswith("&post_type=0")
    assert '&media_ids=["' in body and '&media_types=["png"' in body


def test_a_stored_posts_text_is_found_with_its_urls_expanded() -> None:
    stored = {"text": "hi http://short-url/abc and http://short-url/def",
              "urls": [{"shortened_url": "http://short-url/abc", "expanded_url": "http://a.b"},
                       {"shortened_url": "http://short-url/def", "expanded_url": "http://c"}]}
    assert seed.original_text(stored) == "hi http://a.b and http://c"


@dataclass
class Recording(seed.Executor):
    """An executor that records each item and can be told to fail or to stop."""

    path: SeedPath = SeedPath.BULK
    in_flight: int = 2
    batch: dict[str, int] = field(default_factory=lambda: {"users": 4, "follows": 10,
                                                           "posts": 5})
    done: dict[str, list[object]] = field(default_factory=lambda: {p: [] for p in seed.PHASES})
    interrupt_after_posts: int | None = None  # a SIGINT once this many posts are done
    failing_post_text: str | None = None
    recovered: list[int] = field(default_factory=list)
    stopper: asyncio.Event | None = None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def users(self, user_ids: list[int]) -> Counter[str]:
        self.done["users"] += user_ids
        return Counter({OK: len(user_ids)})

    async def follows(self, follows: list[tuple[int, int]]) -> Counter[str]:
        self.done["follows"] += follows
        return Counter({OK: len(follows)})

    async def posts(self, chunk: int, posts: list[PostFields]) -> Counter[str]:
        await asyncio.sleep(0)
        outcome: Counter[str] = Counter()
        for post in posts:
            if post.text == self.failing_post_text:
                outcome["StoreError"] += 1
                continue
            self.done["posts"].append(post)
            outcome[OK] += 1
        if self.interrupt_after_posts is not None and len(self.done["posts"]) >= \
                self.interrupt_after_posts:
            self.interrupt_after_posts = None
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: stop sending, drain, record
            await asyncio.sleep(0.01)
        return outcome

    async def recover_posts(self, chunk: int, posts: list[PostFields]) -> list[PostFields]:
        self.recovered.append(chunk)
        landed = {p.text for p in self.done["posts"]}
        return [p for p in posts if p.text not in landed]

    def chunk_done(self, chunk: int) -> None:
        return None


def run(plan: SeedPlan, executor: Recording, state_path: Path | None,
        restart: bool = False) -> seed.SeedReport:
    return asyncio.run(seed.seed(URL, plan.graph, posts_per_user=plan.posts_per_user,
                                 seed_value=plan.seed_value, source=plan.source,
                                 executor=executor, state_path=state_path, restart=restart,
                                 show_progress=False))


def test_a_seeding_records_its_dataset_path_and_rates(tmp_path: Path) -> None:
    plan = plan_of()
    executor = Recording()
    report = run(plan, executor, tmp_path / "state.json")
    record = SeedState.read(tmp_path / "state.json")
    assert record is not None and record.complete and report.record == record
    assert record.path is SeedPath.BULK and record.target == URL
    assert record.dataset == plan.dataset()
    assert record.dataset.follows == 2 * len(plan.graph.edges) == len(executor.done["follows"])
    assert sorted(executor.done["users"]) == list(range(40))
    assert len(executor.done["posts"]) == record.dataset.posts
    assert all(phase.complete and phase.counts == {OK: phase.items}
               for phase in record.phases.values())
    # Run again: nothing is sent twice.
    again = Recording()
    report = run(plan, again, tmp_path / "state.json")
    assert report.already_done and not any(again.done.values())


def test_an_interrupted_seeding_goes_on_where_it_stopped(tmp_path: Path) -> None:
    plan = plan_of()
    state_path = tmp_path / "state.json"
    first = Recording(interrupt_after_posts=30)
    with pytest.raises(SeedInterrupted, match="the same command continues"):
        run(plan, first, state_path)
    record = SeedState.read(state_path)
    assert record is not None and not record.complete
    assert record.phases["users"].complete and record.phases["follows"].complete
    posts = record.phases["posts"]
    assert 0 < len(posts.done) < posts.chunks

    second = Recording()
    second.done["posts"] = list(first.done["posts"])  # what landed in the stores
    report = run(plan, second, state_path)
    assert report.resumed and report.record is not None and report.record.complete
    assert report.record.runs == 2
    assert not second.done["users"] and not second.done["follows"]
    # The unfinished chunks were recovered, and every post is there once.
    assert set(second.recovered) == set(posts.started)
    texts = Counter(p.text for p in second.done["posts"])
    assert len(texts) == plan.dataset().posts and set(texts.values()) == {1}
    assert report.counts["posts"][EXISTS] > 0


def test_a_chunk_that_failed_is_sent_again_by_the_next_run(tmp_path: Path) -> None:
    plan = plan_of()
    victim = plan.posts(1)[0]
    failing = Recording(failing_post_text=victim.text)
    report = run(plan, failing, tmp_path / "state.json")
    assert report.failures == 1 and report.record is not None
    assert not report.record.complete and 1 not in report.record.phases["posts"].done
    retry = Recording()
    retry.done["posts"] = list(failing.done["posts"])
    report = run(plan, retry, tmp_path / "state.json")
    assert report.record is not None and report.record.complete and report.failures == 0
    assert retry.recovered == [1]
    assert Counter(p.text for p in retry.done["posts"])[victim.text] == 1


def test_another_dataset_starts_over_and_another_path_is_refused(tmp_path: Path) -> None:
    state_path = tmp_path / "state.json"
    run(plan_of(), Recording(), state_path)
    other = Recording()
    run(plan_of(seed_value=6), other, state_path)  # another seed: another dataset
    assert len(other.done["users"]) == 40
    record = SeedState.read(state_path)
    assert record is not None and record.dataset.seed == 6
    # Half done with bulk: the api path may not take over.
    record.complete = False
    record.phases["posts"].done = []
    state_path.write_text(record.model_dump_json())
    api = Recording(path=SeedPath.API)
    with pytest.raises(seed.SeedError, match="--path bulk"):
        run(plan_of(seed_value=6), api, state_path)
    restarted = run(plan_of(seed_value=6), api, state_path, restart=True)
    assert restarted.record is not None and restarted.record.path is SeedPath.API


def test_a_ramp_on_a_seeded_local_stack_records_the_seeding(tmp_path: Path) -> None:
    from socialbench.stack.local import LocalStack
    from socialbench.workloads.runs.local import found_dataset

    stack = LocalStack(tmp_path)
    url = stack.config.url
    plan = plan_of("twitter:60:4")
    unknown = found_dataset(stack, url, 60)
    assert unknown.seeded is None and unknown.identity() is None
    asyncio.run(seed.seed(url, plan.graph, posts_per_user=plan.posts_per_user,
                          seed_value=plan.seed_value, source=plan.source, executor=Recording(),
                          state_path=seed.default_state_path(tmp_path), show_progress=False))
    dataset = found_dataset(stack, url, 60)
    assert dataset.seeded is not None and dataset.seeded.dataset == plan.dataset()
    assert dataset.path == "bulk" and not dataset.fresh
    assert dataset.identity() == ("twitter:60:4", 5, 3)
    # Another stack's front end: its data is not known here.
    assert found_dataset(stack, "http://127.0.0.1:1", 60).seeded is None
