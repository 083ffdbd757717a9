"""The SLA ramp as the data grows: ``socialbench ramp --grow 10k,100k,1M``.

For each level, in order, the stores are brought up to that many posts (the CLI adds the
missing ones with the seeder's bulk path: workloads/definitions/grow.py), what they hold
is measured, and a whole ramp runs. One bundle holds them all::

    results/<UTC time>-<label>-grow/
      grow.json           the manifest (what was grown, how, on what data and machine) and
                          one record per level: posts and users stored, the ramp's answer,
                          the stores' figures
      grow.csv            one row per level
      max-rate-vs-posts.png, report.html   the curve
      levels/<UTC time>-<label>-<posts>-posts/   each level's ramp bundle, as any ramp's

:func:`run_levels` is the order of things, given what grows and measures; it knows
neither the stack nor the CLI.
"""

from __future__ import annotations

import csv
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from socialbench.workloads.ramp.bundle import Bundle, Dataset, RunHeader, Strict, read_bundle
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.ramp.memory import MemoryRecord

SCHEMA_VERSION = 1
GROW_JSON = "grow.json"
GROW_CSV = "grow.csv"
LEVELS_DIR = "levels"
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


class StoreFigures(Strict):
    """What the stores held and how they were doing, measured on the stack."""

    posts: int = Field(description="Posts in post-storage's MongoDB collection.")
    users: int = Field(description="Users in user's MongoDB collection.")
    mongodb_file_bytes: int = Field(description="The MongoDB server's data files on disk "
                                                "(FerretDB: its SQLite files and their WAL).")
    redis_used_memory_bytes: int = Field(description="used_memory of every redis-server.")
    redis_keys: int = Field(description="Keys of every redis-server (timelines, cached graph).")
    post_read_indexed: bool | None = Field(
        description="post-storage's read of posts missing from memcached (find post_id $in) "
                    "searched an index, by the server's explain; None: it did not say.")
    post_read_plan: str = Field(description="The explain's plan, shortened.")


class CacheCounters(Strict):
    """memcached's counters (every instance's, added), or their growth over a ramp."""

    get_hits: int
    get_misses: int
    evictions: int
    bytes: int = Field(description="Bytes it held (at the end, for a growth).")
    limit_bytes: int

    def since(self, before: CacheCounters) -> CacheCounters:
        return CacheCounters(get_hits=self.get_hits - before.get_hits,
                             get_misses=self.get_misses - before.get_misses,
                             evictions=self.evictions - before.evictions,
                             bytes=self.bytes, limit_bytes=self.limit_bytes)

    @property
    def hit_ratio(self) -> float | None:
        gets = self.get_hits + self.get_misses
        return self.get_hits / gets if gets else None


class GrowLevel(Strict):
    """One level: the posts added, what the stores held, and the ramp's answer there."""

    level: int = Field(description="Posts asked for (--grow).")
    grown: int = Field(description="Posts composed to reach it (0: already there).")
    grow_s: float = Field(description="Time those took.")
    stored: StoreFigures = Field(description="The stores as the ramp began.")
    bundle: str = Field(description="The level's ramp bundle, relative to this one.")
    max_rate_rps: float | None
    p99_ms: float | None
    cpu_ms_per_request: float | None = Field(description="Stack CPU per request at that rate.")
    comparable: bool
    stop_reason: str | None
    highest_passed_rps: float | None = Field(
        description="The highest rate whose step held the SLA (ramp, refinement or "
                    "confirmation): the max rate before a failed confirmation.", default=None)
    start_rate_rps: float | None = Field(
        description="The first step's rate: the same at every level, so its figures are "
                    "comparable where the max rates differ.", default=None)
    start_p99_ms: float | None = None
    start_cpu_ms_per_request: float | None = None
    cache: CacheCounters | None = Field(description="memcached over the ramp.")
    memcached_hit_ratio: float | None = Field(description="Its gets that hit, over the ramp.")
    rss_bytes: dict[str, int] = Field(
        description="Peak RSS of each component during the step the answer comes from.")
    interrupted: bool = False
    host_calibration: Calibration | None = Field(
        default=None, description="The host's speed before the level's first step (fixed "
                                  "work, workloads/ramp/calibration.py): the levels' ramps "
                                  "ran minutes apart on a host whose speed drifts.")

    def host_speed(self, first: GrowLevel) -> float | None:
        """The host's speed at this level's start against ``first``'s (1.2: a fifth faster)."""
        if self.host_calibration is None or first.host_calibration is None:
            return None
        return self.host_calibration.speed_relative_to(first.host_calibration)


class GrowManifest(RunHeader):
    """What was grown and how, and what ran."""

    schema_version: int = SCHEMA_VERSION
    hardware: dict[str, Any]
    software: dict[str, Any]
    levels: list[int]
    how: str = Field(description="How the posts were added.")
    users: int = Field(description="Users the posts are composed by (the seeded graph's).")
    seed: int = Field(description="Seed of the added posts.")
    dataset: Dataset = Field(description="The data as the growth began.")
    memory: MemoryRecord | None = Field(
        default=None, description="The stack's memory projected for the largest level.")


class GrowRecord(Strict):
    """grow.json."""

    manifest: GrowManifest
    levels: list[GrowLevel] = Field(default_factory=list)


@dataclass(frozen=True)
class LevelRamp:
    """A level's ramp, as the CLI ran it: its bundle, and memcached around it."""

    directory: Path
    cache_before: CacheCounters | None
    cache_after: CacheCounters | None
    interrupted: bool


def level_record(level: int, grown: int, grow_s: float, stored: StoreFigures,
                 ramp: LevelRamp, root: Path) -> GrowLevel:
    """A level's record from its ramp's bundle."""
    bundle = read_bundle(ramp.directory)
    summary = bundle.summary
    best = summary.best
    cache = (ramp.cache_after.since(ramp.cache_before)
             if ramp.cache_after is not None and ramp.cache_before is not None else None)
    steps = bundle.steps_of(bundle.reference_repeat)
    first = steps[0] if steps else None
    passed = [step.offered_rps for step in bundle.steps if step.passed]
    return GrowLevel(
        level=level, grown=grown, grow_s=grow_s, stored=stored,
        bundle=str(ramp.directory.relative_to(root)),
        max_rate_rps=summary.max_rate_rps, p99_ms=summary.p99_ms,
        cpu_ms_per_request=best.cpu_ms_per_request if best else None,
        comparable=summary.comparable,
        stop_reason=summary.stop_reason.value if summary.stop_reason else None,
        highest_passed_rps=max(passed) if passed else None,
        start_rate_rps=first.offered_rps if first else None,
        start_p99_ms=first.latency_ms["99"] if first else None,
        start_cpu_ms_per_request=first.resources.cpu_ms_per_request if first else None,
        cache=cache, memcached_hit_ratio=cache.hit_ratio if cache else None,
        rss_bytes=_answer_rss(bundle), interrupted=ramp.interrupted,
        host_calibration=summary.host_calibration_start)


def _answer_rss(bundle: Bundle) -> dict[str, int]:
    best = bundle.summary.best
    if best is None:
        return {}
    for step in bundle.steps_of(bundle.summary.best_repeat):
        if step.name == best.step:
            return {c.name: c.peak_rss_bytes for c in step.resources.components}
    return {}


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


CSV_COLUMNS = (
    "level", "posts", "users", "grown", "grow_s", "max_rate_rps", "p99_ms",
    "cpu_ms_per_request", "comparable", "stop_reason", "highest_passed_rps",
    "start_rate_rps", "start_p99_ms", "start_cpu_ms_per_request", "memcached_hit_ratio",
    "memcached_evictions", "memcached_bytes", "redis_used_memory_bytes", "redis_keys",
    "mongodb_file_bytes", "post_read_indexed", "redis_rss_bytes", "mongodb_rss_bytes",
    "memcached_rss_bytes", "services_rss_bytes", "host_speed", "bundle",
)


def rss_of(level: GrowLevel, kind: str) -> int:
    """The RSS of a kind of component (mongodb, redis, memcached; services: the rest)."""
    stores = ("mongodb", "redis", "memcached")

    def of_kind(name: str) -> bool:
        if kind in stores:
            return kind in name
        return not any(store in name for store in stores)

    return sum(rss for name, rss in level.rss_bytes.items() if of_kind(name))


def csv_row(level: GrowLevel, first: GrowLevel | None = None) -> dict[str, Any]:
    stored, cache = level.stored, level.cache
    row: dict[str, Any] = {
        "level": level.level, "posts": stored.posts, "users": stored.users,
        "grown": level.grown, "grow_s": round(level.grow_s, 1),
        "max_rate_rps": level.max_rate_rps, "p99_ms": level.p99_ms,
        "cpu_ms_per_request": level.cpu_ms_per_request, "comparable": level.comparable,
        "stop_reason": level.stop_reason, "highest_passed_rps": level.highest_passed_rps,
        "start_rate_rps": level.start_rate_rps, "start_p99_ms": level.start_p99_ms,
        "start_cpu_ms_per_request": level.start_cpu_ms_per_request,
        "memcached_hit_ratio": level.memcached_hit_ratio,
        "memcached_evictions": cache.evictions if cache else None,
        "memcached_bytes": cache.bytes if cache else None,
        "redis_used_memory_bytes": stored.redis_used_memory_bytes,
        "redis_keys": stored.redis_keys, "mongodb_file_bytes": stored.mongodb_file_bytes,
        "post_read_indexed": stored.post_read_indexed,
        **{f"{kind}_rss_bytes": rss_of(level, kind)
           for kind in ("redis", "mongodb", "memcached", "services")},
        "host_speed": level.host_speed(first or level),
        "bundle": level.bundle,
    }
    return {key: "" if row[key] is None else row[key] for key in CSV_COLUMNS}


class GrowWriter:
    """Writes grow.json and grow.csv as each level ends, and the plot and report at the end."""

    def __init__(self, directory: Path, manifest: GrowManifest) -> None:
        self.directory = directory
        self.record = GrowRecord(manifest=manifest)
        directory.mkdir(parents=True, exist_ok=False)
        (directory / LEVELS_DIR).mkdir()
        self._write()

    @property
    def levels_dir(self) -> Path:
        return self.directory / LEVELS_DIR

    def add(self, level: GrowLevel) -> None:
        self.record.levels.append(level)
        self._write()

    def _write(self) -> None:
        path = self.directory / GROW_JSON
        path.with_suffix(".tmp").write_text(self.record.model_dump_json(indent=2))
        path.with_suffix(".tmp").replace(path)
        with (self.directory / GROW_CSV).open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            levels = self.record.levels
            writer.writerows(csv_row(level, levels[0]) for level in levels)


def read_grow(directory: Path) -> GrowRecord:
    return GrowRecord.model_validate_json((directory / GROW_JSON).read_bytes())
