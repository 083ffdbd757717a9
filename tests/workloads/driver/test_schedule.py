from __future__ import annotations

import itertools
import random
import statistics

import pytest

from socialbench.workloads.driver.config import Distribution, LoadConfig, Target, share
from socialbench.workloads.driver.schedule import Schedule


def test_constant_arrivals_are_evenly_spaced_without_drift() -> None:
    schedule = Schedule(3000, Distribution.CONSTANT, start_ns=10**12, rng=random.Random(1))
    times = [schedule.next() for _ in range(300_001)]
    assert times[0] == 10**12
    gaps = {b - a for a, b in itertools.pairwise(times)}
    assert gaps <= {333_333, 333_334}
    assert times[-1] - times[0] == 100 * 10**9  # 300,000 gaps of 1/3000 s, exactly


def test_processes_interleave_their_constant_arrivals() -> None:
    rate, processes = 1000, 2
    merged = sorted(
        t
        for index in range(processes)
        for t in _take(Schedule(rate / processes, Distribution.CONSTANT, 0, random.Random(),
                                phase_ns=index * 10**9 // rate), 500)
    )
    assert {b - a for a, b in itertools.pairwise(merged)} == {1_000_000}


def test_exponential_arrivals_have_the_rate_and_the_spread_of_a_poisson_process() -> None:
    schedule = Schedule(2000, Distribution.EXPONENTIAL, start_ns=0, rng=random.Random(5))
    times = _take(schedule, 100_001)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = statistics.fmean(gaps)
    assert abs(mean - 500_000) / 500_000 < 0.01
    assert abs(statistics.pstdev(gaps) / mean - 1) < 0.02  # coefficient of variation 1
    assert min(gaps) >= 0


def test_the_same_seed_gives_the_same_schedule() -> None:
    first = _take(Schedule(100, Distribution.EXPONENTIAL, 0, random.Random("s")), 50)
    again = _take(Schedule(100, Distribution.EXPONENTIAL, 0, random.Random("s")), 50)
    assert first == again


def test_connections_and_rate_split_evenly_across_processes() -> None:
    assert [share(10, 3, i) for i in range(3)] == [4, 3, 3]
    assert sum(share(64, 2, i) for i in range(2)) == 64


def test_targets_keep_the_authority_as_written_for_host_and_absolute_form() -> None:
    assert Target.parse("http://localhost:8080").authority == "localhost:8080"
    assert Target.parse("http://h/p?q=1").path == "/p?q=1"
    assert Target.parse("http://h").port == 80


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "https://x"}, "plain http://"),
        ({"url": "http://x", "connections": 1, "processes": 2}, "at least processes"),
        ({"url": "http://x", "connections": 8, "max_connections": 4}, "below connections"),
    ],
)
def test_a_config_that_cannot_run_is_refused_with_the_reason(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LoadConfig(rate=1, duration_s=1, **options)  # type: ignore[arg-type]


def _take(schedule: Schedule, n: int) -> list[int]:
    return [schedule.next() for _ in range(n)]
