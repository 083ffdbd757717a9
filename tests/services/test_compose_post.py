from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from httpx import AsyncClient
from socialbench.services.compose_post import create_app

from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.settings import get_settings
from tests.services.support import app_client, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
NEIGHBOURS = ("text", "user", "media", "unique-id", "post-storage", "user-timeline",
              "home-timeline")
COMPOSING = ("compose_text", "compose_creator_with_user_id", "compose_media",
             "compose_unique_id")
POST_ID = 1234567890123456789


@dataclass
class FakeNeighbours:
    """Every neighbour of compose-post in one app, recording the calls in arrival order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    # The four composing calls each wait for the others: proves they are concurrent.
    composing: asyncio.Barrier = field(default_factory=lambda: asyncio.Barrier(4))
    publishing: asyncio.Barrier = field(default_factory=lambda: asyncio.Barrier(2))

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def payload(self, method: str) -> Any:
        [payload] = [p for m, p in self.calls if m == method]
        return payload

    async def answer(self, method: str, body: dict[str, Any]) -> Any:
        if method in COMPOSING:
            await asyncio.wait_for(self.composing.wait(), timeout=5)
        if method in ("write_user_timeline", "write_home_timeline"):
            await asyncio.wait_for(self.publishing.wait(), timeout=5)
        if method == "compose_text":
            return {"text": body["text"].replace("http://example.com", "http://short-url/a"),
                    "user_mentions": [{"user_id": 8, "username": "username_8"}],
                    "urls": [{"shortened_url": "http://short-url/a",
                              "expanded_url": "http://example.com"}]}
        if method == "compose_creator_with_user_id":
            return {"creator": {"user_id": body["user_id"], "username": body["username"]}}
        if method == "compose_media":
            return {"media": [{"media_id": i, "media_type": t}
                              for i, t in zip(body["media_ids"], body["media_types"],
                                              strict=True)]}
        if method == "compose_unique_id":
            return {"post_id": str(POST_ID)}
        return {}

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{method}")
        async def call(method: str, request: Request) -> Any:
            body = await request.json()
            self.calls.append((method, body))
            if method in self.failing:
                error = {"error": "StoreError", "message": f"{method} is down"}
                return JSONResponse(error, status_code=503)
            return await self.answer(method, body)

        return app


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeNeighbours]:
    neighbours = FakeNeighbours()
    async with serve_neighbours(monkeypatch, neighbours.app(), *NEIGHBOURS):
        yield neighbours


@pytest.fixture
async def client(fakes: FakeNeighbours) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def test_a_post_is_composed_concurrently_stored_then_published(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    response = await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hi @username_8 http://example.com",
        "media_ids": ["111111111111111111"], "media_types": ["png"], "post_type": 0})
    assert response.status_code == 200, response.text
    assert response.json() == {"post_id": str(POST_ID)}

    methods = fakes.methods()
    assert sorted(methods[:4]) == sorted(COMPOSING)
    assert methods[4] == "store_post"
    assert sorted(methods[5:]) == ["write_home_timeline", "write_user_timeline"]

    post = fakes.payload("store_post")["post"]
    timestamp = int(post["timestamp"])
    assert post == {
        "post_id": str(POST_ID),
        "creator": {"user_id": "7", "username": "username_7"},
        "req_id": post["req_id"],
        "text": "hi @username_8 http://short-url/a",
        "user_mentions": [{"user_id": "8", "username": "username_8"}],
        "media": [{"media_id": "111111111111111111", "media_type": "png"}],
        "urls": [{"shortened_url": "http://short-url/a", "expanded_url": "http://example.com"}],
        "timestamp": str(timestamp),
        "post_type": 0,
    }
    assert isinstance(post["req_id"], str) and 0 <= int(post["req_id"]) < 1 << 63
    assert fakes.payload("write_user_timeline") == {
        "user_id": 7, "post_id": POST_ID, "timestamp": timestamp}
    assert fakes.payload("write_home_timeline") == {
        "user_id": 7, "post_id": POST_ID, "timestamp": timestamp, "user_mentions_id": [8]}


async def test_no_timeline_is_written_when_the_store_fails(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    fakes.failing.add("store_post")
    response = await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hello"})
    assert response.status_code == 503
    assert "store_post" in fakes.methods()
    assert not {"write_user_timeline", "write_home_timeline"} & set(fakes.methods())


async def test_wrk2_compose_takes_a_raw_form_body(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    # As wrk2 sends it: not url-encoded (spaces, @, :, /, ", [ as they are).
    body = ('username=username_7&user_id=7&text=hello @username_8 http://example.com'
            '&media_ids=["111111111111111111","222222222222222222"]'
            '&media_types=["png","png"]&post_type=0')
    response = await client.post("/wrk2-api/post/compose", content=body.encode(), headers=FORM)
    assert (response.status_code, response.text) == (200, "Successfully upload post\n")
    assert fakes.payload("compose_text") == {"text": "hello @username_8 http://example.com"}
    assert fakes.payload("compose_media") == {
        "media_ids": ["111111111111111111", "222222222222222222"],
        "media_types": ["png", "png"]}
    assert fakes.payload("compose_creator_with_user_id") == {"user_id": 7,
                                                             "username": "username_7"}


async def test_wrk2_compose_without_media_sends_none(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    body = "username=username_7&user_id=7&text=hello&post_type=0&media_ids=[\"1\"]"
    response = await client.post("/wrk2-api/post/compose", content=body, headers=FORM)
    assert response.status_code == 200, response.text
    assert fakes.payload("compose_media") == {"media_ids": [], "media_types": []}


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("username=u&user_id=7&post_type=0", "Incomplete arguments\n"),
        ("username=u&user_id=7&text=&post_type=0", "Incomplete arguments\n"),
        ("user_id=7&text=hi&post_type=0", "Incomplete arguments\n"),
        ("username=u&user_id=seven&text=hi&post_type=0", "compost_post failure: user_id"),
        ("username=u&user_id=7&text=hi&post_type=7", "compost_post failure: post_type"),
        ("username=u&user_id=7&text=hi&post_type=0&media_ids=[1,&media_types=[\"png\"]",
         "compost_post failure: media_ids must be a JSON array"),
        ("username=u&user_id=7&text=hi&post_type=0&media_ids={}&media_types=[\"png\"]",
         "compost_post failure: media_ids must be a JSON array"),
        ("username=u&user_id=7&text=hi&post_type=0&media_ids=[\"1\"]&media_types=[\"a\",\"b\"]",
         "compost_post failure: 1 media_ids but 2 media_types"),
    ],
)
async def test_bad_wrk2_compose_is_400_and_nothing_is_called(
    fakes: FakeNeighbours, client: AsyncClient, body: str, text: str
) -> None:
    response = await client.post("/wrk2-api/post/compose", content=body, headers=FORM)
    assert response.status_code == 400
    assert response.text.startswith(text)
    assert fakes.calls == []


async def test_a_neighbour_failure_is_a_500_with_the_originals_prefix(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    fakes.failing.add("store_post")
    body = "username=u&user_id=7&text=hi&post_type=0"
    response = await client.post("/wrk2-api/post/compose", content=body, headers=FORM)
    assert response.status_code == 500
    assert response.text.startswith("compost_post failure: post-storage: store_post")


async def test_api_compose_is_for_the_logged_in_user(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    body = "post_type=0&text=hello there"
    response = await client.post("/api/post/compose", content=body, headers=FORM)
    assert response.status_code == 401
    assert fakes.calls == []

    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), 42, "username_42"))
    response = await client.post("/api/post/compose", content=body, headers=FORM)
    assert (response.status_code, response.text) == (200, "Successfully upload post\n")
    assert fakes.payload("compose_creator_with_user_id") == {"user_id": 42,
                                                             "username": "username_42"}
    assert fakes.payload("write_user_timeline")["user_id"] == 42
