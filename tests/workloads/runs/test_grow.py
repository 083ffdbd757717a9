"""``ramp --grow``'s levels: parsing, what is added before each, the order of things, and
the records' figures."""

from __future__ import annotations

import pytest

from socialbench.stack.store_stats import read_plan
from socialbench.workloads.probes.records import CacheCounters, StoreFigures
from socialbench.workloads.results.growth import GrowLevel, csv_row, rss_of
from socialbench.workloads.runs.grow_levels import parse_levels, posts_to_add, run_levels
from socialbench.workloads.seeding.add_posts import AUTHOR_RUN, grown_post


def test_levels_are_counts_of_posts_with_k_and_m() -> None:
    assert parse_levels("10000,100000,1000000") == [10_000, 100_000, 1_000_000]
    assert parse_levels("10k, 100K,1M") == [10_000, 100_000, 1_000_000]
    assert parse_levels("2.5k") == [2_500]


@pytest.mark.parametrize("text", ["", "10k,", "ten", "100,50", "10k,10000", "0", "1G", "-5"])
def test_levels_that_are_not_rising_counts_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_levels(text)


def test_only_the_missing_posts_are_added() -> None:
    assert posts_to_add(0, 10_000) == 10_000
    assert posts_to_add(4_036, 10_000) == 5_964
    assert posts_to_add(12_000, 10_000) == 0  # a ramp's composes went past it: none removed


def figures(posts: int) -> StoreFigures:
    return StoreFigures(posts=posts, users=100, mongodb_file_bytes=1, redis_used_memory_bytes=2,
                        redis_keys=3, post_read_indexed=True, post_read_plan="SEARCH")


def level(posts: int, grown: int, last: bool, interrupted: bool = False) -> GrowLevel:
    return GrowLevel(level=posts, grown=grown, grow_s=0.0, stored=figures(posts),
                     bundle=f"levels/{posts}-{last}", max_rate_rps=100.0, p99_ms=5.0,
                     cpu_ms_per_request=2.0, comparable=True, stop_reason="max-steps",
                     highest_passed_rps=100.0, start_rate_rps=50.0, start_p99_ms=3.0,
                     start_cpu_ms_per_request=2.5,
                     cache=None, memcached_hit_ratio=None,
                     rss_bytes={"redis": 10, "mongodb": 20, "memcached": 30, "nginx": 4,
                                "home-timeline": 5},
                     interrupted=interrupted)


def test_each_level_counts_then_adds_what_is_missing_then_measures() -> None:
    stored = [150]  # the posts in the stores; each ramp composes 30 more
    calls: list[tuple[str, int, int]] = []

    def add(first: int, count: int) -> None:
        calls.append(("add", first, count))
        stored[0] += count

    def measure(posts: int, grown: int, seconds: float, last: bool) -> GrowLevel:
        calls.append(("ramp", stored[0], grown))
        stored[0] += 30
        return level(posts, grown, last)

    seen: list[GrowLevel] = []
    done = run_levels([100, 200, 230, 1000], count_posts=lambda: stored[0], add_posts=add,
                      measure=measure, on_level=seen.append)
    assert calls == [("ramp", 150, 0),  # already above the first level: measured as is
                     ("add", 180, 20), ("ramp", 200, 20),
                     ("ramp", 230, 0),  # the ramp at 200 composed 30 posts: 230 stored
                     ("add", 260, 740), ("ramp", 1000, 740)]
    assert [r.bundle for r in done] == ["levels/100-False", "levels/200-False",
                                        "levels/230-False", "levels/1000-True"]
    assert seen == done


def test_an_interrupted_ramp_ends_the_growth() -> None:
    added: list[int] = []
    done = run_levels([10, 20, 30], count_posts=lambda: 0,
                      add_posts=lambda first, count: added.append(count),
                      measure=lambda posts, grown, s, last: level(posts, grown, last,
                                                                  interrupted=posts == 20),
                      on_level=lambda record: None)
    assert [r.level for r in done] == [10, 20]
    assert added == [10, 20]


def test_a_rows_memory_is_split_into_stores_and_the_rest() -> None:
    record = level(1000, 10, True)
    assert [rss_of(record, kind) for kind in ("redis", "mongodb", "memcached", "services")] == [
        10, 20, 30, 9]
    row = csv_row(record)
    assert row["posts"] == 1000 and row["services_rss_bytes"] == 9
    assert row["memcached_hit_ratio"] == ""  # unknown, not 0


def test_memcached_over_a_ramp_is_the_counters_growth() -> None:
    before = CacheCounters(get_hits=100, get_misses=50, evictions=1, bytes=10, limit_bytes=99)
    after = CacheCounters(get_hits=190, get_misses=60, evictions=4, bytes=20, limit_bytes=99)
    ramp = after.since(before)
    assert (ramp.get_hits, ramp.get_misses, ramp.evictions, ramp.bytes) == (90, 10, 3, 20)
    assert ramp.hit_ratio == pytest.approx(0.9)
    assert before.since(before).hit_ratio is None


def test_grown_posts_are_drawn_from_the_seed_and_their_index_in_author_runs() -> None:
    assert grown_post(1, 12_345, 500) == grown_post(1, 12_345, 500)
    assert grown_post(1, 12_345, 500) != grown_post(2, 12_345, 500)
    authors = [grown_post(1, k, 3).user_id for k in range(4 * AUTHOR_RUN)]
    assert authors == [0] * AUTHOR_RUN + [1] * AUTHOR_RUN + [2] * AUTHOR_RUN + [0] * AUTHOR_RUN
    assert all(f"@username_{grown_post(1, k, 3).user_id} " not in grown_post(1, k, 3).text + " "
               for k in range(30))  # no author mentions itself


def test_an_explain_says_whether_the_read_searched_an_index() -> None:
    ferretdb = {"queryPlanner": {"Plan": ["id=24 detail=SEARCH post_1 USING INDEX "
                                          "post_1_post_id_1 (<expr>=?)"]}}
    assert read_plan(ferretdb)[0] is True
    scanned = {"queryPlanner": {"Plan": ["id=2 detail=SCAN post_1"]}}
    assert read_plan(scanned) == (False, "id=2 detail=SCAN post_1")
    mongod = {"queryPlanner": {"winningPlan": {"stage": "FETCH",
                                               "inputStage": {"stage": "IXSCAN"}}}}
    assert read_plan(mongod)[0] is True
    assert read_plan({"queryPlanner": {"winningPlan": {"stage": "COLLSCAN"}}})[0] is False
    assert read_plan({"ok": 1})[0] is None
