"""One user's timelines and follow lists in one real Redis, each read back intact (issue 28,
item 7).

In the original's clustered and replicated modes, home-timeline and user-timeline keyed
their sorted sets by the bare user id in a shared Redis, so the two timelines of a user
were one set. Here every service shares one Redis in every layout; this writes all the
keys of one user (user timeline, home timeline, followers, followees) through the real
services and reads each back alone: on one Redis, on a primary and its replica, and on a
Redis Cluster of 3 masters and 3 replicas.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from socialbench.runtime.redis_client import Redis
from socialbench.runtime.settings import get_settings
from socialbench.services import home_timeline, post_storage, social_graph, user_timeline
from tests.services.support import point_at, serve_fake

SERVICES = (("post-storage", post_storage), ("social-graph", social_graph),
            ("user-timeline", user_timeline), ("home-timeline", home_timeline))


def new_id() -> int:
    return random.randrange(1, 1 << 50)


def post_of(post_id: int, author: int, timestamp: int) -> dict[str, Any]:
    return {
        "post_id": str(post_id), "creator": {"user_id": str(author), "username": f"u{author}"},
        "req_id": "1", "text": f"post {post_id} by {author}", "user_mentions": [], "media": [],
        "urls": [], "timestamp": str(timestamp), "post_type": 0,
    }


@pytest.fixture(params=["standalone", "replicated", "cluster"])
def redis_mode(
    request: pytest.FixtureRequest, store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """The services' Redis deployed one way or another (the store_env's one server first)."""
    mode: str = request.param
    if mode == "replicated":
        primary, replica = request.getfixturevalue("redis_primary_and_replica")
        monkeypatch.setenv("SOCIALBENCH_REDIS_URL", f"redis://{primary.address}/0")
        monkeypatch.setenv("SOCIALBENCH_REDIS_REPLICA_URLS", f"redis://{replica.address}/0")
    elif mode == "cluster":
        nodes = request.getfixturevalue("redis_cluster")
        monkeypatch.setenv("SOCIALBENCH_REDIS_URL",
                           ",".join(f"redis://{node.address}" for node in nodes[:3]))
    monkeypatch.setenv("SOCIALBENCH_REDIS_MODE", mode)
    get_settings.cache_clear()
    return mode


@pytest.fixture
async def apps(
    redis_mode: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, FastAPI]]:
    started: dict[str, FastAPI] = {}
    async with AsyncExitStack() as exits:
        point_at(monkeypatch, "user", await exits.enter_async_context(serve_fake(FastAPI())))
        for name, module in SERVICES:
            app = module.create_app()
            await exits.enter_async_context(app.router.lifespan_context(app))
            point_at(monkeypatch, name, await exits.enter_async_context(serve_fake(app)))
            started[name] = app
        yield started


async def call(apps: dict[str, FastAPI], service: str, method: str, body: dict[str, Any]) -> Any:
    transport = ASGITransport(app=apps[service])
    async with AsyncClient(transport=transport, base_url="http://test") as http:
        response = await http.post(f"/{method}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def publish(apps: dict[str, FastAPI], post_id: int, author: int, timestamp: int) -> None:
    """What compose-post does with a post: store it, then write both timelines."""
    await call(apps, "post-storage", "store_post", {"post": post_of(post_id, author, timestamp)})
    entry = {"user_id": author, "post_id": post_id, "timestamp": timestamp}
    await call(apps, "user-timeline", "write_user_timeline", entry)
    await call(apps, "home-timeline", "write_home_timeline", {**entry, "user_mentions_id": []})


async def test_a_users_timelines_and_follow_lists_are_distinct_keys_in_one_redis(
    apps: dict[str, FastAPI], redis_mode: str,
) -> None:
    me, followee, follower = new_id(), new_id(), new_id()
    await call(apps, "social-graph", "follow", {"user_id": me, "followee_id": followee})
    await call(apps, "social-graph", "follow", {"user_id": follower, "followee_id": me})
    mine, theirs = [new_id(), new_id()], [new_id(), new_id()]
    for n, (my_post, their_post) in enumerate(zip(mine, theirs, strict=True)):
        await publish(apps, my_post, me, 1_700_000_000_000 + 2 * n)
        await publish(apps, their_post, followee, 1_700_000_000_001 + 2 * n)

    async def timeline(kind: str, user_id: int) -> list[int]:
        answer = await call(apps, f"{kind}-timeline", f"read_{kind}_timeline",
                            {"user_id": user_id, "start": 0, "stop": 10})
        return [int(post["post_id"]) for post in answer["posts"]]

    assert await timeline("user", me) == mine[::-1]  # my own posts only
    assert await timeline("home", me) == theirs[::-1]  # only the posts of whom I follow
    assert await timeline("home", follower) == mine[::-1]
    assert (await call(apps, "social-graph", "get_followers", {"user_id": me}))["user_ids"] == [
        follower]
    assert (await call(apps, "social-graph", "get_followees", {"user_id": me}))["user_ids"] == [
        followee]

    # In Redis itself: four sorted sets of this user, none holding another's members.
    redis: Redis = apps["user-timeline"].state.logic.redis
    assert type(redis).__name__ == {"standalone": "RedisClient", "replicated": "ReplicatedRedis",
                                    "cluster": "ClusterRedis"}[redis_mode]
    keys = {str(me): mine, f"{me}:home-timeline": theirs,
            f"{me}:followers": [follower], f"{me}:followees": [followee]}
    for key, members in keys.items():
        assert await redis.execute_command("TYPE", key) == b"zset", key
        found = await redis.zrevrange(key, 0, -1)
        assert {int(m) for m in found if m[:1] != b"~"} == set(members), key
