"""The stack's memory projected from the measured figures, and the warning before a run
that would not fit (workloads/probes/memory.py)."""

from __future__ import annotations

import psutil

from socialbench.workloads.probes import memory
from socialbench.workloads.probes.memory import (
    GROWTH,
    MEASURED_FANOUT,
    MemoryRecord,
    cache_warning,
    composed_at_most,
    memory_warning,
    project,
)


def test_the_projection_grows_with_the_data_and_memcached_stops_at_its_limit() -> None:
    empty = project(0, 0, 0)
    assert empty == {kind: growth.empty for kind, growth in GROWTH.items()}
    small, large = project(100_000, 4_000_000, 100_000), project(100_000, 4_000_000, 1_000_000)
    assert all(large[kind] >= small[kind] >= empty[kind] for kind in GROWTH)
    assert large["redis"] - small["redis"] > 5 * GROWTH["redis"].per_100k_posts
    capped = project(100_000, 4_000_000, 1_000_000, memcached_limit=64 * memory.MiB)
    assert capped["memcached"] == GROWTH["memcached"].empty + 64 * memory.MiB
    assert capped["redis"] == large["redis"]


def test_a_wider_fan_out_costs_redis_more() -> None:
    at_measured = project(100_000, 0, 1_000_000, fanout=MEASURED_FANOUT)
    wider = project(100_000, 0, 1_000_000, fanout=4 * MEASURED_FANOUT)
    assert wider["redis"] > 3 * at_measured["redis"] - 3 * GROWTH["redis"].empty
    assert wider["mongodb"] == at_measured["mongodb"]


def test_a_run_that_does_not_fit_is_warned_of_and_one_that_does_is_not() -> None:
    assert memory_warning(1_000, 10_000, 1_000) is None
    total = psutil.virtual_memory().total
    posts = int(2 * total / (GROWTH["redis"].per_100k_posts / 100_000))
    warning = memory_warning(100_000, 4_000_000, posts, what="the planned data")
    assert warning is not None
    assert warning.startswith("the planned data would need about")
    assert "redis" in warning and memory.MEASURED_AT in warning


def test_a_ramp_composes_a_tenth_of_its_mixed_requests() -> None:
    assert composed_at_most("mixed", [100.0, 200.0], 10.0) == 300
    assert composed_at_most("compose-post", [100.0], 10.0) == 1000
    assert composed_at_most("read-home-timeline", [100.0], 10.0) == 0


def test_the_record_carries_the_figures_and_the_projection() -> None:
    record = MemoryRecord.of(100_000, 4_000_000, 1_000_000, stack_rss=1)
    assert record.growth["redis"]["per_100k_posts"] == GROWTH["redis"].per_100k_posts
    assert record.projected == project(100_000, 4_000_000, 1_000_000)
    assert record.machine_bytes == psutil.virtual_memory().total and record.stack_bytes == 1
    assert MemoryRecord.model_validate_json(record.model_dump_json()) == record


def test_a_memcached_smaller_than_its_posts_is_warned_of_with_the_size_that_holds_them() -> None:
    gib = 1024 * memory.MiB
    assert cache_warning(10_000, 100_000, memcached_limit=gib) is None
    assert cache_warning(10_000, 1_000_000, memcached_limit=None) is None
    warning = cache_warning(10_000, 1_000_000, memcached_limit=gib)
    assert warning is not None and "of the 1,000,000 posts" in warning
    held = int(warning.split("holds about ", 1)[1].split(" of", 1)[0].replace(",", ""))
    assert 600_000 < held < 660_000  # 1 GiB at 161 MiB per 100k posts, less the users'
    size_mb = int(warning.rsplit("--memcached-memory ", 1)[1].split("`", 1)[0])
    assert cache_warning(10_000, 1_000_000, memcached_limit=size_mb * memory.MiB) is None
    # A pool of 3: each instance's share.
    pooled = cache_warning(10_000, 1_000_000, memcached_limit=3 * 128 * memory.MiB, instances=3)
    assert pooled is not None
    each_mb = int(pooled.rsplit("--memcached-memory ", 1)[1].split("`", 1)[0])
    assert each_mb * 3 >= size_mb - 3 * 256 and cache_warning(
        10_000, 1_000_000, memcached_limit=3 * each_mb * memory.MiB, instances=3) is None
