from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.redis_client import EACH_KEY_BATCH
from socialbench.runtime.settings import get_settings
from socialbench.services.home_timeline import (
    HomeTimelineService,
    create_app,
    timeline_key,
)
from tests.services.support import app_client, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def new_id() -> int:
    return random.randrange(1, 1 << 50)


@dataclass
class FakeNeighbours:
    """social-graph and post-storage as home-timeline sees them."""

    followers: dict[int, list[int]] = field(default_factory=dict)
    reads: list[list[int]] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/get_followers")
        async def get_followers(body: dict[str, int]) -> dict[str, Any]:
            return {"user_ids": self.followers.get(body["user_id"], [])}

        @app.post("/read_posts")
        async def read_posts(body: dict[str, list[int]]) -> dict[str, Any]:
            self.reads.append(body["post_ids"])
            return {"posts": [{"post_id": str(i)} for i in body["post_ids"]]}

        return app


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeNeighbours]:
    neighbours = FakeNeighbours()
    async with serve_neighbours(monkeypatch, neighbours.app(), "social-graph", "post-storage"):
        yield neighbours


@pytest.fixture
def app(store_env: dict[str, str], fakes: FakeNeighbours) -> FastAPI:
    return create_app()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with app_client(app) as http:
        yield http


def home(app: FastAPI) -> HomeTimelineService:
    logic: HomeTimelineService = app.state.logic
    return logic


async def write(
    client: AsyncClient, author: int, post_id: int, timestamp: int, mentions: tuple[int, ...] = ()
) -> None:
    response = await client.post("/write_home_timeline", json={
        "user_id": author, "post_id": post_id, "timestamp": timestamp,
        "user_mentions_id": list(mentions)})
    assert response.status_code == 200, response.text


async def read(client: AsyncClient, user_id: int, start: int = 0, stop: int = 10) -> list[int]:
    response = await client.post(
        "/read_home_timeline", json={"user_id": user_id, "start": start, "stop": stop}
    )
    assert response.status_code == 200, response.text
    return [int(post["post_id"]) for post in response.json()["posts"]]


async def test_a_post_fans_out_to_followers_and_mentions_but_not_its_author(
    app: FastAPI, fakes: FakeNeighbours, client: AsyncClient
) -> None:
    author, follower_a, follower_b, mentioned, stranger = (new_id() for _ in range(5))
    fakes.followers[author] = [follower_a, follower_b, author]
    post_id = new_id()
    await write(client, author, post_id, 1_700_000_000_000, mentions=(mentioned, follower_a))

    for reader in (follower_a, follower_b, mentioned):
        assert await read(client, reader) == [post_id]
    assert await read(client, author) == []
    assert await read(client, stranger) == []
    score = await home(app).redis.zscore(timeline_key(follower_a), str(post_id))
    assert score == 1_700_000_000_000


async def test_pages_are_newest_first(fakes: FakeNeighbours, client: AsyncClient) -> None:
    author, reader = new_id(), new_id()
    fakes.followers[author] = [reader]
    post_ids = [new_id() for _ in range(5)]
    for n, post_id in enumerate(post_ids):
        await write(client, author, post_id, 1_700_000_000_000 + n)
    newest_first = post_ids[::-1]
    assert await read(client, reader, 0, 10) == newest_first
    assert await read(client, reader, 1, 3) == newest_first[1:3]
    assert fakes.reads[-1] == newest_first[1:3]


async def test_an_empty_page_asks_no_posts(fakes: FakeNeighbours, client: AsyncClient) -> None:
    assert await read(client, new_id()) == []
    assert await read(client, new_id(), 5, 5) == []
    assert fakes.reads == []


async def test_a_post_with_nobody_to_reach_writes_nothing(
    app: FastAPI, client: AsyncClient
) -> None:
    author = new_id()
    await write(client, author, new_id(), 1_700_000_000_000, mentions=(author,))
    assert await home(app).redis.exists(timeline_key(author)) == 0


async def test_wrk2_read(fakes: FakeNeighbours, client: AsyncClient) -> None:
    author, reader = new_id(), new_id()
    fakes.followers[author] = [reader]
    post_id = new_id()
    await write(client, author, post_id, 1_700_000_000_000)
    response = await client.get(
        f"/wrk2-api/home-timeline/read?user_id={reader}&start=0&stop=10", headers=FORM
    )
    assert response.status_code == 200
    assert response.json() == [{"post_id": str(post_id)}]
    empty = await client.get(f"/wrk2-api/home-timeline/read?user_id={new_id()}&start=0&stop=10")
    assert (empty.status_code, empty.text) == (200, "[]")


@pytest.mark.parametrize(
    ("query", "status", "text"),
    [
        ("user_id=1&stop=10", 400, "Incomplete arguments\n"),
        ("user_id=1&start=0&stop=", 400, "Incomplete arguments\n"),
        ("user_id=one&start=0&stop=10", 400, "Get home-timeline failure: user_id must be"),
        ("user_id=1&start=0&stop=-1", 400, "Get home-timeline failure: start and stop"),
    ],
)
async def test_wrk2_read_errors(client: AsyncClient, query: str, status: int, text: str) -> None:
    response = await client.get(f"/wrk2-api/home-timeline/read?{query}")
    assert response.status_code == status
    assert response.text.startswith(text)


async def test_api_read_is_the_logged_in_users(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    author, me = new_id(), new_id()
    fakes.followers[author] = [me]
    post_id = new_id()
    await write(client, author, post_id, 1_700_000_000_000)
    assert (await client.get("/api/home-timeline/read?start=0&stop=10")).status_code == 401
    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), me, f"username_{me}"))
    response = await client.get("/api/home-timeline/read?start=0&stop=10")
    assert response.json() == [{"post_id": str(post_id)}]


async def test_home_timelines_can_share_a_redis_with_user_timelines(
    app: FastAPI, client: AsyncClient
) -> None:
    user = new_id()
    await home(app).redis.zadd(str(user), {str(new_id()): 1})  # user-timeline's key for user
    assert await read(client, user) == []


async def remove(
    client: AsyncClient, author: int, post_id: int, mentions: tuple[int, ...] = ()
) -> None:
    response = await client.post("/remove_home_timeline", json={
        "user_id": author, "post_id": post_id, "user_mentions_id": list(mentions)})
    assert (response.status_code, response.json()) == (200, {}), response.text


async def test_a_removed_post_leaves_the_home_timelines_it_was_fanned_out_to(
    app: FastAPI, fakes: FakeNeighbours, client: AsyncClient
) -> None:
    author, follower, mentioned = new_id(), new_id(), new_id()
    fakes.followers[author] = [follower]
    kept, removed = new_id(), new_id()
    await write(client, author, kept, 1_700_000_000_000, mentions=(mentioned,))
    await write(client, author, removed, 1_700_000_000_001, mentions=(mentioned,))
    for reader in (follower, mentioned):
        assert await read(client, reader) == [removed, kept]

    await remove(client, author, removed, mentions=(mentioned,))
    for reader in (follower, mentioned):
        assert await read(client, reader) == [kept]
        assert await home(app).redis.zscore(timeline_key(reader), str(removed)) is None


async def test_removing_is_idempotent(fakes: FakeNeighbours, client: AsyncClient) -> None:
    author, follower = new_id(), new_id()
    fakes.followers[author] = [follower]
    post_id = new_id()
    await write(client, author, post_id, 1_700_000_000_000)
    await remove(client, author, post_id)
    await remove(client, author, post_id)
    await remove(client, author, new_id(), mentions=(new_id(),))
    await remove(client, new_id(), new_id())  # nobody to reach
    assert await read(client, follower) == []


async def script_runs(service: HomeTimelineService) -> int:
    """Scripts Redis has run (EVALSHA and EVAL), from INFO commandstats."""
    info = (await service.redis.execute_command("INFO", "commandstats")).decode()
    return sum(int(line.split("calls=")[1].split(",")[0]) for line in info.splitlines()
               if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")))


async def test_a_celebritys_post_reaches_every_follower_in_batches(
    app: FastAPI, fakes: FakeNeighbours, client: AsyncClient
) -> None:
    author = new_id()
    followers = [new_id() for _ in range(2 * EACH_KEY_BATCH + 7)]
    fakes.followers[author] = followers
    post_id = new_id()
    warm_author = new_id()
    fakes.followers[warm_author] = [new_id()]
    await write(client, warm_author, new_id(), 1)  # the script loaded (a first EVALSHA fails)
    before = await script_runs(home(app))
    await write(client, author, post_id, 1_700_000_000_000)

    assert await script_runs(home(app)) - before == 3  # 500, 500 and 7: Redis free between
    for follower in followers:
        assert await home(app).redis.zscore(timeline_key(follower), str(post_id)) == (
            1_700_000_000_000)
    await remove(client, author, post_id)
    assert all([await read(client, follower) == [] for follower in followers[::50]])
