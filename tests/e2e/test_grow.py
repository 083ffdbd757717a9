"""``socialbench ramp --grow`` on a real stack of its own: seeded once, grown level by
level with the bulk path, a ramp at each, one bundle with the curve, the stores checked."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.growth import GROW_CSV, read_grow
from tests.e2e.support import stack_on_free_ports
from tests.support import socialbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    data_dir = tmp_path / "stack"
    with stack_on_free_ports(data_dir) as (_, url):
        yield data_dir, url


def test_the_ramp_runs_at_each_level_of_posts(own_stack: tuple[Path, str],
                                              tmp_path: Path) -> None:
    data_dir, url = own_stack
    results = tmp_path / "results"
    ran = socialbench(
        "ramp", url, "--grow", "200,400", "--fresh", "--graph", "twitter:300:5",
        "--data-dir", str(data_dir), "--results-dir", str(results), "--label", "g",
        "--start-rate", "20", "--step", "20", "--max-steps", "1", "--step-duration", "2s",
        "--warmup", "1s", "--pause", "0s", "--no-calibrate", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [directory] = results.glob("*-g-grow")
    record = read_grow(directory)
    assert record.manifest.levels == [200, 400]
    assert record.manifest.users == 300 and record.manifest.dataset.seeded is not None
    first, second = record.levels
    # Seeded without posts, then brought to each level; the first ramp's composes count.
    assert (first.grown, first.stored.posts) == (200, 200)
    assert second.stored.posts == 400 and second.grown <= 200
    assert second.stored.users == 300
    for level in record.levels:
        bundle = read_bundle(directory / level.bundle)
        assert bundle.manifest.dataset.note.endswith(f"grown to {level.stored.posts:,} posts "
                                                     "by ramp --grow")
        assert level.max_rate_rps == level.highest_passed_rps == level.start_rate_rps == 20.0
        assert level.start_cpu_ms_per_request is not None
        assert level.stored.post_read_indexed is not None
        assert level.stored.redis_used_memory_bytes > 0 and level.stored.mongodb_file_bytes > 0
        assert level.cache is not None and level.cache.get_hits + level.cache.get_misses > 0
        assert any("redis" in name for name in level.rss_bytes)
    # Only the last level's ramp checks the stores, and they hold whole posts.
    assert read_bundle(directory / first.bundle).summary.check is None
    check = read_bundle(directory / second.bundle).summary.check
    assert check is not None and check.passed, check
    with (directory / GROW_CSV).open() as file:
        assert [int(row["posts"]) for row in csv.DictReader(file)] == [200, 400]
    assert (directory / "max-rate-vs-posts.png").stat().st_size > 0
    assert "data:image/png;base64," in (directory / "report.html").read_text()
