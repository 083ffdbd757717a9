"""``socialbench check`` against the running stack: a small graph of its own, seeded through
the front end, checked untouched, then with problems planted in the real stores (and undone).

The session stack is shared: these users have ids of their own (a range no other test
uses) and every check here is restricted to them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pymongo
import pytest
import redis

from socialbench.cli.check import local_stores
from socialbench.stack.local import LocalStack
from socialbench.workloads.check import contents as check
from socialbench.workloads.check import run
from socialbench.workloads.check.contents import CheckResult, StoreAddresses
from socialbench.workloads.seeding.seed import FORM, follow_bodies, register_body
from tests.support import socialbench

pytestmark = pytest.mark.e2e

FIRST = 9_100_000  # user ids of this module's graph
USERS = 12
POSTS_PER_USER = 2


@dataclass
class Seeded:
    stores: StoreAddresses
    users: set[int]
    posts: dict[int, int]  # post id -> creator

    def check(self) -> CheckResult:
        return run.check(self.stores, self.users)

    def home(self, user: int) -> list[tuple[bytes, float]]:
        """The user's home timeline as Redis holds it, newest first."""
        with redis.Redis.from_url(self.stores.redis_url) as client:
            entries: list[tuple[bytes, float]] = client.zrevrange(
                check.home_timeline_key(user), 0, -1, withscores=True)
        return entries


@pytest.fixture(scope="module")
def seeded(base_url: str, stack_dir: Path) -> Seeded:
    """12 users in a ring, each following the next two both ways; two posts each, with
    mentions of a user they do not follow."""
    users = list(range(FIRST, FIRST + USERS))
    edges = [(users[i], users[(i + step) % USERS]) for i in range(USERS) for step in (1, 2)]
    rng = random.Random(5)
    with httpx.Client(base_url=base_url, headers=FORM, timeout=30) as client:
        for user in users:
            response = client.post("/wrk2-api/user/register", content=register_body(user))
            assert response.status_code == 200, response.text
        for body in follow_bodies(edges):
            response = client.post("/wrk2-api/user/follow", content=body)
            assert response.status_code == 200, response.text
        for index, user in enumerate(users * POSTS_PER_USER):
            mentioned = users[(users.index(user) + 5 + index % 2) % USERS]
            text = f"post {index} of {user} @username_{mentioned} {rng.randbytes(4).hex()}"
            body = (f"username=username_{user}&user_id={user}&text={text}"
                    f'&media_ids=["{index}"]&media_types=["png"]&post_type=0')
            response = client.post("/wrk2-api/post/compose", content=body)
            assert response.status_code == 200, response.text
    stores = local_stores(LocalStack(stack_dir))
    with pymongo.MongoClient(stores.mongodb_url) as mongo:
        posts = {int(p["post_id"]): int(p["creator"]["user_id"])
                 for p in mongo["post"]["post"].find({}, {"post_id": 1, "creator": 1})
                 if int(p["creator"]["user_id"]) in set(users)}
    assert len(posts) == USERS * POSTS_PER_USER
    return Seeded(stores, set(users), posts)


def only_problem(result: CheckResult) -> tuple[str, int | None, int | None]:
    """The one problem the check found: its kind, user and post."""
    assert not result.passed, "the check found nothing"
    assert result.total == 1, result.counts
    [problem] = [p for p in result.problems if not p.tolerated]
    return problem.kind, problem.user_id, problem.post_id


@contextmanager
def redis_client(seeded: Seeded) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(seeded.stores.redis_url)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def posts_collection(seeded: Seeded) -> Iterator[Any]:
    with pymongo.MongoClient(seeded.stores.mongodb_url) as mongo:
        yield mongo["post"]["post"]


def test_the_untouched_graph_passes(seeded: Seeded) -> None:
    result = seeded.check()
    assert result.passed, result.reason
    assert (result.posts, result.users) == (USERS * POSTS_PER_USER, USERS)
    assert result.counts == {} and result.tolerated == {}
    # Each user gets the posts of the four it follows and those mentioning it.
    assert result.home_timeline_entries >= USERS * 4 * POSTS_PER_USER
    assert result.elapsed_s < 30


def test_the_command_passes_and_says_so_last(seeded: Seeded, stack_dir: Path) -> None:
    run = socialbench("check", "--data-dir", str(stack_dir),
                      "--users", f"{FIRST}-{FIRST + USERS - 1}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("Check passed")


def test_a_post_removed_from_a_home_timeline_is_found(seeded: Seeded) -> None:
    user = FIRST + 3
    member, score = seeded.home(user)[0]
    with redis_client(seeded) as client:
        client.zrem(check.home_timeline_key(user), member)
        try:
            assert only_problem(seeded.check()) == (check.MISSING_FROM_HOME, user, int(member))
        finally:
            client.zadd(check.home_timeline_key(user), {member: score})
    assert seeded.check().passed


def test_a_duplicate_entry_is_found_and_the_command_fails_naming_it(
    seeded: Seeded, stack_dir: Path
) -> None:
    user = FIRST + 7
    member, score = seeded.home(user)[2]
    duplicate = b"0" + member  # another member naming the same post
    with redis_client(seeded) as client:
        client.zadd(check.home_timeline_key(user), {duplicate: score})
        try:
            assert only_problem(seeded.check()) == (check.HOME_DUPLICATE, user, int(member))
            run = socialbench("check", "--data-dir", str(stack_dir),
                              "--users", f"{FIRST}-{FIRST + USERS - 1}")
        finally:
            client.zrem(check.home_timeline_key(user), duplicate)
    assert run.returncode == 1, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("Check FAILED") and f"user {user}, post {int(member)}" in last
    assert seeded.check().passed


def test_a_wrong_order_is_found(seeded: Seeded) -> None:
    user = FIRST
    entries = seeded.home(user)
    (_, newest), (oldest, score) = entries[0], entries[-1]
    with redis_client(seeded) as client:
        # The oldest post scored as the newest: read first, out of order.
        client.zadd(check.home_timeline_key(user), {oldest: newest + 1000})
        try:
            assert only_problem(seeded.check()) == (check.HOME_ORDER, user, int(oldest))
        finally:
            client.zadd(check.home_timeline_key(user), {oldest: score})
    assert seeded.check().passed


def test_a_post_missing_its_text_is_found(seeded: Seeded) -> None:
    post_id, creator = sorted(seeded.posts.items())[5]
    with posts_collection(seeded) as posts:
        text = posts.find_one({"post_id": post_id})["text"]
        posts.update_one({"post_id": post_id}, {"$unset": {"text": ""}})
        try:
            result = seeded.check()
            assert only_problem(result) == (check.INCOMPLETE_POST, creator, post_id)
            assert "text" in result.problems[0].detail
        finally:
            posts.update_one({"post_id": post_id}, {"$set": {"text": text}})
    assert seeded.check().passed


# ---------------------------------------------------------------- follows that end

# Outside the ring: LEFT unfollows FOLLOWEE for good, as in issue 29.
FOLLOWER, FOLLOWEE, STEADY, LEFT = FIRST + 500, FIRST + 600, FIRST + 700, FIRST + 800


@dataclass
class Unfollowed:
    """FOLLOWER followed FOLLOWEE, unfollowed and followed again, a post between each."""

    stores: StoreAddresses
    before: dict[str, Any]  # FOLLOWEE's posts, as the home timelines read them
    between: dict[str, Any]
    after: dict[str, Any]

    def check(self, **options: Any) -> CheckResult:
        return run.check(self.stores, {FOLLOWER, FOLLOWEE, STEADY, LEFT}, **options)


@contextmanager
def logged_in(base_url: str, user: int) -> Iterator[httpx.Client]:
    """A client with the login cookie of ``user``, as the web pages have."""
    with httpx.Client(base_url=base_url, headers=FORM, timeout=30) as client:
        response = client.post("/api/user/login",
                               content=f"username=username_{user}&password=password_{user}")
        assert response.status_code == 302, response.text
        yield client


def web_post(client: httpx.Client, path: str, body: str) -> None:
    response = client.post(path, content=body)
    assert response.status_code == 200, (path, response.text)


def web_home(client: httpx.Client) -> list[dict[str, Any]]:
    response = client.get("/api/home-timeline/read", params={"start": 0, "stop": 10})
    assert response.status_code == 200, response.text
    posts: list[dict[str, Any]] = response.json()
    return posts


@pytest.fixture(scope="module")
def unfollowed(base_url: str, stack_dir: Path) -> Unfollowed:
    """Through the web pages' API: STEADY follows FOLLOWEE throughout; FOLLOWER (and
    LEFT) follow, FOLLOWEE composes, FOLLOWER (and LEFT) unfollow, FOLLOWEE composes,
    FOLLOWER follows again, FOLLOWEE composes."""
    with httpx.Client(base_url=base_url, headers=FORM, timeout=30) as client:
        for user in (FOLLOWER, FOLLOWEE, STEADY, LEFT):
            response = client.post("/wrk2-api/user/register", content=register_body(user))
            assert response.status_code == 200, response.text
    with logged_in(base_url, FOLLOWER) as follower, logged_in(base_url, FOLLOWEE) as author, \
            logged_in(base_url, STEADY) as steady, logged_in(base_url, LEFT) as left:
        web_post(steady, "/api/user/follow", f"followee_id={FOLLOWEE}")
        web_post(follower, "/api/user/follow", f"followee_name=username_{FOLLOWEE}")
        web_post(left, "/api/user/follow", f"followee_id={FOLLOWEE}")
        web_post(author, "/api/post/compose", "text=while followed&post_type=0")
        web_post(follower, "/api/user/unfollow", f"followee_id={FOLLOWEE}")
        web_post(left, "/api/user/unfollow", f"followee_name=username_{FOLLOWEE}")
        web_post(author, "/api/post/compose", "text=while not followed&post_type=0")
        web_post(follower, "/api/user/follow", f"followee_id={FOLLOWEE}")
        web_post(author, "/api/post/compose", "text=followed again&post_type=0")
        after, before = web_home(follower)  # newest first
        posts = {post["text"]: post for post in web_home(steady)}
        assert [post["text"] for post in web_home(left)] == ["while followed"]
    assert (before["text"], after["text"]) == ("while followed", "followed again")
    assert set(posts) == {"while followed", "while not followed", "followed again"}
    return Unfollowed(local_stores(LocalStack(stack_dir)), before, posts["while not followed"],
                      after)


def test_posts_kept_after_an_unfollow_and_a_refollow_pass(
    unfollowed: Unfollowed, stack_dir: Path
) -> None:
    result = unfollowed.check()
    assert result.passed, result.reason
    assert result.ended_follows >= 2
    run = socialbench("check", "--data-dir", str(stack_dir),
                      "--users", f"{FOLLOWER},{FOLLOWEE},{STEADY},{LEFT}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("Check passed")


def test_the_unfollow_is_kept_as_an_ended_follow(unfollowed: Unfollowed) -> None:
    with pymongo.MongoClient(unfollowed.stores.mongodb_url) as mongo:
        [ended] = mongo["social-graph"]["ended-follows"].find(
            {"follower_id": FOLLOWER, "followee_id": FOLLOWEE})
        [current] = mongo["social-graph"]["social-graph"].find(
            {"follower_id": FOLLOWER, "followee_id": FOLLOWEE})
    posted = [int(unfollowed.before["timestamp"]), int(unfollowed.between["timestamp"]),
              int(unfollowed.after["timestamp"])]
    # Each request was answered before the next was sent.
    assert ended["followed_at"] <= posted[0] <= ended["unfollowed_at"] < posted[1]
    assert posted[1] < current["timestamp"] <= posted[2]


def test_a_post_lost_from_a_home_timeline_after_a_refollow_is_found(
    unfollowed: Unfollowed
) -> None:
    key = check.home_timeline_key(FOLLOWER)
    post_id = int(unfollowed.after["post_id"])
    with redis.Redis.from_url(unfollowed.stores.redis_url) as client:
        assert client.zrem(key, post_id) == 1
        try:
            assert only_problem(unfollowed.check()) == (check.MISSING_FROM_HOME, FOLLOWER,
                                                         post_id)
        finally:
            client.zadd(key, {str(post_id): int(unfollowed.after["timestamp"])})
    assert unfollowed.check().passed


def test_without_slack_the_follow_intervals_are_exact(unfollowed: Unfollowed) -> None:
    """No slack: the post made while following is required, the one between not allowed
    (each request was answered before the next was sent)."""
    assert unfollowed.check(follow_slack_ms=0).passed
    key = check.home_timeline_key(FOLLOWER)
    before, between = int(unfollowed.before["post_id"]), int(unfollowed.between["post_id"])
    with redis.Redis.from_url(unfollowed.stores.redis_url) as client:
        client.zrem(key, before)
        client.zadd(key, {str(between): int(unfollowed.between["timestamp"])})
        try:
            result = unfollowed.check(follow_slack_ms=0)
        finally:
            client.zrem(key, between)
            client.zadd(key, {str(before): int(unfollowed.before["timestamp"])})
    assert {(p.kind, p.user_id, p.post_id) for p in result.problems} == {
        (check.MISSING_FROM_HOME, FOLLOWER, before),
        (check.UNEXPECTED_IN_HOME, FOLLOWER, between)}
    assert unfollowed.check(follow_slack_ms=0).passed


def test_the_command_checks_the_sample_it_names(seeded: Seeded, stack_dir: Path) -> None:
    """The stack's other tests leave what they like in it: the verdict is theirs."""
    lines = []
    for _ in range(2):
        run = socialbench("check", "--data-dir", str(stack_dir), "--sample", "3", "--seed", "5")
        assert run.returncode in (0, 1), run.stdout + run.stderr
        [line] = [line for line in run.stdout.splitlines() if line.startswith("Sampled")]
        lines.append(line)
    assert lines[0] == lines[1]
    assert lines[0].startswith("Sampled a random 3 of ") and "(seed 5)" in lines[0]
    run = socialbench("check", "--data-dir", str(stack_dir), "--sample", "3", "--full")
    assert run.returncode == 2 and "no --sample" in run.stderr


def test_a_snapshot_keeps_the_post_documents_unless_compact(seeded: Seeded) -> None:
    """Other readers (bench/drills.py) find posts by their text; the check needs less."""
    texts = {str(post.get("text")) for post in check.read_snapshot(seeded.stores).posts}
    assert any(text.startswith(f"post 0 of {FIRST} ") for text in texts)
    compact = check.read_snapshot(seeded.stores, compact=True)
    assert set(seeded.posts) <= {facts.post_id for facts in compact.post_facts}
