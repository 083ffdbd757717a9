"""Exclusive time by service from hand-built span trees: overlapping children, nesting,
missing parents, and the step window."""

from __future__ import annotations

import itertools

import pytest

from socialbench.workloads.probes.spans import (
    NS_PER_MS,
    Part,
    Span,
    exclusive_ns,
    latency_by_service,
    percentile,
    trace_times,
    union_ns,
)

_ids = itertools.count(1)
MS = NS_PER_MS


def span(trace: bytes, parent: Span | None, service: str, start_ms: float, end_ms: float,
         *, name: str = "op", server: bool = True, store: str | None = None,
         callee: str | None = None, base_ns: int = 0) -> Span:
    return Span(trace_id=trace, span_id=next(_ids).to_bytes(8, "big"),
                parent_id=parent.span_id if parent else b"", service=service, name=name,
                server=server, start_ns=base_ns + int(start_ms * MS),
                end_ns=base_ns + int(end_ms * MS), store=store, callee=callee)


def home_read(trace: bytes, base_ns: int = 0, busy_ms: float = 2.0) -> list[Span]:
    """home-timeline (10 + busy ms) reading post ids from Redis [1, 4] while it calls
    post-storage [3, 8] (overlapping); post-storage's own span [4, 7] holds a memcached
    call [5, 6]."""
    end = 10 + busy_ms
    root = span(trace, None, "home-timeline", 0, end, name="GET /wrk2-api/home-timeline/read",
                base_ns=base_ns)
    redis = span(trace, root, "home-timeline", 1, 4, server=False, store="redis",
                 base_ns=base_ns)
    rpc = span(trace, root, "home-timeline", 3, 8, server=False, callee="post-storage",
               base_ns=base_ns)
    served = span(trace, rpc, "post-storage", 4, 7, base_ns=base_ns)
    memcached = span(trace, served, "post-storage", 5, 6, server=False, store="memcached",
                     base_ns=base_ns)
    return [root, redis, rpc, served, memcached]


def test_the_union_counts_overlaps_once_and_clips_to_the_parent() -> None:
    assert union_ns([(1, 4), (3, 8)], 0, 10) == 7
    assert union_ns([(3, 8), (1, 4), (2, 3)], 0, 10) == 7  # any order, nested
    assert union_ns([(1, 2), (5, 6)], 0, 10) == 2  # disjoint
    assert union_ns([(-5, 2), (9, 15)], 0, 10) == 3  # outside the parent: clipped
    assert union_ns([], 0, 10) == 0


def test_concurrent_children_are_taken_out_once() -> None:
    parent = span(b"t", None, "compose-post", 0, 10)
    # Three RPCs gathered at once, 1-6, 2-7 and 3-5 ms, then a store call 8-9 ms.
    children = [span(b"t", parent, "compose-post", a, b, server=False, callee="x")
                for a, b in ((1, 6), (2, 7), (3, 5))]
    children.append(span(b"t", parent, "compose-post", 8, 9, server=False, store="redis"))

    assert exclusive_ns(parent, children) == (10 - 6 - 1) * MS


def test_a_trace_adds_up_by_service_store_and_rpc_wait() -> None:
    times = trace_times(home_read(b"t"))

    assert times is not None
    assert times.endpoint == "GET /wrk2-api/home-timeline/read"
    assert times.parts == {
        ("home-timeline", Part.SERVICE): (12 - 7) * MS,  # 12 less the union [1, 8]
        ("redis", Part.STORE): 3 * MS,
        ("rpc to post-storage", Part.RPC): (5 - 3) * MS,  # [3, 8] less [4, 7]
        ("post-storage", Part.SERVICE): (3 - 1) * MS,
        ("memcached", Part.STORE): 1 * MS,
    }


def test_a_service_called_twice_in_a_trace_adds_both_calls() -> None:
    root = span(b"t", None, "compose-post", 0, 20, name="POST /wrk2-api/post/compose")
    spans = [root]
    for start in (2, 10):
        rpc = span(b"t", root, "compose-post", start, start + 6, server=False, callee="text")
        spans += [rpc, span(b"t", rpc, "text", start + 1, start + 5)]

    times = trace_times(spans)

    assert times is not None
    assert times.parts[("text", Part.SERVICE)] == 8 * MS
    assert times.parts[("compose-post", Part.SERVICE)] == 8 * MS


@pytest.mark.parametrize("drop", [0, 2, 3], ids=["root", "rpc", "callee"])
def test_a_trace_with_a_missing_parent_or_no_root_is_not_whole(drop: int) -> None:
    spans = home_read(b"t")
    del spans[drop]

    assert trace_times(spans) is None


def test_a_trace_with_two_roots_is_not_whole() -> None:
    spans = [*home_read(b"t"), span(b"t", None, "user", 0, 1)]

    assert trace_times(spans) is None


def test_nearest_rank_percentiles() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7], 99) == 7
    assert percentile([3, 1, 2], 50) == 2


def test_a_step_tables_the_whole_traces_that_started_in_its_window() -> None:
    second = 1_000_000_000
    inside = [home_read(bytes([i]), base_ns=second + i * 10 * MS, busy_ms=i) for i in range(10)]
    before = home_read(b"early", base_ns=second - 50 * MS)  # in the warm-up: not this step
    after = home_read(b"late", base_ns=2 * second)  # the window is [start, end)
    torn = home_read(b"torn", base_ns=second + 5 * MS)[1:]  # its root never arrived
    compose_root = span(b"c", None, "compose-post", 0, 4, name="POST /wrk2-api/post/compose",
                        base_ns=second)

    table = latency_by_service([*inside, before, after, torn, [compose_root]],
                               second, 2 * second)

    assert (table.traces, table.incomplete) == (11, 1)
    home, compose = table.endpoints  # by name
    assert (compose.endpoint, compose.traces) == ("POST /wrk2-api/post/compose", 1)
    assert [(p.name, p.p50_ms) for p in compose.parts] == [("compose-post", 4.0)]
    assert home.traces == 10
    by_name = {part.name: part for part in home.parts}
    # home-timeline's own time is 3 + busy ms, busy 0..9: median 7, p99 (nearest rank) 12.
    assert (by_name["home-timeline"].p50_ms, by_name["home-timeline"].p99_ms) == (7.0, 12.0)
    assert by_name["home-timeline"].kind is Part.SERVICE and by_name["redis"].kind is Part.STORE
    assert by_name["post-storage"].p50_ms == by_name["post-storage"].p99_ms == 2.0
    assert all(part.traces == 10 for part in home.parts)
    assert home.parts[0].name == "home-timeline"  # the largest share of the mean first


def test_a_part_slow_in_one_trace_of_ten_is_not_the_largest() -> None:
    """Ordered by the share of the mean: mongodb, 20 ms in one trace of ten, is 2 ms of the
    mean; home-timeline's own 3 ms in every trace is 3 ms of it. The shares add up to the
    mean latency."""
    traces = [home_read(bytes([i]), base_ns=i * 100 * MS, busy_ms=0) for i in range(1, 10)]
    slow = home_read(b"\x00", busy_ms=20)  # its root is [0, 30]: a MongoDB read fills [10, 30]
    slow.append(span(b"\x00", slow[0], "home-timeline", 10, 30, server=False, store="mongodb"))

    (home,) = latency_by_service([slow, *traces], 0, 10 * 100 * MS).endpoints
    by_name = {part.name: part for part in home.parts}
    assert (by_name["mongodb"].traces, by_name["mongodb"].p50_ms) == (1, 20.0)
    assert by_name["home-timeline"].p50_ms == 3.0
    assert by_name["mongodb"].mean_ms == pytest.approx(2.0)
    assert by_name["home-timeline"].mean_ms == pytest.approx(3.0)
    assert home.parts[0].name == "home-timeline"
    # Each trace's parts sum to 11 ms (Redis and the RPC overlap by 1 ms), the slow one's 31.
    assert sum(p.share_ms for p in home.parts) == pytest.approx((31 + 9 * 11) / 10)


def test_an_untraced_step_has_an_empty_table() -> None:
    table = latency_by_service([], 0, 10)
    assert (table.traces, table.incomplete, table.endpoints) == (0, 0, [])
