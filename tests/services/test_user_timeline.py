from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.settings import get_settings
from socialbench.runtime.stores import flag_fresh_cache
from socialbench.services.user_timeline import ALL_WHOLE, WHOLE, UserTimelineService, create_app
from tests.services.support import app_client, serve_neighbours, unique_name

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def new_id() -> int:
    return random.randrange(1, 1 << 50)


@dataclass
class FakePostStorage:
    """post-storage as the timelines see it: a post per id, and the reads it was asked."""

    reads: list[list[int]] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/read_posts")
        async def read_posts(body: dict[str, list[int]]) -> dict[str, Any]:
            self.reads.append(body["post_ids"])
            return {"posts": [{"post_id": str(i)} for i in body["post_ids"]]}

        return app


@pytest.fixture
async def post_storage(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakePostStorage]:
    fake = FakePostStorage()
    async with serve_neighbours(monkeypatch, fake.app(), "post-storage"):
        yield fake


@pytest.fixture
def app(store_env: dict[str, str], post_storage: FakePostStorage) -> FastAPI:
    return create_app()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with app_client(app) as http:
        # The stores are shared by the session: Redis may miss, as after a restart.
        await timeline(app).redis.delete(ALL_WHOLE)
        yield http


def timeline(app: FastAPI) -> UserTimelineService:
    logic: UserTimelineService = app.state.logic
    return logic


async def write_posts(client: AsyncClient, user_id: int, count: int) -> list[int]:
    """``count`` posts one ms apart; their ids, newest first."""
    post_ids = [new_id() for _ in range(count)]
    for n, post_id in enumerate(post_ids):
        response = await client.post("/write_user_timeline", json={
            "user_id": user_id, "post_id": post_id, "timestamp": 1_700_000_000_000 + n})
        assert response.status_code == 200, response.text
    return post_ids[::-1]


async def read(client: AsyncClient, user_id: int, start: int, stop: int) -> list[int]:
    response = await client.post(
        "/read_user_timeline", json={"user_id": user_id, "start": start, "stop": stop}
    )
    assert response.status_code == 200, response.text
    return [int(post["post_id"]) for post in response.json()["posts"]]


async def test_pages_are_newest_first(client: AsyncClient) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 5)
    assert await read(client, user, 0, 10) == newest_first
    assert await read(client, user, 1, 3) == newest_first[1:3]
    assert await read(client, user, 5, 10) == []
    assert await read(client, user, 3, 3) == []


async def test_a_short_redis_is_refilled_from_mongodb(app: FastAPI, client: AsyncClient) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 5)
    redis = timeline(app).redis
    await redis.delete(str(user))

    assert await read(client, user, 1, 3) == newest_first[1:3]
    # The newest `stop` entries went back, so ranks in Redis are the timeline's.
    cached = cast(list[bytes], await redis.zrevrange(str(user), 0, -1))
    assert [int(member) for member in cached] == newest_first[:3]

    await redis.zrem(str(user), str(newest_first[1]))  # Redis now has a hole
    assert await read(client, user, 0, 10) == newest_first
    assert await redis.zscore(str(user), WHOLE) is not None

    # Whole in Redis: reads past the end no longer need MongoDB.
    await timeline(app).entries.delete_many({"user_id": user})
    assert await read(client, user, 0, 10) == newest_first
    assert await read(client, user, 20, 30) == []


async def test_concurrent_misses_of_one_user_share_one_mongodb_read(
    app: FastAPI, client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 5)
    logic = timeline(app)
    await logic.redis.delete(str(user))
    limits: list[int] = []
    refill = logic._refill

    async def counted(user_id: int, limit: int) -> Any:
        limits.append(limit)
        await asyncio.sleep(0.2)  # a slow read: every request misses while it runs
        return await refill(user_id, limit)

    monkeypatch.setattr(logic, "_refill", counted)
    pages = await asyncio.gather(*(read(client, user, 0, 10) for _ in range(20)))
    assert pages == [newest_first] * 20
    assert limits == [10]


async def test_a_shared_read_too_short_for_a_page_is_read_again(
    app: FastAPI, client: AsyncClient
) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 5)
    await timeline(app).redis.delete(str(user))
    short, longer = await asyncio.gather(read(client, user, 0, 2), read(client, user, 1, 4))
    assert (short, longer) == (newest_first[:2], newest_first[1:4])


async def test_with_the_fresh_store_flag_a_missing_timeline_is_empty_without_mongodb(
    app: FastAPI, client: AsyncClient
) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 3)
    await timeline(app).redis.delete(str(user))
    await timeline(app).redis.set(ALL_WHOLE, b"1")
    try:
        assert await read(client, user, 0, 10) == []  # MongoDB was not read
    finally:
        await timeline(app).redis.delete(ALL_WHOLE)
    assert await read(client, user, 0, 10) == newest_first


async def test_the_flag_is_set_only_on_an_empty_collection(
    app: FastAPI, client: AsyncClient
) -> None:
    redis, flag = timeline(app).redis, unique_name("flag")
    collection = timeline(app).entries.database[unique_name("collection")]
    await flag_fresh_cache(redis, collection, flag)
    assert await redis.exists(flag)
    await redis.delete(flag)
    await collection.insert_one({"user_id": 1})
    await flag_fresh_cache(redis, collection, flag)
    assert not await redis.exists(flag)
    await collection.delete_many({})


async def test_an_empty_timeline_is_empty_and_asks_no_posts(
    post_storage: FakePostStorage, client: AsyncClient
) -> None:
    assert await read(client, new_id(), 0, 10) == []
    assert post_storage.reads == []


async def test_the_posts_are_read_from_post_storage_in_timeline_order(
    post_storage: FakePostStorage, client: AsyncClient
) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 3)
    await read(client, user, 0, 10)
    assert post_storage.reads == [newest_first]


@pytest.mark.parametrize(("start", "stop"), [(-1, 10), (0, -5), (0, 1 << 40)])
async def test_a_page_out_of_range_is_400(client: AsyncClient, start: int, stop: int) -> None:
    response = await client.post(
        "/read_user_timeline", json={"user_id": 1, "start": start, "stop": stop}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidArgument"


async def test_wrk2_read_takes_query_string_arguments(client: AsyncClient) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 2)
    response = await client.get(
        "/wrk2-api/user-timeline/read", params={"user_id": user, "start": 0, "stop": 10},
        headers=FORM,
    )
    assert response.status_code == 200
    assert [int(post["post_id"]) for post in response.json()] == newest_first
    empty = await client.get(f"/wrk2-api/user-timeline/read?user_id={new_id()}&start=0&stop=10")
    assert (empty.status_code, empty.text) == (200, "[]")


@pytest.mark.parametrize(
    ("query", "status", "text"),
    [
        ("user_id=1&start=0", 400, "Incomplete arguments\n"),
        ("user_id=1&start=zero&stop=10", 400, "Get user-timeline failure: start must be"),
        ("user_id=1&start=-3&stop=10", 400, "Get user-timeline failure: start and stop"),
    ],
)
async def test_wrk2_read_errors(client: AsyncClient, query: str, status: int, text: str) -> None:
    response = await client.get(f"/wrk2-api/user-timeline/read?{query}")
    assert response.status_code == status
    assert response.text.startswith(text)


async def test_api_read_is_the_logged_in_users_unless_a_user_id_is_given(
    client: AsyncClient,
) -> None:
    me, other = new_id(), new_id()
    mine = await write_posts(client, me, 2)
    theirs = await write_posts(client, other, 1)
    assert (await client.get("/api/user-timeline/read?start=0&stop=10")).status_code == 401

    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), me, f"username_{me}"))
    response = await client.get("/api/user-timeline/read?start=0&stop=10")
    assert [int(post["post_id"]) for post in response.json()] == mine
    response = await client.get(f"/api/user-timeline/read?start=0&stop=10&user_id={other}")
    assert [int(post["post_id"]) for post in response.json()] == theirs


async def test_a_removed_entry_is_gone_from_mongodb_and_redis(
    app: FastAPI, client: AsyncClient
) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 3)
    removed = newest_first[1]
    assert await read(client, user, 0, 10) == newest_first  # in Redis
    logic = timeline(app)

    response = await client.post(
        "/remove_user_timeline", json={"user_id": user, "post_id": removed}
    )
    assert (response.status_code, response.json()) == (200, {})
    rest = [newest_first[0], newest_first[2]]
    assert await read(client, user, 0, 10) == rest
    assert await logic.redis.zscore(str(user), str(removed)) is None
    assert await logic.entries.count_documents({"user_id": user, "post_id": removed}) == 0
    await logic.redis.delete(str(user))  # a refill from MongoDB does not bring it back
    assert await read(client, user, 0, 10) == rest


async def test_removing_is_idempotent(client: AsyncClient) -> None:
    user = new_id()
    newest_first = await write_posts(client, user, 2)
    for user_id, post_id in ((user, newest_first[0]), (user, newest_first[0]), (user, new_id()),
                             (new_id(), new_id())):
        response = await client.post(
            "/remove_user_timeline", json={"user_id": user_id, "post_id": post_id}
        )
        assert response.status_code == 200, response.text
    assert await read(client, user, 0, 10) == newest_first[1:]
