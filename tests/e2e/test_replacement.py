"""The deleted-pod rule (tests/e2e/replacement.py) on timelines made up here: not e2e,
it needs no cluster."""

from __future__ import annotations

from tests.e2e.replacement import ReplacementWindow


def timeline(seconds: int, errors: dict[int, int]) -> list[tuple[int, int]]:
    return [(second, errors.get(second, 0)) for second in range(1, seconds + 1)]


# Issue 48's run: the pod deleted at 12 s, its replacement Ready 19 s later; errors in
# seconds 23-34, 13 of them in second 34.
SLOW = ReplacementWindow(deleted_s=12.0, ready_s=31.0)
SLOW_ERRORS = {23: 5, 24: 9, 25: 9, 26: 9, 27: 9, 28: 9, 29: 9, 30: 9, 31: 9, 32: 9,
               33: 9, 34: 13}


def test_a_slow_replacement_needs_a_longer_load_not_a_failure() -> None:
    assert SLOW.allowed_until_s == 35.0 and SLOW.load_until_s == 45.0
    # The load of a fixed 42 s ended inside what must be quiet: said so...
    (problem,) = SLOW.problems(timeline(42, SLOW_ERRORS))
    assert problem.startswith("the load ended at 42 s, before 45.0 s")
    # ...while the same errors in a load that went on to 45 s break nothing.
    assert SLOW.problems(timeline(45, SLOW_ERRORS)) == []
    assert SLOW.quiet_seconds(timeline(46, SLOW_ERRORS)) == list(range(36, 47))


def test_an_error_outside_the_window_fails_however_long_the_load() -> None:
    for second in (5, 12, 36, 50):  # before the deletion, its second, after Ready + 4 s
        (problem,) = SLOW.problems(timeline(60, {**SLOW_ERRORS, second: 1}))
        assert f"({second}, 1)" in problem and "outside 12.0-35.0 s" in problem
    # Second 13 is [12, 13): the deletion at 12.0 s is in it; second 35 ends at Ready + 4.
    assert SLOW.problems(timeline(60, {13: 1, 35: 1})) == []


def test_a_fast_replacement_and_no_error() -> None:
    fast = ReplacementWindow(deleted_s=12.4, ready_s=20.6)
    assert fast.problems(timeline(40, {})) == []
    assert fast.problems([]) == ["the load ended at 0 s, before 34.6 s (Ready 20.6 s + 4 s + "
                                 "10 s with no error)"]
