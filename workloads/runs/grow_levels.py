"""The levels of ``socialbench ramp --grow``: which, and in what order they are grown and
measured. :func:`run_levels` is given what grows and measures; it knows neither the stack
nor the CLI (the records are in socialbench.workloads.results.growth)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Sequence

from socialbench.workloads.results.growth import GrowLevel

_SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_levels(text: str) -> list[int]:
    """``10000,100000,1000000`` or ``10k,100k,1M``: posts stored at each level, rising."""
    levels = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not a number of posts (e.g. 10000 or 10k)")
        levels.append(int(float(match[1]) * _SUFFIXES[match[2].lower()]))
    if any(level < 1 for level in levels):
        raise ValueError("each level is at least one post")
    if any(b <= a for a, b in itertools.pairwise(levels)):
        raise ValueError(f"levels must rise: {text}")
    return levels


def posts_to_add(stored: int, level: int) -> int:
    """Posts to compose to bring ``stored`` to ``level`` (none once there or above: posts
    are never taken away, and a ramp's own composes count)."""
    return max(0, level - stored)


def run_levels(levels: Sequence[int], *, count_posts: Callable[[], int],
               add_posts: Callable[[int, int], None],
               measure: Callable[[int, int, float, bool], GrowLevel],
               on_level: Callable[[GrowLevel], None]) -> list[GrowLevel]:
    """Each level in turn: count the posts stored, add ``posts_to_add`` of them
    (``add_posts(stored, count)``), then ``measure(level, grown, seconds, last)``; stop
    after a level whose ramp was interrupted."""
    done = []
    for index, level in enumerate(levels):
        stored = count_posts()
        grown = posts_to_add(stored, level)
        started = time.monotonic()
        if grown:
            add_posts(stored, grown)
        record = measure(level, grown, time.monotonic() - started, index == len(levels) - 1)
        done.append(record)
        on_level(record)
        if record.interrupted:
            break
    return done
