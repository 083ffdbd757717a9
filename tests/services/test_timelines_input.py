"""user-timeline and home-timeline refuse bad ids and pages before storing (issue 11)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.models import MAX_ITEMS
from socialbench.services import home_timeline, user_timeline
from tests.services.support import app_client, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def new_id() -> int:
    return random.randrange(1, 1 << 50)


def neighbours_app(reads: list[list[int]]) -> FastAPI:
    """post-storage and social-graph: posts are their ids; nobody has followers."""
    app = FastAPI()

    @app.post("/read_posts")
    async def read_posts(body: dict[str, list[int]]) -> dict[str, Any]:
        reads.append(body["post_ids"])
        return {"posts": [{"post_id": str(i)} for i in body["post_ids"]]}

    @app.post("/get_followers")
    async def get_followers(body: dict[str, int]) -> dict[str, Any]:
        return {"user_ids": []}

    return app


@pytest.fixture
async def reads(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[list[int]]]:
    asked: list[list[int]] = []
    async with serve_neighbours(
        monkeypatch, neighbours_app(asked), "post-storage", "social-graph"
    ):
        yield asked


@pytest.fixture(params=["user", "home"])
async def timeline(
    request: pytest.FixtureRequest, store_env: dict[str, str], reads: list[list[int]]
) -> AsyncIterator[tuple[str, FastAPI, AsyncClient]]:
    module = user_timeline if request.param == "user" else home_timeline
    app = module.create_app()
    async with app_client(app) as client:
        yield request.param, app, client


async def stored(kind: str, app: FastAPI, user_id: int) -> int:
    """How many entries the stores hold for ``user_id``'s timeline."""
    logic = app.state.logic
    if kind == "user":
        mongo = await logic.entries.count_documents({"user_id": user_id})
        count: int = mongo + await logic.redis.zcard(str(user_id))
        return count
    return int(await logic.redis.zcard(f"{user_id}:home-timeline"))


@pytest.mark.parametrize(
    ("field", "bad"),
    [("user_id", 2**63), ("post_id", 99999999999999999999999), ("post_id", -1),
     ("timestamp", 2**64), ("post_id", "5"), ("user_id", 1.0)],
)
async def test_a_write_with_a_bad_id_is_a_400_and_stores_nothing(
    timeline: tuple[str, FastAPI, AsyncClient], field: str, bad: object
) -> None:
    kind, app, client = timeline
    user_id, mentioned = new_id(), new_id()
    payload: dict[str, Any] = {"user_id": user_id, "post_id": new_id(), "timestamp": 1}
    if kind == "home":
        payload["user_mentions_id"] = [mentioned]
    payload[field] = bad
    response = await client.post(f"/write_{kind}_timeline", json=payload)
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith(f"{field}: ")
    assert await stored(kind, app, user_id) == 0
    assert await stored(kind, app, mentioned) == 0


@pytest.mark.parametrize("timeline", ["home"], indirect=True)
async def test_home_mentions_are_capped_and_checked(
    timeline: tuple[str, FastAPI, AsyncClient],
) -> None:
    kind, app, client = timeline
    mentioned = [new_id() for _ in range(MAX_ITEMS + 1)]
    base = {"user_id": new_id(), "post_id": new_id(), "timestamp": 1}
    response = await client.post("/write_home_timeline",
                                 json={**base, "user_mentions_id": mentioned})
    assert response.status_code == 413, response.text
    response = await client.post("/write_home_timeline",
                                 json={**base, "user_mentions_id": [mentioned[0], -5]})
    assert response.status_code == 400, response.text
    for user_id in mentioned:
        assert await stored(kind, app, user_id) == 0


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("user_id=99999999999999999999999&start=0&stop=10", "user_id must be an integer in"),
        ("user_id=-1&start=0&stop=10", "user_id must be an integer in"),
        ("user_id=1_0&start=0&stop=10", "user_id must be an integer in"),
        ("user_id=\u0667&start=0&stop=10", "user_id must be an integer in"),
        ("user_id=1&start=\u0660&stop=10", "start must be an integer in"),
        ("user_id=1&start=0&stop=+10", "stop must be an integer in"),
        ("user_id=1&start=0&stop=%2010", "stop must be an integer in"),
        ("user_id=1&start=0&stop=2147483649", "start and stop must be in [0, 2147483648]"),
        ("user_id=1&start=0&stop=%FF", "the query string is not valid UTF-8"),
    ],
)
async def test_a_bad_front_end_read_is_a_400(
    timeline: tuple[str, FastAPI, AsyncClient], reads: list[list[int]], query: str, text: str
) -> None:
    kind, _, client = timeline
    response = await client.get(f"/wrk2-api/{kind}-timeline/read?{query}", headers=FORM)
    assert response.status_code == 400, response.text
    assert response.text.startswith(f"Get {kind}-timeline failure: {text}")
    assert reads == []


async def test_stop_before_start_is_an_empty_page_as_in_the_original(
    timeline: tuple[str, FastAPI, AsyncClient], reads: list[list[int]]
) -> None:
    # The original's handlers: `if (stop <= start || start < 0) return;` (an empty list).
    kind, _, client = timeline
    user_id = new_id()
    response = await client.get(f"/wrk2-api/{kind}-timeline/read?user_id={user_id}"
                                "&start=10&stop=3")
    assert (response.status_code, response.json()) == (200, [])
    response = await client.post(f"/read_{kind}_timeline",
                                 json={"user_id": user_id, "start": 10, "stop": 3})
    assert (response.status_code, response.json()) == (200, {"posts": []})
    assert reads == []


async def test_a_json_read_with_a_bad_id_or_page_is_a_400(
    timeline: tuple[str, FastAPI, AsyncClient], reads: list[list[int]]
) -> None:
    kind, _, client = timeline
    for payload in ({"user_id": 2**63, "start": 0, "stop": 10},
                    {"user_id": 1, "start": "0", "stop": 10},
                    {"user_id": 1, "start": 0, "stop": 2**70}):
        response = await client.post(f"/read_{kind}_timeline", json=payload)
        assert response.status_code == 400, response.text
    assert reads == []


@pytest.mark.parametrize("timeline", ["home"], indirect=True)
async def test_a_long_page_is_read_in_calls_under_post_storages_cap(
    timeline: tuple[str, FastAPI, AsyncClient], reads: list[list[int]]
) -> None:
    from socialbench.runtime.models import MAX_READ_IDS

    _, app, client = timeline
    user_id = new_id()
    post_ids = [new_id() for _ in range(MAX_READ_IDS + 10)]
    await app.state.logic.redis.zadd(
        f"{user_id}:home-timeline", {str(p): n for n, p in enumerate(post_ids)}
    )
    response = await client.post("/read_home_timeline",
                                 json={"user_id": user_id, "start": 0, "stop": 5000})
    assert [int(p["post_id"]) for p in response.json()["posts"]] == post_ids[::-1]
    assert [len(ids) for ids in reads] == [MAX_READ_IDS, 10]
