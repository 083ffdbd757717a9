"""The records of the SLA ramp as the data grows (``socialbench ramp --grow 10k,100k,1M``).

For each level, in order, the stores are brought up to that many posts (the CLI adds the
missing ones with the seeder's bulk path: workloads/seeding/add_posts.py), what they hold
is measured, and a whole ramp runs. One bundle holds them all::

    results/<UTC time>-<label>-grow/
      grow.json           the manifest (what was grown, how, on what data and machine) and
                          one record per level: posts and users stored, the ramp's answer,
                          the stores' figures
      grow.csv            one row per level
      max-rate-vs-posts.png, report.html   the curve
      levels/<UTC time>-<label>-<posts>-posts/   each level's ramp bundle, as any ramp's

The levels' order is socialbench.workloads.runs.grow_levels.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from socialbench.workloads.probes.memory import MemoryRecord
from socialbench.workloads.probes.records import CacheCounters, StoreFigures, Strict
from socialbench.workloads.ramp.calibration import Calibration
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import Bundle, Dataset, RunHeader

SCHEMA_VERSION = 1
GROW_JSON = "grow.json"
GROW_CSV = "grow.csv"
LEVELS_DIR = "levels"


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
