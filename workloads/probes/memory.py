"""The stack's resident memory as its data grows, and a warning before a run outgrows it.

:data:`GROWTH` holds each kind of process's resident memory (RSS) on the local stack:
empty, and what it adds per 100,000 users, per million follows and per 100,000 posts
(measured: docs/data-at-scale.md, "Memory per 100k users and posts"). :func:`project`
adds up a planned dataset's; :func:`memory_warning` compares that with the machine's
memory (``psutil.virtual_memory()``) before ``seed`` and ``ramp``, and
:func:`cache_warning` memcached's posts with its limit. What grows is Redis (the graph's
ZSETs, and per post one user-timeline and :data:`MEASURED_FANOUT` home-timeline
entries); memcached keeps posts up to its limit; FerretDB keeps its data on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psutil
from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024
MEASURED_AT = "2026-12-04"
# Home-timeline entries per post where GROWTH's per-post figures were measured: the
# twitter:100000 graph's follows per user (40.8) plus a post's mentions (3.5 on average).
MEASURED_FANOUT = 44.3
MEAN_MENTIONS = 3.5  # the wrk2 compose script's 1-6 mentions per post
HEADROOM = 0.9  # warn above this share of the memory the stack may use


@dataclass(frozen=True)
class Growth:
    """One kind of process's RSS: empty, and per unit of data (bytes)."""

    empty: int
    per_100k_users: int
    per_1m_follows: int
    per_100k_posts: int  # at MEASURED_FANOUT entries per post
    fanout_share: float = 0.0  # of per_100k_posts, the part that grows with the fan-out

    def at(self, users: int, follows: int, posts: int, fanout: float) -> int:
        per_post = self.per_100k_posts / 100_000
        if self.fanout_share:
            scale = (1 + fanout) / (1 + MEASURED_FANOUT)
            per_post *= (1 - self.fanout_share) + self.fanout_share * scale
        return int(self.empty + self.per_100k_users * users / 100_000
                   + self.per_1m_follows * follows / 1_000_000 + per_post * posts)


# Kinds of process of the local stack: its MongoDB server(s), Redis, memcached (capped
# by its memory limit), and the eleven services with nginx together.
GROWTH: dict[str, Growth] = {
    "mongodb": Growth(empty=32 * MiB, per_100k_users=31 * MiB, per_1m_follows=1 * MiB,
                      per_100k_posts=7 * MiB),
    "redis": Growth(empty=12 * MiB, per_100k_users=8 * MiB, per_1m_follows=113 * MiB,
                    per_100k_posts=600 * MiB, fanout_share=0.98),
    "memcached": Growth(empty=5 * MiB, per_100k_users=35 * MiB, per_1m_follows=0,
                        per_100k_posts=161 * MiB),
    "services": Growth(empty=1_104 * MiB, per_100k_users=0, per_1m_follows=0,
                       per_100k_posts=0),
}


def fanout_of(users: int, follows: int) -> float:
    """Home-timeline entries per post: the mean follower count, and the mentions."""
    return (follows / users if users else 0.0) + MEAN_MENTIONS


def project(users: int, follows: int, posts: int, *, fanout: float | None = None,
            memcached_limit: int | None = None) -> dict[str, int]:
    """Each kind of process's RSS with this much data (bytes)."""
    spread = fanout if fanout is not None else fanout_of(users, follows)
    sizes = {kind: growth.at(users, follows, posts, spread) for kind, growth in GROWTH.items()}
    if memcached_limit is not None:
        sizes["memcached"] = min(sizes["memcached"], GROWTH["memcached"].empty + memcached_limit)
    return sizes


def memory_warning(users: int, follows: int, posts: int, *, fanout: float | None = None,
                   memcached_limit: int | None = None, stack_rss: int = 0,
                   what: str = "the stack") -> str | None:
    """A warning when the stack would need more memory than the machine has for it: the
    memory available now plus what the stack holds already (``stack_rss``); None if it
    fits."""
    sizes = project(users, follows, posts, fanout=fanout, memcached_limit=memcached_limit)
    needed = sum(sizes.values())
    room = psutil.virtual_memory().available + stack_rss
    if needed <= HEADROOM * room:
        return None
    parts = ", ".join(f"{kind} {size / 2**30:.1f}" for kind, size in
                      sorted(sizes.items(), key=lambda item: -item[1]))
    return (f"{what} would need about {needed / 2**30:.1f} GiB of memory ({parts} GiB; "
            f"figures of {MEASURED_AT}, workloads/probes/memory.py), and this machine has "
            f"{room / 2**30:.1f} GiB for it: Redis holds every timeline in memory, and a "
            "store that runs out is killed or swaps")


def cache_warning(users: int, posts: int, *, memcached_limit: int | None,
                  instances: int = 1) -> str | None:
    """A warning when memcached (``memcached_limit`` bytes over ``instances``) cannot hold
    every post and user it is given; None if it can or the limit is not known. The mixed
    workload reads every post of a user with up to ~110, so past the limit its reads miss
    and go to MongoDB: what is measured is then a cache too small for the data."""
    if memcached_limit is None:
        return None
    growth = GROWTH["memcached"]
    needed = growth.at(users, 0, posts, MEASURED_FANOUT) - growth.empty
    if needed <= memcached_limit:
        return None
    for_users = growth.per_100k_users * users / 100_000
    held = int(max(0.0, memcached_limit - for_users) * 100_000 / growth.per_100k_posts)
    each_mb = -(-needed * 1.25 // (instances * 256 * MiB)) * 256  # room, in 256 MB steps
    return (f"memcached's {memcached_limit / MiB:,.0f} MiB holds about {held:,} of the "
            f"{posts:,} posts ({growth.per_100k_posts / MiB:.0f} MiB per 100k; figures of "
            f"{MEASURED_AT}, workloads/probes/memory.py): reads past it miss and go to "
            "MongoDB, so the run measures a cache too small for its data (at a million "
            "posts and 1 GiB: 88% hits and half the max rate, docs/data-at-scale.md); "
            f"`socialbench up --memcached-memory {each_mb:.0f}` holds them")


def composed_at_most(workload: str, rates: list[float], seconds_per_step: float) -> int:
    """Posts a ramp composes at most, if it runs every step at these rates for this long:
    all of a compose-post ramp's requests, a tenth of a mixed one's."""
    from socialbench.workloads.definitions.socialnetwork import MIX_HOME, MIX_USER

    share = {"compose-post": 1.0, "mixed": 1.0 - MIX_HOME - MIX_USER}.get(workload, 0.0)
    return int(share * sum(rates) * seconds_per_step)


class MemoryRecord(BaseModel):
    """The stack's memory for a results manifest: the figures the projection is made of,
    the projection for the run's data, and the machine's memory when it began."""

    model_config = ConfigDict(extra="forbid")

    measured_at: str = Field(description="When GROWTH was measured (workloads/probes/memory.py).")
    growth: dict[str, dict[str, float]] = Field(
        description="Bytes of RSS of each kind of process: empty, per 100k users, per 1M "
                    "follows, per 100k posts (at measured_fanout home-timeline entries).")
    measured_fanout: float
    users: int = Field(description="Users, follows and posts projected for: the seeded "
                                   "data and what the run may compose.")
    follows: int
    posts: int
    projected: dict[str, int] = Field(description="Bytes of RSS projected, by kind.")
    machine_bytes: int
    available_bytes: int = Field(description="Memory available when the run began.")
    stack_bytes: int = Field(description="RSS of the local stack when the run began (0: "
                                         "not the local stack).")
    warning: str | None = None
    cache_warning: str | None = Field(
        default=None, description="memcached's limit below the posts and users it is given "
                                  "(cache_warning).")

    @classmethod
    def of(cls, users: int, follows: int, posts: int, *, memcached_limit: int | None = None,
           stack_rss: int = 0, warning: str | None = None,
           cache_warning: str | None = None) -> MemoryRecord:
        memory = psutil.virtual_memory()
        return cls(measured_at=MEASURED_AT,
                   growth={kind: {k: float(v) for k, v in asdict(growth).items()}
                           for kind, growth in GROWTH.items()},
                   measured_fanout=MEASURED_FANOUT, users=users, follows=follows, posts=posts,
                   projected=project(users, follows, posts, memcached_limit=memcached_limit),
                   machine_bytes=memory.total, available_bytes=memory.available,
                   stack_bytes=stack_rss, warning=warning, cache_warning=cache_warning)
