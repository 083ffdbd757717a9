"""The sampled check's reads (workloads/check/sample.py) on real stores: what a
sample reads by indexed queries finds what the whole snapshot finds of its users."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pymongo
import pytest
import redis

from socialbench.stack.servers import ServerCommand, free_port, mongodb_command
from socialbench.workloads.check import contents as check
from socialbench.workloads.check.sample import (
    FIRST_CHUNK,
    USER_CHUNK,
    next_chunk,
    read_sample,
)
from tests.support import serving
from tests.workloads.check.test_check import Network, edge, kinds, random_network

REDIS_DB = 9


@pytest.fixture(scope="module")
def own_mongodb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A MongoDB-wire server of this module's own: the check reads fixed database names."""
    data = tmp_path_factory.mktemp("check-mongodb")
    yield from serving(mongodb_command(free_port(), data / "db"), data)


@pytest.fixture
def stores(own_mongodb: ServerCommand, redis_server: ServerCommand
           ) -> Iterator[check.StoreAddresses]:
    yield check.StoreAddresses(mongodb_url=f"mongodb://{own_mongodb.address}",
                               redis_url=f"redis://{redis_server.address}/{REDIS_DB}")
    clear(own_mongodb, redis_server)


def clear(mongodb: ServerCommand, redis_server: ServerCommand) -> None:
    with pymongo.MongoClient(f"mongodb://{mongodb.address}") as client:
        for name in ("post", "social-graph", "user-timeline", "user"):
            client.drop_database(name)
    client_r = redis.Redis.from_url(f"redis://{redis_server.address}/{REDIS_DB}")
    client_r.flushdb()
    client_r.close()


def store(net: Network, stores: check.StoreAddresses, users: range, *, cached: bool,
          lost: dict[int, set[int]] | None = None) -> None:
    """Write ``net`` as the services lay it out; ``lost``: user -> posts left out of its
    home timeline. ``cached``: Redis holds every user timeline (and says so)."""
    with pymongo.MongoClient(stores.mongodb_url) as client:
        client["user"]["user"].insert_many([{"user_id": u} for u in users])
        client["post"]["post"].insert_many([dict(p) for p in net.posts])
        client["post"]["post"].create_index("post_id", unique=True)
        graph = client["social-graph"]
        graph["social-graph"].insert_many([edge(a, b, at) for (a, b), at in net.edges.items()])
        graph["social-graph"].create_index([("follower_id", 1), ("followee_id", 1)])
        if net.ended:
            graph["ended-follows"].insert_many([dict(e) for e in net.ended])
        timeline = client["user-timeline"]["user-timeline"]
        timeline.insert_many([dict(e) for e in net.entries])
        timeline.create_index([("user_id", 1), ("timestamp", -1)])
    client_r = redis.Redis.from_url(stores.redis_url)
    try:
        for user, zset in net.home.items():
            kept = {m: s for m, s in zset if int(m) not in (lost or {}).get(user, set())}
            if kept:
                client_r.zadd(check.home_timeline_key(user), kept)
        if cached:
            for entry in net.entries:
                client_r.zadd(str(entry["user_id"]), {str(entry["post_id"]): entry["timestamp"]})
            client_r.set(check.ALL_WHOLE, 1)
    finally:
        client_r.close()


def sampled(stores: check.StoreAddresses, size: int, seed: int) -> check.CheckResult:
    snapshot = read_sample(stores, check.Sampling(users=size, seed=seed))
    assert snapshot is not None and snapshot.sample is not None
    return check.analyse(snapshot)


@pytest.mark.parametrize("cached", [True, False])
def test_every_sample_of_a_consistent_world_passes(stores: check.StoreAddresses,
                                                   cached: bool) -> None:
    net = random_network(40)
    net.unfollow(1, next(b for (a, b) in net.edges if a == 1), at=10**13)
    store(net, stores, range(1, 41), cached=cached)
    for seed in range(8):
        result = sampled(stores, 10, seed)
        assert result.passed, result.reason
        assert result.sample is not None and (result.sample.size, result.users) == (10, 10)
        assert result.sample.population == 40
    every = read_sample(stores, check.Sampling(users=40))
    assert every is None  # the whole population: the full check's reads


SEEDS = range(120)


@pytest.mark.parametrize("affected", [1, 3])
def test_the_sampled_check_finds_a_planted_missing_post_with_the_probability_it_claims(
        stores: check.StoreAddresses, affected: int) -> None:
    """A post lost from the home timelines of ``affected`` users is found exactly when the
    sample holds one of them, and about as often as the sample claims."""
    net = random_network(40)
    losers = [3, 17, 29][:affected]
    lost = {user: {max(int(m) for m, _ in net.home[user])} for user in losers}
    store(net, stores, range(1, 41), cached=True, lost=lost)
    found = 0
    for seed in SEEDS:
        result = sampled(stores, 10, seed)
        assert result.sample is not None
        hit = [u for u in losers if u in check.Sample.draw(set(range(1, 41)), 10, seed).users]
        assert set(result.counts) <= {check.MISSING_FROM_HOME}
        assert {(p.user_id, p.post_id) for p in result.problems} == {
            (u, next(iter(lost[u]))) for u in hit}
        found += not result.passed
    claimed = result.sample.p_found(affected)
    assert claimed == pytest.approx(1 - math.comb(40 - affected, 10) / math.comb(40, 10))
    spread = 4 * math.sqrt(claimed * (1 - claimed) / len(SEEDS))
    assert abs(found / len(SEEDS) - claimed) < spread, (found, claimed)


def test_a_lost_mention_is_found_from_its_authors_side(stores: check.StoreAddresses) -> None:
    net = Network()
    net.follow(2, 1, check.DEFAULT_FOLLOW_SLACK_MS)
    mention = net.compose(1, 10**12, mentions=(3,))  # 3 does not follow 1
    store(net, stores, range(1, 5), cached=False, lost={3: {mention}})
    author_sampled = next(s for s in range(100)
                          if check.Sample.draw({1, 2, 3, 4}, 1, s).users == {1})
    result = sampled(stores, 1, author_sampled)
    assert kinds(result) == {check.MISSING_FROM_HOME: [(3, mention)]}


def test_a_followees_post_not_stored_is_a_leftover_not_a_loss(
        stores: check.StoreAddresses) -> None:
    """A user timeline listing a post that is not stored (an undone compose, its home
    entries removed): its absence from a follower's home timeline is no problem."""
    net = random_network(40)
    gone: dict[str, Any] = net.posts.pop()
    author = int(gone["creator"]["user_id"])
    followers = [a for (a, b) in net.edges if b == author]
    store(net, stores, range(1, 41), cached=True,
          lost={user: {gone["post_id"]} for user in followers})
    seed = next(s for s in range(200)
                if followers[0] in check.Sample.draw(set(range(1, 41)), 10, s).users)
    result = sampled(stores, 10, seed)
    assert result.passed, result.reason


def test_the_sample_fills_its_time_budget_or_is_every_user(
        stores: check.StoreAddresses) -> None:
    store(random_network(40), stores, range(1, 41), cached=True)
    assert read_sample(stores, check.Sampling()) is None  # small: the full check
    snapshot = read_sample(stores, check.Sampling(home_entries=10, budget_s=0.0, seed=2))
    assert snapshot is not None and snapshot.sample is not None
    assert snapshot.sample.size == FIRST_CHUNK  # the first chunk, then the budget is spent
    assert check.analyse(snapshot).passed
    snapshot = read_sample(stores, check.Sampling(home_entries=10, budget_s=60.0, seed=2))
    assert snapshot is not None and snapshot.sample is not None
    assert snapshot.sample.size == 40


def test_a_budgeted_samples_chunks_fit_what_is_left_of_the_budget_at_the_rate_so_far() -> None:
    assert next_chunk(taken=10, reading_s=5.0, left_s=20.0) == 40
    assert next_chunk(taken=10, reading_s=5.0, left_s=0.4) == 0  # not one user more fits
    assert next_chunk(taken=10, reading_s=0.01, left_s=50.0) == USER_CHUNK
    assert next_chunk(taken=10, reading_s=0.0, left_s=50.0) == USER_CHUNK
    assert next_chunk(taken=10, reading_s=5.0, left_s=0.0) == 0
