"""What a seeded stack's stores hold, ids and times aside, and what a seeding plan says
they should hold: two seedings of the same plan compare equal, however they were run.

A post is named by its content (author, text with its short urls expanded, mentions,
media, type); timelines and follows by the users and the posts' content.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pymongo
import redis

from socialbench import registry
from socialbench.registry import Store
from socialbench.stack.local import LocalStack
from socialbench.workloads.check.contents import home_timeline_key
from socialbench.workloads.seeding.seed import SeedPlan, original_text

PostKey = tuple[int, str, tuple[int, ...], tuple[str, ...], int]


@dataclass
class Contents:
    """Counters (a multiset each), so that a duplicate counts."""

    users: Counter[int]
    posts: Counter[PostKey]
    follows: Counter[tuple[int, int]]
    user_timelines: Counter[tuple[int, PostKey]]  # MongoDB
    cached_user_timelines: Counter[tuple[int, PostKey]]  # Redis, where cached
    home_timelines: Counter[tuple[int, PostKey]]
    urls: int = 0  # url-shorten documents (an undone compose leaves its own)

    def differences(self, other: Contents) -> dict[str, str]:
        """What differs, field by field (a few examples of each)."""
        found = {}
        for name in ("users", "posts", "follows", "user_timelines", "home_timelines"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                extra, missing = mine - theirs, theirs - mine
                found[name] = (f"{sum(extra.values())} more, e.g. {list(extra)[:2]}; "
                               f"{sum(missing.values())} fewer, e.g. {list(missing)[:2]}")
        return found


def post_key(post: dict[str, Any]) -> PostKey:
    return (int(post["creator"]["user_id"]), original_text(post) or "",
            tuple(sorted(int(m["user_id"]) for m in post["user_mentions"])),
            tuple(m["media_id"] for m in post["media"]), int(post["post_type"]))


def read_contents(stack: LocalStack) -> Contents:
    """What the local stack's stores hold (each service's own instances, in any layout)."""
    config = stack.config

    def mongo(service: str) -> pymongo.MongoClient[dict[str, Any]]:
        return pymongo.MongoClient(config.store_address(registry.get(service), Store.MONGODB))

    def redis_of(service: str) -> str:
        return config.store_address(registry.get(service), Store.REDIS)

    with mongo("user") as client:
        users = Counter(int(u["user_id"]) for u in client["user"]["user"].find(
            {}, {"_id": 0, "user_id": 1}))
    with mongo("post-storage") as client:
        keys = {int(p["post_id"]): post_key(p) for p in client["post"]["post"].find(
            {}, {"_id": 0}, batch_size=10_000)}
    with mongo("url-shorten") as client:
        urls = client["url-shorten"]["url-shorten"].count_documents({})
    with mongo("social-graph") as client:
        follows = Counter((int(e["follower_id"]), int(e["followee_id"])) for e in
                          client["social-graph"]["social-graph"].find(
                              {}, {"_id": 0, "follower_id": 1, "followee_id": 1}))
    with mongo("user-timeline") as client:
        user_timelines = Counter(
            (int(e["user_id"]), keys.get(int(e["post_id"]), (-1, "", (), (), 0)))
            for e in client["user-timeline"]["user-timeline"].find(
                {}, {"_id": 0, "user_id": 1, "post_id": 1}, batch_size=10_000))

    def zsets(url: str, key_of: Any) -> Counter[tuple[int, PostKey]]:
        found: Counter[tuple[int, PostKey]] = Counter()
        with redis.Redis.from_url(url) as client:
            pipe = client.pipeline(transaction=False)
            for user in users:
                pipe.zrange(key_of(user), 0, -1)
            for user, members in zip(users, pipe.execute(), strict=True):
                for member in members:
                    if member.isdigit():
                        found[user, keys.get(int(member), (-1, "", (), (), 0))] += 1
        return found

    return Contents(users=users, posts=Counter(keys.values()), follows=follows,
                    user_timelines=user_timelines,
                    cached_user_timelines=zsets(redis_of("user-timeline"), str),
                    home_timelines=zsets(redis_of("home-timeline"), home_timeline_key),
                    urls=urls)


def planned_contents(plan: SeedPlan) -> Contents:
    """What the stores hold once ``plan`` is seeded (posts' content, follows, timelines)."""
    users = plan.graph.node_count
    follows = Counter(f for chunk in range(plan.phase_records()["follows"].chunks)
                      for f in plan.follows(chunk))
    followers: dict[int, list[int]] = {}
    for follower, followee in follows:
        followers.setdefault(followee, []).append(follower)
    posts: Counter[PostKey] = Counter()
    user_timelines: Counter[tuple[int, PostKey]] = Counter()
    home_timelines: Counter[tuple[int, PostKey]] = Counter()
    for chunk in range(plan.phase_records()["posts"].chunks):
        for post in plan.posts(chunk):
            mentioned = {int(name.removeprefix("@username_")) for name in
                         post.text.split() if name.startswith("@username_")}
            key = (post.user_id, post.text, tuple(sorted(mentioned)), tuple(post.media_ids),
                   post.post_type)
            posts[key] += 1
            user_timelines[post.user_id, key] += 1
            for reader in ({*followers.get(post.user_id, []), *mentioned} - {post.user_id}):
                home_timelines[reader, key] += 1
    return Contents(users=Counter(range(users)), posts=posts, follows=follows,
                    user_timelines=user_timelines, cached_user_timelines=user_timelines,
                    home_timelines=home_timelines)
