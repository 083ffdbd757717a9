"""The store check's logic on snapshots made by hand, and its place in a ramp's bundle."""

from __future__ import annotations

import io
import json
import math
import random
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console

from socialbench.workloads.check import contents as check
from socialbench.workloads.check import run
from socialbench.workloads.check.contents import CheckResult, Snapshot, analyse
from socialbench.workloads.reports.ramp_report import render_html
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.workloads.conftest import CapacityServer, small_ramp

T = 1_700_000_000_000  # a post time, ms


def post(post_id: int, creator: int, at: int, mentions: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"post_id": post_id, "creator": {"user_id": str(creator), "username": f"u{creator}"},
            "text": "hello", "media": [{"media_id": "1", "media_type": "png"}],
            "user_mentions": [{"user_id": str(m), "username": f"u{m}"} for m in mentions],
            "timestamp": str(at)}


def edge(follower: int, followee: int, at: int = T - 1000) -> dict[str, Any]:
    return {"follower_id": follower, "followee_id": followee, "timestamp": at}


def world() -> Snapshot:
    """Users 1, 2, 3: 2 and 3 follow 1; 1 follows 2; post 10 by 1, post 11 by 2 mentions 3."""
    posts = [post(10, 1, T), post(11, 2, T + 5, mentions=(3,))]
    entries = [{"user_id": 1, "post_id": 10, "timestamp": T},
               {"user_id": 2, "post_id": 11, "timestamp": T + 5}]
    return Snapshot(
        posts=posts, edges=[edge(2, 1), edge(3, 1), edge(1, 2)], user_entries=entries,
        user_zsets={1: [(check.WHOLE, float("-inf")), (b"10", T)], 2: [(b"11", T + 5)]},
        home_zsets={1: [(b"11", T + 5)], 2: [(b"10", T)],
                    3: [(b"10", T), (b"11", T + 5)]},
        all_whole=False,
    )


def kinds(result: CheckResult) -> dict[str, list[tuple[int | None, int | None]]]:
    found: dict[str, list[tuple[int | None, int | None]]] = {}
    for problem in result.problems:
        found.setdefault(problem.kind, []).append((problem.user_id, problem.post_id))
    return found


def test_a_consistent_world_passes() -> None:
    result = analyse(world())
    assert result.passed, result.reason
    assert (result.posts, result.users, result.counts, result.tolerated) == (2, 3, {}, {})


def test_each_broken_promise_is_found_with_its_user_and_post() -> None:
    snapshot = world()
    snapshot.home_zsets[3] = [(b"11", T + 5)]  # post 10 removed from 3's home timeline
    snapshot.home_zsets[2] = [(b"10", T), (b"010", T)]  # a duplicate
    snapshot.home_zsets[1] = [(b"11", 0)]  # scored so that it reads as the oldest
    del snapshot.posts[1]["media"]
    snapshot.user_entries.append({"user_id": 1, "post_id": 10, "timestamp": T})
    result = analyse(snapshot)
    assert not result.passed
    assert kinds(result) == {
        check.MISSING_FROM_HOME: [(3, 10)],
        check.HOME_DUPLICATE: [(2, 10)],
        check.HOME_ORDER: [(1, 11)],
        check.INCOMPLETE_POST: [(2, 11)],
        check.USER_TIMELINE_DUPLICATE: [(1, 10)],
    }
    assert result.counts == {kind: 1 for kind in kinds(result)}
    assert "problems" in result.reason and "user" in result.reason


def test_a_post_of_someone_not_followed_is_unexpected_and_own_posts_are_not_fanned_out() -> None:
    snapshot = world()
    snapshot.home_zsets[1].append((b"10", T))  # its own post
    snapshot.posts.append(post(12, 3, T + 9))  # by 3, whom nobody follows
    snapshot.user_entries.append({"user_id": 3, "post_id": 12, "timestamp": T + 9})
    snapshot.home_zsets[2].append((b"12", T + 9))
    result = analyse(snapshot)
    assert kinds(result) == {check.UNEXPECTED_IN_HOME: [(1, 10), (2, 12)]}


def test_a_follow_after_the_post_may_or_may_not_have_got_it() -> None:
    snapshot = world()
    snapshot.edges.append(edge(3, 2, at=T + 100))  # 3 follows 2 just after post 11
    snapshot.home_zsets[2] = []  # nor 2, 1's follower, has post 10 any more…
    snapshot.edges.append(edge(2, 3, at=T + 10**6))  # …and a late follow changes nothing
    assert kinds(analyse(snapshot)) == {check.MISSING_FROM_HOME: [(2, 10)]}
    late = world()
    late.edges.append(edge(1, 3, at=T + 10**6))  # 1 follows 3 long after post…
    late.posts.append(post(13, 3, T))
    late.user_entries.append({"user_id": 3, "post_id": 13, "timestamp": T})
    late.home_zsets[1].append((b"13", T))  # …yet has 3's older post
    assert kinds(analyse(late)) == {check.UNEXPECTED_IN_HOME: [(1, 13)]}
    assert analyse(late, follow_slack_ms=10**7).passed


MINUTE = 60_000


class Network:
    """What the services leave in the stores, event by event: a follow adds an edge, an
    unfollow moves it to the ended follows, a compose fans out to the followers then."""

    def __init__(self) -> None:
        self.edges: dict[tuple[int, int], int] = {}  # (follower, followee) -> since
        self.ended: list[dict[str, Any]] = []
        self.posts: list[dict[str, Any]] = []
        self.entries: list[dict[str, Any]] = []
        self.home: dict[int, list[tuple[bytes, float]]] = {}
        self.post_ids = iter(range(100, 10**6))

    def follow(self, follower: int, followee: int, at: int) -> None:
        self.edges.setdefault((follower, followee), at)

    def unfollow(self, follower: int, followee: int, at: int) -> None:
        since = self.edges.pop((follower, followee), None)
        if since is not None:
            self.ended.append({"follower_id": follower, "followee_id": followee,
                               "followed_at": since, "unfollowed_at": at})

    def compose(self, creator: int, at: int, mentions: tuple[int, ...] = ()) -> int:
        post_id = next(self.post_ids)
        self.posts.append(post(post_id, creator, at, mentions))
        self.entries.append({"user_id": creator, "post_id": post_id, "timestamp": at})
        followers = {f for (f, followee) in self.edges if followee == creator}
        for recipient in (followers | set(mentions)) - {creator}:
            self.home.setdefault(recipient, []).append((str(post_id).encode(), at))
        return post_id

    def snapshot(self) -> Snapshot:
        return Snapshot(
            posts=list(self.posts),
            edges=[edge(a, b, at) for (a, b), at in self.edges.items()],
            user_entries=list(self.entries), user_zsets={},
            home_zsets={user: list(zset) for user, zset in self.home.items()},
            all_whole=False, ended_follows=list(self.ended))

    def home_of(self, user: int) -> set[int]:
        return {int(member) for member, _ in self.home.get(user, [])}


def test_posts_of_a_follow_stay_after_an_unfollow_and_a_refollow_gets_new_ones() -> None:
    net = Network()
    net.follow(1, 2, T)
    net.follow(3, 2, T)
    before = net.compose(2, T + 10 * MINUTE)
    net.unfollow(1, 2, T + 20 * MINUTE)
    between = net.compose(2, T + 30 * MINUTE)
    mentioned = net.compose(2, T + 35 * MINUTE, mentions=(1,))
    net.follow(1, 2, T + 40 * MINUTE)
    after = net.compose(2, T + 50 * MINUTE)
    assert net.home_of(1) == {before, mentioned, after}
    assert net.home_of(3) == {before, between, mentioned, after}
    result = analyse(net.snapshot())
    assert result.passed, result.reason
    assert (result.edges, result.ended_follows) == (2, 1)

    planted = net.snapshot()  # the post made while unfollowed, delivered anyway
    planted.home_zsets[1].append((str(between).encode(), T + 30 * MINUTE))
    assert kinds(analyse(planted)) == {check.UNEXPECTED_IN_HOME: [(1, between)]}
    for lost in (before, after):  # a post of either follow, lost
        snapshot = net.snapshot()
        snapshot.home_zsets[1] = [e for e in snapshot.home_zsets[1] if int(e[0]) != lost]
        assert kinds(analyse(snapshot)) == {check.MISSING_FROM_HOME: [(1, lost)]}


@pytest.mark.parametrize("seed", range(20))
def test_follows_and_unfollows_interleaved_with_composes(seed: int) -> None:
    """Random follows, unfollows (and re-follows) and composes among five users: the
    check passes, and finds any one post taken out of a home timeline."""
    rng = random.Random(seed)
    net = Network()
    users = range(1, 6)
    at = T
    for _ in range(60):
        at += rng.randrange(2, 20) * MINUTE  # events further apart than the slack
        a, b = rng.sample(users, 2)
        action = rng.choice(["follow", "unfollow", "compose", "compose"])
        if action == "follow":
            net.follow(a, b, at)
        elif action == "unfollow":
            net.unfollow(a, b, at)
        else:
            net.compose(a, at, mentions=(b,) if rng.random() < 0.2 else ())
    assert net.ended, "the seed made no unfollow"
    result = analyse(net.snapshot())
    assert result.passed, result.reason
    user = rng.choice([u for u in users if net.home.get(u)])
    lost_member, _ = rng.choice(net.home[user])
    snapshot = net.snapshot()
    snapshot.home_zsets[user].remove(next(e for e in snapshot.home_zsets[user]
                                          if e[0] == lost_member))
    assert kinds(analyse(snapshot)) == {check.MISSING_FROM_HOME: [(user, int(lost_member))]}


@pytest.mark.parametrize(("unfollowed_after_post", "delivered", "verdict"), [
    (-2 * MINUTE, True, check.UNEXPECTED_IN_HOME),  # unfollowed long before the post
    (-2 * MINUTE, False, None),
    (-MINUTE // 2, True, None),  # within the slack: the fan-out may have seen the follow
    (-MINUTE // 2, False, None),
    (MINUTE // 2, True, None),  # or may have read the followers after the unfollow
    (MINUTE // 2, False, None),
    (2 * MINUTE, True, None),  # long after the post: the fan-out saw the follow
    (2 * MINUTE, False, check.MISSING_FROM_HOME),
])
def test_an_unfollow_near_a_post_may_or_may_not_have_kept_it_out(
    unfollowed_after_post: int, delivered: bool, verdict: str | None
) -> None:
    net = Network()
    post_id = net.compose(2, T)
    net.ended.append({"follower_id": 1, "followee_id": 2, "followed_at": T - 10 * MINUTE,
                      "unfollowed_at": T + unfollowed_after_post})
    net.home[1] = [(str(post_id).encode(), T)] if delivered else []
    found = kinds(analyse(net.snapshot(), follow_slack_ms=MINUTE))
    assert found == ({} if verdict is None else {verdict: [(1, post_id)]})


def random_network(users: int, seed: int = 3) -> Network:
    """``users`` users following five others each, two posts each, some mentions."""
    rng = random.Random(seed)
    net = Network()
    ids = range(1, users + 1)
    for user in ids:
        for followee in rng.sample([u for u in ids if u != user], 5):
            net.follow(user, followee, T)
    for index in range(2 * users):
        net.compose(rng.choice(ids), T + (index + 1) * MINUTE,
                    mentions=(rng.choice(ids),) if index % 7 == 0 else ())
    return net


def lose_a_post(snapshot: Snapshot, user: int) -> int:
    """Take the newest post out of ``user``'s home timeline; its id."""
    member, _ = snapshot.home_zsets[user].pop()
    return int(member)


SEEDS = range(400)


@pytest.mark.parametrize("affected", [1, 3])
def test_a_sample_finds_lost_posts_with_the_probability_it_claims(affected: int) -> None:
    """Over fixed seeds: a post lost from the home timelines of ``affected`` users is found
    exactly when the sample holds one of them, and about as often as claimed."""
    net = random_network(40)
    snapshot = net.snapshot()
    losers = [3, 17, 29][:affected]
    for user in losers:
        lose_a_post(snapshot, user)
    population = snapshot.known_users()
    assert len(population) == 40
    found = 0
    for seed in SEEDS:
        snapshot.sample = check.Sample.draw(population, 10, seed)
        result = analyse(snapshot)
        assert set(result.counts) <= {check.MISSING_FROM_HOME}
        assert result.passed == snapshot.sample.users.isdisjoint(losers)
        assert result.sample == snapshot.sample and result.users == 10
        found += not result.passed
    claimed = snapshot.sample.p_found(affected)
    assert claimed == pytest.approx(1 - math.comb(40 - affected, 10) / math.comb(40, 10))
    spread = 4 * math.sqrt(claimed * (1 - claimed) / len(SEEDS))
    assert abs(found / len(SEEDS) - claimed) < spread, (found, claimed)


def test_every_sample_of_a_consistent_world_passes_and_says_what_it_checked() -> None:
    snapshot = random_network(40).snapshot()
    snapshot.sample = check.Sample.draw(snapshot.known_users(), 10, seed=1)
    result = analyse(snapshot)
    assert result.passed, result.reason
    assert result.scope.startswith("a random 10 of 40 users (seed 1): a problem of one user "
                                   "is found with probability 25.0%")
    assert "sample" in result.model_dump() and "users" not in result.model_dump()["sample"]
    assert check.Sample.draw(snapshot.known_users(), 10, seed=1).users == snapshot.sample.users


def test_leftovers_of_undone_composes_are_counted_but_tolerated() -> None:
    snapshot = world()
    snapshot.home_zsets[3].append((b"99", T + 7))  # a post deleted by an undo
    snapshot.user_entries.append({"user_id": 1, "post_id": 98, "timestamp": T + 8})
    snapshot.posts.append(post(97, 1, T + 9))  # stored after its delete: in no timeline
    result = analyse(snapshot)
    assert result.passed, result.reason
    assert result.tolerated == {check.DANGLING_HOME: 1, check.DANGLING_USER_TIMELINE: 1,
                                check.ORPHAN_POST: 1}
    assert "tolerated" in result.reason


def test_the_user_timeline_cache_must_agree_with_mongodb() -> None:
    snapshot = world()
    snapshot.user_zsets[1] = [(check.WHOLE, float("-inf"))]  # whole, yet without post 10
    snapshot.user_zsets[2].append((b"10", T))  # a post of 1 cached in 2's timeline
    assert kinds(analyse(snapshot)) == {check.USER_TIMELINE_CACHE: [(1, 10), (2, 10)]}
    snapshot.user_zsets[1] = []  # no marker and no flag: a partial cache is fine
    snapshot.user_zsets[2].pop()
    assert analyse(snapshot).passed
    snapshot.all_whole = True  # the flag: Redis has every timeline
    assert kinds(analyse(snapshot)) == {check.USER_TIMELINE_CACHE: [(1, 10)]}


def test_a_restricted_check_looks_at_those_users_only() -> None:
    snapshot = world()
    snapshot.home_zsets[3] = []
    result = analyse(snapshot, {1, 2})
    assert result.passed and result.users == 2 and result.scope == "users 1, 2"
    assert kinds(analyse(snapshot, {3})) == {check.MISSING_FROM_HOME: [(3, 10), (3, 11)]}


def test_examples_are_limited_per_kind_but_all_are_counted() -> None:
    snapshot = world()
    snapshot.home_zsets = {}
    result = analyse(snapshot, limit=1)
    assert result.counts == {check.MISSING_FROM_HOME: 4}
    assert len(result.problems) == 1


def test_the_layout_is_the_services() -> None:
    from socialbench.services import home_timeline, user_timeline

    assert check.WHOLE == user_timeline.WHOLE and check.ALL_WHOLE == user_timeline.ALL_WHOLE
    assert check.home_timeline_key(7) == home_timeline.timeline_key(7)


def test_unreachable_stores_fail_with_the_reason() -> None:
    stores = check.StoreAddresses(mongodb_url="mongodb://127.0.0.1:1",
                                  redis_url="redis://127.0.0.1:1/0")
    result = run.check(stores, timeout_s=0.5)
    assert not result.passed and result.error is not None
    assert result.reason.startswith("the check did not run: cannot read the stores")


# ---------------------------------------------------------------- in a ramp's bundle


@pytest.fixture(scope="module")
def checked_ramp(capacity_server: CapacityServer, tmp_path_factory: pytest.TempPathFactory
                 ) -> RampReport:
    """A one-step ramp whose check hook finds a problem."""
    entries = [{"user_id": 1, "post_id": 10, "timestamp": T}]
    failed = analyse(Snapshot([post(10, 1, T)], [edge(2, 1)], entries, {}, {}, False))
    config = small_ramp(capacity_server.url, max_steps=1, step_duration_s=1.0, warmup_s=0.2)
    job = RampJob(
        config=config, label="checked", results_dir=tmp_path_factory.mktemp("results"),
        sampler=lambda: (None, "not sampled"), resources_source="none",
        dataset=Dataset(fresh=False, users=962), mongodb_server="mongod",
        check=lambda: failed,
    )
    return execute(job, Console(file=io.StringIO(), width=200))


def test_the_ramp_puts_the_check_in_its_summary_and_report(checked_ramp: RampReport) -> None:
    summary = read_bundle(checked_ramp.directory).summary
    assert summary.check is not None and not summary.check.passed
    assert summary.check.counts == {check.MISSING_FROM_HOME: 1}
    html = checked_ramp.report.read_text()
    assert 'class="check failed"' in html
    assert "missing_from_home_timeline: user 2, post 10" in html


def test_a_bundle_without_a_check_reports_none(checked_ramp: RampReport, tmp_path: Path
                                               ) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(checked_ramp.directory, copy)
    data = json.loads((copy / "summary.json").read_text())
    del data["check"]  # a bundle written before the check existed
    (copy / "summary.json").write_text(json.dumps(data))
    bundle = read_bundle(copy)
    assert bundle.summary.check is None
    assert 'id="check"' not in render_html(bundle, [])


def test_a_check_that_raises_is_recorded_as_not_run(
    capacity_server: CapacityServer, tmp_path: Path
) -> None:
    from socialbench.workloads.ramp.engine import RampOutcome
    from socialbench.workloads.runs.ramp_job import run_check

    def broken() -> CheckResult:
        raise RuntimeError("boom")

    job = RampJob(config=small_ramp(capacity_server.url), label="x", results_dir=tmp_path,
                  sampler=lambda: (None, ""), resources_source="", mongodb_server="",
                  dataset=Dataset(fresh=False, users=2), check=broken)
    result = run_check(job, RampOutcome(runs=[]))
    assert result is not None and not result.passed
    assert result.reason == "the check did not run: RuntimeError: boom"
    interrupted = cast(RampOutcome, SimpleNamespace(interrupted=True))
    assert run_check(job, interrupted) is None
