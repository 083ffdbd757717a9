"""What the stores must hold after a run, checked from a snapshot of them.

:func:`read_snapshot` reads the stores (every collection whole and streamed, or what some
users need) and :func:`analyse` checks what the services promise (services/README.md,
"Store layout"): every post complete and in its creator's user timeline once; every home
timeline holding exactly its followees' posts made while followed and the posts
mentioning its owner, each once, newest first. A follow is an interval, and the fan-out
may read the followers up to ``follow_slack_ms`` late. What a failed compose is
documented to leave is counted apart as *tolerated*. A :class:`Sample` of users
(:class:`Sampling` says how many) is checked as ``users`` is, knowing less than the
whole. The rules in full: workloads/check/README.md.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from socialbench import registry
from socialbench.registry import ServiceSpec, Store

# The services' Redis layout (services/user_timeline.py, home_timeline.py), written out
# here so that reading a bundle does not import the services (a test keeps them equal).
WHOLE = b"~whole"  # user-timeline's marker member: this ZSET holds the whole timeline
ALL_WHOLE = "user-timeline:whole"  # user-timeline's flag: Redis holds every timeline
# The services whose stores the check reads (its databases: "post", "social-graph",
# "user-timeline", and "user" for a sample's population; Redis: the user timelines' cache
# and the home timelines).
CHECKED_MONGODB = ("post-storage", "social-graph", "user-timeline", "user")
CHECKED_REDIS = ("user-timeline", "home-timeline")
CHECKED = {Store.MONGODB: CHECKED_MONGODB, Store.REDIS: CHECKED_REDIS}
DEFAULT_LIMIT = 10  # examples kept per kind of problem
DEFAULT_FOLLOW_SLACK_MS = 60_000
DEFAULT_HOME_ENTRIES = 1_000_000  # home-timeline entries up to which every user is checked
DEFAULT_BUDGET_S = 60.0  # seconds of a sample's reads, by default
PIPELINE_CHUNK = 1000  # Redis commands per round trip
_ID_TEXT = re.compile(r"0|[1-9][0-9]{0,18}")
# What the check reads of each collection's documents.
POST_FIELDS = {"_id": 0, "post_id": 1, "creator": 1, "text": 1, "media": 1,
               "user_mentions": 1, "timestamp": 1}
EDGE_FIELDS = {"_id": 0, "follower_id": 1, "followee_id": 1, "timestamp": 1}
ENDED_FIELDS = {"_id": 0, "follower_id": 1, "followee_id": 1, "followed_at": 1,
                "unfollowed_at": 1}
ENTRY_FIELDS = {"_id": 0, "user_id": 1, "post_id": 1, "timestamp": 1}
_HOME_KEY = re.compile(rb"([0-9]+):home-timeline")
_USER_KEY = re.compile(rb"[0-9]+")


def home_timeline_key(user_id: int) -> str:
    return f"{user_id}:home-timeline"


# Kinds of problem, each a broken promise.
INCOMPLETE_POST = "incomplete_post"
MISSING_FROM_USER_TIMELINE = "missing_from_user_timeline"
FOREIGN_IN_USER_TIMELINE = "foreign_in_user_timeline"
USER_TIMELINE_DUPLICATE = "user_timeline_duplicate"
USER_TIMELINE_ORDER = "user_timeline_order"
USER_TIMELINE_CACHE = "user_timeline_cache"
MISSING_FROM_HOME = "missing_from_home_timeline"
UNEXPECTED_IN_HOME = "unexpected_in_home_timeline"
HOME_DUPLICATE = "home_timeline_duplicate"
HOME_ORDER = "home_timeline_order"
BAD_ENTRY = "bad_timeline_entry"
# Kinds tolerated: what an undone compose is documented to leave.
DANGLING_USER_TIMELINE = "dangling_user_timeline_entry"
DANGLING_HOME = "dangling_home_timeline_entry"
ORPHAN_POST = "orphan_post"
TOLERATED = frozenset({DANGLING_USER_TIMELINE, DANGLING_HOME, ORPHAN_POST})


class StoreAddresses(BaseModel):
    """Where the social network keeps the data the check reads (the CLI knows the local
    stack's): the MongoDB of post-storage, social-graph, user-timeline and user, the Redis of
    user-timeline and home-timeline. One of each (``mongodb_url``, ``redis_url``) in the
    shared layout; a service's own instance, by service name, in ``mongodb_urls`` and
    ``redis_urls`` (the per-service layout).
    """

    mongodb_url: str
    redis_url: str
    mongodb_urls: dict[str, str] = Field(default_factory=dict)
    redis_urls: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of_services(cls, address_of: Callable[[ServiceSpec, Store], str]) -> StoreAddresses:
        """The addresses ``address_of(service, store)`` gives the services the check reads."""
        mongodb = {name: address_of(registry.get(name), Store.MONGODB) for name in CHECKED_MONGODB}
        redis = {name: address_of(registry.get(name), Store.REDIS) for name in CHECKED_REDIS}
        mongodb_url, redis_url = mongodb["post-storage"], redis["home-timeline"]
        return cls(mongodb_url=mongodb_url, redis_url=redis_url,
                   mongodb_urls={n: url for n, url in mongodb.items() if url != mongodb_url},
                   redis_urls={n: url for n, url in redis.items() if url != redis_url})

    def mongodb_of(self, service: str) -> str:
        return self.mongodb_urls.get(service, self.mongodb_url)

    def redis_of(self, service: str) -> str:
        return self.redis_urls.get(service, self.redis_url)


@dataclass(frozen=True)
class Sampling:
    """Whom to check: every user when the home timelines hold at most ``home_entries``
    entries; else ``users`` users, or as many as the sample's reads fit in ``budget_s``."""

    users: int | None = None
    home_entries: int = DEFAULT_HOME_ENTRIES
    budget_s: float = DEFAULT_BUDGET_S
    seed: int | None = None  # None: a fresh one (recorded in the result)


class Sample(BaseModel):
    """A uniform random sample of ``size`` of the ``population`` users known to the stores."""

    model_config = ConfigDict(extra="forbid")

    size: int
    population: int
    seed: int
    users: frozenset[int] = Field(default=frozenset(), exclude=True, repr=False)

    @staticmethod
    def order(population: set[int], seed: int) -> list[int]:
        """``population`` in a random order (the same for the same population and seed):
        its first ``k`` are a uniform random sample of ``k``."""
        return random.Random(seed).sample(sorted(population), len(population))

    @classmethod
    def draw(cls, population: set[int], size: int, seed: int) -> Sample:
        """``size`` of ``population``: the first of ``order``."""
        users = cls.order(population, seed)[:size]
        return cls(size=size, population=len(population), seed=seed, users=frozenset(users))

    def p_found(self, users_affected: int = 1) -> float:
        """The probability that a fault touching this many users' posts or timelines
        touches a sampled one: 1 - C(N-m, k)/C(N, k)."""
        missed = 1.0
        for i in range(min(users_affected, self.population)):
            missed *= max(0, self.population - self.size - i) / (self.population - i)
        return 1.0 - missed

    def __str__(self) -> str:
        return (f"a random {self.size:,} of {self.population:,} users (seed {self.seed}): "
                f"a problem of one user is found with probability {self.p_found(1):.1%}, "
                f"one touching 10 users {self.p_found(10):.1%}")


class CheckProblem(BaseModel):
    """One broken promise (or tolerated leftover), with its user and post."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    user_id: int | None
    post_id: int | None
    detail: str
    tolerated: bool = False

    def __str__(self) -> str:
        where = ", ".join(part for part in (
            f"user {self.user_id}" if self.user_id is not None else "",
            f"post {self.post_id}" if self.post_id is not None else "") if part)
        return f"{self.kind}: {where}: {self.detail}" if where else f"{self.kind}: {self.detail}"


class CheckResult(BaseModel):
    """The verdict of a check: counts per kind of problem and the first examples."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    error: str | None = Field(default=None, description="Why the check did not run.")
    scope: str = Field(description='"every user" or the users the check was restricted to.')
    sample: Sample | None = Field(
        default=None, description="The users checked were this random sample.")
    posts: int = Field(description="Posts checked.")
    users: int = Field(description="Home timelines checked.")
    edges: int = Field(description="Follow edges read.")
    ended_follows: int = Field(default=0, description="Ended follows (unfollows) read.")
    user_timeline_entries: int
    home_timeline_entries: int
    counts: dict[str, int] = Field(description="Problems per kind (each fails the check).")
    tolerated: dict[str, int] = Field(
        description="Leftovers of undone composes per kind (counted, not failing).")
    problems: list[CheckProblem] = Field(description="The first examples of each kind.")
    elapsed_s: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def reason(self) -> str:
        """One line: the verdict and why."""
        if self.error is not None:
            return f"the check did not run: {self.error}"
        if self.passed:
            note = ""
            if self.tolerated:
                note = " (tolerated leftovers of undone composes: " + ", ".join(
                    f"{kind} {n}" for kind, n in sorted(self.tolerated.items())) + ")"
            return (f"{self.posts} posts and {self.users} home timelines consistent "
                    f"({self.scope}){note}")
        first = next((p for p in self.problems if not p.tolerated), None)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.counts.items()))
        plural = "" if self.total == 1 else "s"
        return f"{self.total} problem{plural} ({kinds}); first: {first}"

    @classmethod
    def unreadable(cls, error: str, scope: str, elapsed_s: float = 0.0) -> CheckResult:
        """The result of a check that did not run (e.g. the stores could not be read)."""
        return cls(passed=False, error=error, scope=scope, posts=0, users=0, edges=0,
                   user_timeline_entries=0, home_timeline_entries=0, counts={},
                   tolerated={}, problems=[], elapsed_s=elapsed_s)


# ---------------------------------------------------------------- reading the stores


@dataclass
class Snapshot:
    """What the stores hold, read once each."""

    posts: list[dict[str, Any]]  # post.post documents
    edges: list[dict[str, Any]]  # social-graph.social-graph documents
    user_entries: list[dict[str, Any]]  # user-timeline.user-timeline documents
    user_zsets: dict[int, list[tuple[bytes, float]]]  # Redis <user_id>, ascending
    home_zsets: dict[int, list[tuple[bytes, float]]]  # Redis <user_id>:home-timeline
    all_whole: bool  # the flag: Redis holds every user timeline
    # social-graph.ended-follows documents
    ended_follows: list[dict[str, Any]] = field(default_factory=list)
    sample: Sample | None = None  # the users whose timelines were read, if sampled
    # What the check needs of more posts, in less memory than their documents.
    post_facts: list[PostFacts] = field(default_factory=list)
    # (user, post id) -> the post's score in that user's home timeline, None if absent: a
    # sample's posts mentioning users outside it, checked from the author's side.
    mention_scores: dict[tuple[int, int], float | None] = field(default_factory=dict)

    def known_users(self) -> set[int]:
        """Every user the MongoDB documents name (creators, mentions, timeline owners,
        follows) and whose timelines Redis holds: the population a sample is drawn from."""
        known: set[int | None] = {*self.home_zsets, *self.user_zsets}
        for facts in self.post_facts:
            known.add(facts.creator)
            known.update(facts.mentions)
        for post in self.posts:
            creator = post.get("creator")
            known.add(_as_id(creator.get("user_id")) if isinstance(creator, dict) else None)
            mentions = post.get("user_mentions")
            if isinstance(mentions, list):
                known.update(_as_id(m.get("user_id")) for m in mentions if isinstance(m, dict))
        known.update(_as_id(entry.get("user_id")) for entry in self.user_entries)
        for follow in (*self.edges, *self.ended_follows):
            known.update((_as_id(follow.get("follower_id")), _as_id(follow.get("followee_id"))))
        known.discard(None)
        return cast(set[int], known)


@contextmanager
def mongo_clients(stores: StoreAddresses, timeout_s: float
                  ) -> Iterator[Callable[[str], Any]]:
    """A function from a service's name to a client of its MongoDB (one client a URL)."""
    import pymongo

    timeout_ms = int(timeout_s * 1000)
    clients: dict[str, pymongo.MongoClient[dict[str, Any]]] = {}

    def mongo(service: str) -> pymongo.MongoClient[dict[str, Any]]:
        url = stores.mongodb_of(service)
        if url not in clients:
            clients[url] = pymongo.MongoClient(
                url, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms,
                socketTimeoutMS=max(timeout_ms, 600_000))
        return clients[url]

    try:
        yield mongo
    finally:
        for client in clients.values():
            client.close()


@contextmanager
def redis_clients(stores: StoreAddresses, timeout_s: float) -> Iterator[tuple[Any, Any]]:
    """Clients of home-timeline's Redis and of user-timeline's (one client if the same)."""
    home = _redis_client(stores.redis_of("home-timeline"), timeout_s)
    timelines = (home if stores.redis_of("user-timeline") == stores.redis_of("home-timeline")
                 else _redis_client(stores.redis_of("user-timeline"), timeout_s))
    try:
        yield home, timelines
    finally:
        home.close()
        timelines.close()


def read_snapshot(stores: StoreAddresses, users: set[int] | None = None,
                  timeout_s: float = 10.0, compact: bool = False) -> Snapshot:
    """Read the stores: each MongoDB collection once, the Redis ZSETs in pipelines.

    With ``users``, only their timelines are read from Redis (every collection is still
    read whole: whom they follow and who mentions them can be anyone). With ``compact``,
    the posts with a valid id are kept as ``post_facts``, not documents. (A sample's
    reads are :func:`socialbench.workloads.check.sample.read_sample`.)
    """
    posts: list[dict[str, Any]] = []
    post_facts: list[PostFacts] = []
    with mongo_clients(stores, timeout_s) as mongo:
        for post in mongo("post-storage")["post"]["post"].find(
                {}, POST_FIELDS, batch_size=10_000):
            facts = read_post(post) if compact else None
            if facts is None:
                posts.append(post)
            else:
                post_facts.append(facts)
        graph = mongo("social-graph")["social-graph"]
        edges = list(graph["social-graph"].find({}, EDGE_FIELDS, batch_size=10_000))
        ended_follows = list(graph["ended-follows"].find({}, ENDED_FIELDS, batch_size=10_000))
        user_entries = list(mongo("user-timeline")["user-timeline"]["user-timeline"].find(
            {}, ENTRY_FIELDS, batch_size=10_000))
    snapshot = Snapshot(posts, edges, user_entries, {}, {}, False, ended_follows,
                        post_facts=post_facts)
    with redis_clients(stores, timeout_s) as (home, timelines):
        snapshot.all_whole = bool(timelines.exists(ALL_WHOLE))
        if users is None:
            home_users, timeline_users = timeline_keys(home)
            if timelines is not home:
                timeline_users = timeline_keys(timelines)[1]
        else:
            home_users = timeline_users = set(users)
        snapshot.home_zsets = zsets(home, {user: home_timeline_key(user)
                                            for user in home_users})
        snapshot.user_zsets = zsets(timelines, {user: str(user) for user in timeline_users})
    return snapshot


def _redis_client(url: str, timeout_s: float) -> Any:
    """redis-py's client of ``url``: one server, or a Redis Cluster when ``url`` lists its
    nodes (``redis://a:7000,redis://b:7001``; SCAN and pipelines then span every master)."""
    import redis
    from redis.cluster import ClusterNode, RedisCluster

    urls = [part.strip() for part in url.split(",") if part.strip()]
    if len(urls) == 1:
        return redis.Redis.from_url(urls[0], socket_timeout=timeout_s,
                                    socket_connect_timeout=timeout_s)
    nodes = []
    for node in urls:
        parts = urlsplit(node)
        nodes.append(ClusterNode(parts.hostname or "127.0.0.1", parts.port or 6379))
    return RedisCluster(startup_nodes=nodes, socket_timeout=timeout_s,
                        socket_connect_timeout=timeout_s)


def zcards(client: Any, keys: list[str]) -> list[int]:
    sizes: list[int] = []
    for start in range(0, len(keys), PIPELINE_CHUNK):
        with client.pipeline(transaction=False) as pipe:
            for key in keys[start:start + PIPELINE_CHUNK]:
                pipe.zcard(key)
            sizes.extend(int(size) for size in pipe.execute())
    return sizes


def timeline_keys(client: Any) -> tuple[set[int], set[int]]:
    """The users with a home timeline and with a cached user timeline in Redis (one SCAN)."""
    home: set[int] = set()
    timelines: set[int] = set()
    for key in client.scan_iter(count=1000):
        if (match := _HOME_KEY.fullmatch(key)) is not None:
            home.add(int(match.group(1)))
        elif _USER_KEY.fullmatch(key) is not None:
            timelines.add(int(key))
    return home, timelines


def zsets(client: Any, keys: dict[int, str]) -> dict[int, list[tuple[bytes, float]]]:
    """Each key's ZSET (ascending), pipelined; a missing key is no entry, not a ZSET skipped."""
    found: dict[int, list[tuple[bytes, float]]] = {}
    items = sorted(keys.items())
    for start in range(0, len(items), PIPELINE_CHUNK):
        chunk = items[start:start + PIPELINE_CHUNK]
        with client.pipeline(transaction=False) as pipe:
            for _, key in chunk:
                pipe.zrange(key, 0, -1, withscores=True)
            answers = pipe.execute(raise_on_error=False)
        for (user, _), answer in zip(chunk, answers, strict=True):
            if isinstance(answer, list) and answer:
                found[user] = [(bytes(member), float(score)) for member, score in answer]
    return found


# ---------------------------------------------------------------- checking


def _as_id(value: Any) -> int | None:
    """An id as the stores hold it (int64, or a post's decimal string); None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and _ID_TEXT.fullmatch(value):
        return int(value)
    return None


def _member_id(member: bytes) -> int | None:
    try:
        text = member.decode("ascii")
    except UnicodeDecodeError:
        return None
    return int(text) if text.isdigit() else None


@dataclass(slots=True)
class PostFacts:
    """What the check needs of a post document (a fraction of its memory)."""

    post_id: int
    creator: int | None
    timestamp: int | None
    mentions: frozenset[int]
    missing: tuple[str, ...]  # its fields missing or malformed


def read_post(document: dict[str, Any]) -> PostFacts | None:
    """What the check needs of a post document, and which of its fields are missing or bad."""
    post_id = _as_id(document.get("post_id"))
    if post_id is None:
        return None
    missing: list[str] = []
    if not isinstance(document.get("text"), str):
        missing.append("text")
    creator_doc = document.get("creator")
    creator = _as_id(creator_doc.get("user_id")) if isinstance(creator_doc, dict) else None
    if creator is None or not isinstance(creator_doc, dict) or not isinstance(
            creator_doc.get("username"), str):
        missing.append("creator")
    media = document.get("media")
    if not isinstance(media, list) or not all(
            isinstance(m, dict) and isinstance(m.get("media_id"), str)
            and isinstance(m.get("media_type"), str) for m in media):
        missing.append("media")
    mentions: frozenset[int] = frozenset()
    mention_docs = document.get("user_mentions")
    if isinstance(mention_docs, list) and all(isinstance(m, dict) for m in mention_docs):
        ids = [_as_id(m.get("user_id")) for m in mention_docs]
        if None in ids:
            missing.append("user_mentions")
        mentions = frozenset(i for i in ids if i is not None)
    else:
        missing.append("user_mentions")
    timestamp = _as_id(document.get("timestamp"))
    if timestamp is None:
        missing.append("timestamp")
    return PostFacts(post_id, creator, timestamp, mentions, tuple(missing))


@dataclass
class _Findings:
    limit: int
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[CheckProblem]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, user_id: int | None, post_id: int | None, detail: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < self.limit:
            self.examples[kind].append(CheckProblem(
                kind=kind, user_id=user_id, post_id=post_id, detail=detail,
                tolerated=kind in TOLERATED))


def _entries_by_member(zset: list[tuple[bytes, float]], user: int, findings: _Findings,
                       what: str) -> dict[int, list[float]]:
    """A ZSET's entries as post id -> scores (several when members differ but name one post)."""
    entries: dict[int, list[float]] = defaultdict(list)
    for member, score in zset:
        if member == WHOLE:
            continue
        post_id = _member_id(member)
        if post_id is None:
            findings.add(BAD_ENTRY, user, None, f"{what} member {member[:40]!r} is not a post id")
            continue
        entries[post_id].append(score)
    return entries


def analyse(snapshot: Snapshot, users: set[int] | None = None, *,
            follow_slack_ms: int = DEFAULT_FOLLOW_SLACK_MS,
            limit: int = DEFAULT_LIMIT) -> CheckResult:
    """Check a snapshot; with ``users`` (or the snapshot's sample), only their posts and
    timelines."""
    started = time.monotonic()
    findings = _Findings(limit)
    sample = snapshot.sample if users is None else None
    if sample is not None:
        users = set(sample.users)

    def in_scope(user: int | None) -> bool:
        return users is None or (user is not None and user in users)

    # -- posts
    posts = {post.post_id: post for post in snapshot.post_facts}
    for document in snapshot.posts:
        post = read_post(document)
        if post is None:
            if users is None:
                findings.add(INCOMPLETE_POST, None, None,
                             f"a post without a valid post_id: {str(document)[:120]}")
            continue
        posts[post.post_id] = post

    # -- user timelines in MongoDB: owner -> post id -> timestamps
    timelines: dict[int, dict[int, list[int | None]]] = defaultdict(lambda: defaultdict(list))
    owners: dict[int, set[int]] = defaultdict(set)  # post id -> users whose timeline has it
    for entry in snapshot.user_entries:
        user, post_id = _as_id(entry.get("user_id")), _as_id(entry.get("post_id"))
        if user is None or post_id is None:
            if users is None:
                findings.add(BAD_ENTRY, user, post_id,
                             f"user-timeline entry {str(entry)[:120]} lacks a user or post id")
            continue
        timelines[user][post_id].append(_as_id(entry.get("timestamp")))
        owners[post_id].add(user)

    in_home: set[int] = set()  # posts found in any home timeline read
    for zset in snapshot.home_zsets.values():
        for member, _ in zset:
            post_id = _member_id(member)
            if post_id is not None:
                in_home.add(post_id)
    orphans = {p for p in posts if p not in owners and p not in in_home}

    checked_posts = 0
    for post_id in sorted(posts):
        post = posts[post_id]
        owned_by = owners.get(post_id, set())
        if not (in_scope(post.creator) or any(in_scope(u) for u in owned_by)):
            continue
        checked_posts += 1
        user = post.creator if post.creator is not None else min(owned_by, default=None)
        if post.missing:
            findings.add(INCOMPLETE_POST, user, post.post_id,
                         "missing or malformed: " + ", ".join(post.missing))
        if post.post_id in orphans:
            findings.add(ORPHAN_POST, post.creator, post.post_id,
                         "stored but in no timeline (left by an undone compose?)")
        elif post.creator is not None and post.post_id not in timelines.get(post.creator, {}):
            findings.add(MISSING_FROM_USER_TIMELINE, post.creator, post.post_id,
                         "not in its creator's user timeline (MongoDB)")

    # -- user timelines: MongoDB entries, then the Redis cache
    entries_read = 0
    for user in sorted(timelines):
        if not in_scope(user):
            continue
        for post_id, stamps in sorted(timelines[user].items()):
            entries_read += len(stamps)
            post = posts.get(post_id)
            if post is None:
                findings.add(DANGLING_USER_TIMELINE, user, post_id,
                             "MongoDB entry for a post not stored (left by an undone compose?)")
                continue
            if len(stamps) > 1:
                findings.add(USER_TIMELINE_DUPLICATE, user, post_id,
                             f"{len(stamps)} MongoDB entries for this post")
            if post.creator is not None and post.creator != user:
                findings.add(FOREIGN_IN_USER_TIMELINE, user, post_id,
                             f"a post of user {post.creator} in this user's timeline")
            wrong = [s for s in stamps if s != post.timestamp]
            if wrong and post.timestamp is not None:
                findings.add(USER_TIMELINE_ORDER, user, post_id,
                             f"MongoDB entry at {wrong[0]}, posted at {post.timestamp}: "
                             "read out of order")
    cache_users = sorted(set(snapshot.user_zsets) | (
        {u for u in timelines if in_scope(u)} if snapshot.all_whole else set()))
    for user in cache_users:
        if not in_scope(user):
            continue
        zset = snapshot.user_zsets.get(user, [])
        whole = snapshot.all_whole or any(member == WHOLE for member, _ in zset)
        cached = _entries_by_member(zset, user, findings, "user-timeline cache")
        stored = timelines.get(user, {})
        for post_id, scores in sorted(cached.items()):
            post = posts.get(post_id)
            if post is None:
                if post_id not in stored:  # a dangling MongoDB entry is counted above
                    findings.add(DANGLING_USER_TIMELINE, user, post_id,
                                 "Redis entry for a post not stored (left by an undone "
                                 "compose?)")
                continue
            if len(scores) > 1:
                findings.add(USER_TIMELINE_DUPLICATE, user, post_id,
                             f"{len(scores)} Redis members name this post")
            if post_id not in stored:
                findings.add(USER_TIMELINE_CACHE, user, post_id,
                             "in the Redis cache of the user timeline, not in MongoDB")
            _check_scores(findings, USER_TIMELINE_ORDER, user, post, scores, "Redis")
        if whole:
            for post_id in sorted(set(stored) - set(cached)):
                if post_id in posts:
                    findings.add(USER_TIMELINE_CACHE, user, post_id,
                                 "in MongoDB, missing from the Redis cache that claims the "
                                 "whole timeline")

    # -- home timelines
    required, allowed = expected_homes(
        (post for post in posts.values() if post.post_id not in orphans),
        follow_intervals(snapshot, users), follow_slack_ms)
    home_users = sorted(u for u in set(snapshot.home_zsets) | set(required) if in_scope(u))
    if users is not None:
        home_users = sorted(users)
    home_entries = 0
    for user in home_users:
        zset = snapshot.home_zsets.get(user, [])
        home_entries += len(zset)
        entries = _entries_by_member(zset, user, findings, "home-timeline")
        for post_id, scores in sorted(entries.items()):
            post = posts.get(post_id)
            if post is None:
                findings.add(DANGLING_HOME, user, post_id,
                             "entry for a post not stored (left by an undone compose?)")
                continue
            if len(scores) > 1:
                findings.add(HOME_DUPLICATE, user, post_id,
                             f"{len(scores)} entries name this post")
            if post_id not in allowed.get(user, ()):
                author = post.creator
                why = ("the user's own post" if author == user else
                       f"by user {author}, whom the user did not follow then, not mentioning "
                       "the user")
                findings.add(UNEXPECTED_IN_HOME, user, post_id, why)
            _check_scores(findings, HOME_ORDER, user, post, scores, "home-timeline")
        for post_id in sorted(required.get(user, set()) - set(entries)):
            post = posts[post_id]
            why = ("mentions the user" if user in post.mentions
                   else f"by user {post.creator}, whom the user followed then")
            findings.add(MISSING_FROM_HOME, user, post_id, f"missing: {why}")

    for (mentioned, post_id), score in sorted(snapshot.mention_scores.items()):
        post = posts.get(post_id)
        if post is None or post_id in orphans or in_scope(mentioned) or (
                mentioned not in post.mentions or mentioned == post.creator):
            continue
        if score is None:
            findings.add(MISSING_FROM_HOME, mentioned, post_id,
                         f"missing: mentions the user (by user {post.creator}, sampled)")
        else:
            _check_scores(findings, HOME_ORDER, mentioned, post, [score], "home-timeline")

    problems = [p for kind in sorted(findings.examples) for p in findings.examples[kind]]
    counts = {k: n for k, n in sorted(findings.counts.items()) if k not in TOLERATED}
    tolerated = {k: n for k, n in sorted(findings.counts.items()) if k in TOLERATED}
    return CheckResult(
        passed=not counts, scope=str(sample) if sample is not None else scope_text(users),
        sample=sample, posts=checked_posts, users=len(home_users),
        edges=len(snapshot.edges), ended_follows=len(snapshot.ended_follows),
        user_timeline_entries=entries_read,
        home_timeline_entries=home_entries, counts=counts, tolerated=tolerated,
        problems=sorted(problems, key=lambda p: p.tolerated),
        elapsed_s=time.monotonic() - started,
    )


def expected_homes(posts: Iterable[PostFacts],
                   followers: dict[int, list[tuple[int, int, float]]], follow_slack_ms: int
                   ) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """user -> the posts its home timeline must hold, and -> those it may hold: those of
    its followees over the follow intervals ``followers`` gives, and those mentioning it."""
    required: dict[int, set[int]] = defaultdict(set)
    allowed: dict[int, set[int]] = defaultdict(set)
    for post in posts:
        if post.creator is None or post.timestamp is None:
            continue
        at = post.timestamp
        for follower, followed_at, unfollowed_at in followers.get(post.creator, ()):
            if follower == post.creator:
                continue
            if followed_at <= at and at + follow_slack_ms <= unfollowed_at:
                required[follower].add(post.post_id)
            if followed_at <= at + follow_slack_ms and at <= unfollowed_at + follow_slack_ms:
                allowed[follower].add(post.post_id)
        for mentioned in post.mentions - {post.creator}:
            required[mentioned].add(post.post_id)
            allowed[mentioned].add(post.post_id)
    return required, allowed


def follow_intervals(snapshot: Snapshot, users: set[int] | None
                     ) -> dict[int, list[tuple[int, int, float]]]:
    """followee -> (follower, followed_at, unfollowed_at), the followers among ``users``
    (if given): current follows end never."""
    followers: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for edge in snapshot.edges:
        follower, followee = _as_id(edge.get("follower_id")), _as_id(edge.get("followee_id"))
        stamp = _as_id(edge.get("timestamp"))
        if follower is None or followee is None or (users is not None and follower not in users):
            continue
        followers[followee].append((follower, stamp if stamp is not None else 0, math.inf))
    for ended in snapshot.ended_follows:
        follower, followee = _as_id(ended.get("follower_id")), _as_id(ended.get("followee_id"))
        start, end = _as_id(ended.get("followed_at")), _as_id(ended.get("unfollowed_at"))
        if follower is None or followee is None or start is None or end is None or (
                users is not None and follower not in users):
            continue
        followers[followee].append((follower, start, end))
    return followers


def _check_scores(findings: _Findings, kind: str, user: int, post: PostFacts,
                  scores: list[float], where: str) -> None:
    """A ZSET entry must be scored by its post's timestamp, or reads misplace it."""
    if post.timestamp is None:
        return
    wrong = [s for s in scores if s != post.timestamp]
    if wrong:
        findings.add(kind, user, post.post_id,
                     f"{where} entry scored {wrong[0]:.0f}, posted at {post.timestamp}: "
                     "read out of order")


def scope_text(users: set[int] | None) -> str:
    if users is None:
        return "every user"
    ordered = sorted(users)
    if ordered and ordered[-1] - ordered[0] + 1 == len(ordered) and len(ordered) > 2:
        return f"users {ordered[0]}..{ordered[-1]}"
    return "users " + ", ".join(str(u) for u in ordered[:10]) + (
        f" and {len(ordered) - 10} more" if len(ordered) > 10 else "")
