"""The sampled check's reads: what a random sample of users needs, and nothing more.

The whole collections cost too much at scale (FerretDB decodes every document of a
collection it scans: a million posts take minutes), but its filters on an indexed
top-level field (``$in`` too) use the index. So :func:`read_sample` draws the sample from
the population (the registered users and those with a timeline in Redis) and reads, by
``$in`` queries in chunks, only what the sample's users need: their follows, timelines,
their followees' posts as the timelines list them (stand-ins, read again as documents
when one would fail), their posts' documents and the mentions' home-timeline scores.
What it then checks of them is what the full check checks, with two differences
(workloads/check/README.md, "The sample's reads").
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from socialbench.workloads.check.contents import (
    ALL_WHOLE,
    DEFAULT_FOLLOW_SLACK_MS,
    EDGE_FIELDS,
    ENDED_FIELDS,
    ENTRY_FIELDS,
    PIPELINE_CHUNK,
    POST_FIELDS,
    WHOLE,
    PostFacts,
    Sample,
    Sampling,
    Snapshot,
    StoreAddresses,
    expected_homes,
    follow_intervals,
    home_timeline_key,
    mongo_clients,
    read_post,
    redis_clients,
    timeline_keys,
    zcards,
    zsets,
)

IN_CHUNK = 1000  # values of one $in query
USER_CHUNK = 250  # users read at a time at most
FIRST_CHUNK = 10  # users of a budgeted sample's first chunk, which times a user's reads


def read_sample(stores: StoreAddresses, sampling: Sampling, timeout_s: float = 10.0,
                follow_slack_ms: int = DEFAULT_FOLLOW_SLACK_MS) -> Snapshot | None:
    """A snapshot of the sample ``sampling`` asks for (``Snapshot.sample``); None when every
    user is to be checked (then every collection is read whole: ``read_snapshot``).

    The population is read first, put in a random order, and read a chunk of users at a
    time: ``sampling.users`` of them, ``USER_CHUNK`` a chunk, or as many as
    ``sampling.budget_s`` allows (:func:`next_chunk`). Either way the users read are the
    first of a random order: a uniform random sample of their number.
    """
    started = time.monotonic()
    with mongo_clients(stores, timeout_s) as mongo, \
            redis_clients(stores, timeout_s) as (home, timelines):
        home_users, timeline_users = timeline_keys(home)
        if timelines is not home:
            timeline_users = timeline_keys(timelines)[1]
        registered = {user for doc in mongo("user")["user"]["user"].find(
            {}, {"_id": 0, "user_id": 1}, batch_size=10_000)
            if isinstance(user := doc.get("user_id"), int)}
        population = registered | home_users | timeline_users
        if sampling.users is None:
            entries = sum(zcards(home, [home_timeline_key(user) for user in home_users]))
            if entries <= sampling.home_entries:
                return None
        elif sampling.users >= len(population):
            return None
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(32)
        order = Sample.order(population, seed)
        wanted = sampling.users if sampling.users is not None else len(order)
        reader = _SampleReader(mongo, home, timelines, follow_slack_ms)
        taken = 0
        size = USER_CHUNK if sampling.users is not None else FIRST_CHUNK
        reading = time.monotonic()
        while taken < wanted and size > 0:
            chunk = order[taken:min(wanted, taken + size)]
            reader.read(set(chunk))
            taken += len(chunk)
            if sampling.users is None:
                now = time.monotonic()
                size = next_chunk(taken, now - reading, sampling.budget_s - (now - started))
    snapshot = reader.snapshot
    snapshot.sample = Sample(size=taken, population=len(population), seed=seed,
                             users=frozenset(order[:taken]))
    snapshot.post_facts = list({**reader.stand_ins, **reader.facts}.values())
    # The followees' entries, that their posts be known as in a timeline (not orphans);
    # a sampled user's own are MongoDB's, read with the user.
    snapshot.user_entries.extend(
        {"user_id": post.creator, "post_id": post.post_id, "timestamp": post.timestamp}
        for post in reader.listed.values() if post.creator not in snapshot.sample.users)
    return snapshot


def next_chunk(taken: int, reading_s: float, left_s: float) -> int:
    """How many users the next chunk of a budgeted sample takes, ``taken`` having been read
    in ``reading_s`` seconds with ``left_s`` of the budget left: as many as fit in what is
    left at the rate so far (up to ``USER_CHUNK``), 0 to stop.

    At a million posts on 10,000 users a user's reads took 0.15 s to over half a second,
    with the VM's speed (a hundred posts of its own and hundreds of mentions, each post's
    document ~1 ms), so a fixed chunk of 250 users overran a 60 s budget by minutes. The
    rate so far errs on the slow side: the followees' timelines, read once, cost the first
    chunks more than the later ones.
    """
    if left_s <= 0 or taken == 0:
        return 0
    return min(USER_CHUNK, int(left_s * taken / reading_s)) if reading_s > 0 else USER_CHUNK


class _SampleReader:
    """The reads of a sample, a chunk of its users at a time, into one snapshot."""

    def __init__(self, mongo: Callable[[str], Any], home: Any, timelines: Any,
                 follow_slack_ms: int) -> None:
        self.graph = mongo("social-graph")["social-graph"]
        self.entries = mongo("user-timeline")["user-timeline"]["user-timeline"]
        self.posts = mongo("post-storage")["post"]["post"]
        self.home, self.timelines = home, timelines
        self.follow_slack_ms = follow_slack_ms
        self.snapshot = Snapshot([], [], [], {}, {}, bool(timelines.exists(ALL_WHOLE)))
        self.stand_ins: dict[int, PostFacts] = {}  # from the followees' user timelines
        self.facts: dict[int, PostFacts] = {}  # from the post documents
        self.absent: set[int] = set()  # post ids looked up and not stored
        self.listed: dict[int, PostFacts] = {}  # every post of a followee's timeline
        self.followees: set[int] = set()  # those whose posts are in stand_ins

    def read(self, users: set[int]) -> None:
        snapshot = self.snapshot
        edges = find_in(self.graph["social-graph"], "follower_id", users, EDGE_FIELDS)
        ended = find_in(self.graph["ended-follows"], "follower_id", users, ENDED_FIELDS)
        own_entries = find_in(self.entries, "user_id", users, ENTRY_FIELDS)
        homes = zsets(self.home, {u: home_timeline_key(u) for u in users})
        cached = zsets(self.timelines, {u: str(u) for u in users})
        snapshot.edges.extend(edges)
        snapshot.ended_follows.extend(ended)
        snapshot.user_entries.extend(own_entries)
        snapshot.home_zsets.update(homes)
        snapshot.user_zsets.update(cached)
        followees = {f for e in (*edges, *ended) if (f := _int(e.get("followee_id"))) is not None}
        new = followees - self.followees
        self.followees |= new
        for post in _followee_posts(self.timelines, self.entries, new,
                                    snapshot.all_whole).values():
            self.listed[post.post_id] = post
            if post.post_id not in self.facts and post.post_id not in self.absent:
                self.stand_ins[post.post_id] = post
        own = {p for e in own_entries if (p := _int(e.get("post_id"))) is not None} | {
            member for zset in cached.values() for member in _members(zset)}
        in_home = {member for zset in homes.values() for member in _members(zset)}
        self._documents(own | (in_home - set(self.stand_ins)))
        posts = [post for post in {**self.stand_ins, **self.facts}.values()
                 if post.creator in followees or post.post_id in in_home]
        self._documents(self._doubtful(users, posts))
        snapshot.mention_scores.update(_mention_scores(
            self.home, (self.facts[p] for p in own if p in self.facts), users))

    def _documents(self, post_ids: set[int]) -> None:
        """Read these posts' documents (those not read yet): they replace stand-ins."""
        wanted = post_ids - set(self.facts) - self.absent
        for doc in find_in(self.posts, "post_id", wanted, POST_FIELDS):
            if (facts := read_post(doc)) is not None:
                self.facts[facts.post_id] = facts
        self.absent |= wanted - set(self.facts)
        for post_id in wanted:
            self.stand_ins.pop(post_id, None)

    def _doubtful(self, users: set[int], posts: list[PostFacts]) -> set[int]:
        """The stand-ins that would fail these users' home timelines (required and
        missing, not allowed, or scored otherwise): their documents are to decide."""
        required, allowed = expected_homes(
            posts, follow_intervals(self.snapshot, users), self.follow_slack_ms)
        doubtful: set[int] = set()
        for user in users:
            held = {int(m): score for m, score in self.snapshot.home_zsets.get(user, [])
                    if m.isdigit()}
            doubtful.update(p for p in required.get(user, set()) - set(held)
                            if p in self.stand_ins)
            doubtful.update(p for p, score in held.items() if p in self.stand_ins and (
                p not in allowed.get(user, ()) or score != self.stand_ins[p].timestamp))
        return doubtful


def find_in(collection: Any, name: str, values: set[int], fields: dict[str, int]
            ) -> list[dict[str, Any]]:
    """The documents whose field ``name`` is one of ``values``, ``IN_CHUNK`` values a query."""
    ordered = sorted(values)
    found: list[dict[str, Any]] = []
    for start in range(0, len(ordered), IN_CHUNK):
        found.extend(collection.find({name: {"$in": ordered[start:start + IN_CHUNK]}}, fields,
                                     batch_size=10_000))
    return found


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _members(zset: list[tuple[bytes, float]]) -> set[int]:
    return {int(member) for member, _ in zset if member.isdigit()}


def _followee_posts(timelines: Any, entries: Any, followees: set[int], all_whole: bool
                    ) -> dict[int, PostFacts]:
    """post id -> stand-in facts of the posts in the followees' user timelines: Redis's
    where it holds a whole timeline, MongoDB's for the others."""
    posts: dict[int, PostFacts] = {}
    cached = zsets(timelines, {user: str(user) for user in followees})
    partial = set(followees)
    for user, zset in cached.items():
        if all_whole or any(member == WHOLE for member, _ in zset):
            partial.discard(user)
            for member, score in zset:
                if member.isdigit():
                    posts[int(member)] = PostFacts(int(member), user, int(score), frozenset(), ())
    if all_whole:
        partial.clear()  # a followee without a ZSET has posted nothing
    for entry in find_in(entries, "user_id", partial, ENTRY_FIELDS):
        owner, post_id, at = (_int(entry.get(k)) for k in ("user_id", "post_id", "timestamp"))
        if owner is not None and post_id is not None and at is not None:
            posts[post_id] = PostFacts(post_id, owner, at, frozenset(), ())
    return posts


def _mention_scores(home: Any, posts: Iterable[PostFacts], users: set[int]
                    ) -> dict[tuple[int, int], float | None]:
    """(user, post) -> the post's score in the home timeline of each user outside the
    sample that a sampled user's post mentions (None: absent)."""
    wanted = sorted((mentioned, post.post_id) for post in posts
                    if post.creator in users for mentioned in post.mentions - users)
    scores: dict[tuple[int, int], float | None] = {}
    for start in range(0, len(wanted), PIPELINE_CHUNK):
        chunk = wanted[start:start + PIPELINE_CHUNK]
        with home.pipeline(transaction=False) as pipe:
            for user, post_id in chunk:
                pipe.zscore(home_timeline_key(user), str(post_id))
            for key, score in zip(chunk, pipe.execute(), strict=True):
                scores[key] = None if score is None else float(score)
    return scores
