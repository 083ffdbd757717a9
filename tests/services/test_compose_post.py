from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from httpx import ASGITransport, AsyncClient
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from socialbench.runtime.app import ServiceApp
from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.settings import get_settings
from socialbench.services import home_timeline, post_storage, user_timeline
from socialbench.services.compose_post import COMPENSATION_FAILED, create_app
from tests.services.support import app_client, point_at, serve_fake, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
NEIGHBOURS = ("text", "user", "media", "unique-id", "post-storage", "user-timeline",
              "home-timeline")
COMPOSING = ("compose_text", "compose_creator_with_user_id", "compose_media",
             "compose_unique_id")
PUBLISHING = ("store_post", "write_user_timeline", "write_home_timeline")
POST_ID = 1234567890123456789


@dataclass
class FakeNeighbours:
    """Every neighbour of compose-post in one app, recording the calls in arrival order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    conflicting: set[str] = field(default_factory=set)
    # The four composing calls each wait for the others: proves they are concurrent.
    composing: asyncio.Barrier = field(default_factory=lambda: asyncio.Barrier(4))
    # The three publishing calls likewise.
    publishing: asyncio.Barrier = field(default_factory=lambda: asyncio.Barrier(3))

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def payload(self, method: str) -> Any:
        [payload] = [p for m, p in self.calls if m == method]
        return payload

    async def rendezvous(self, method: str) -> None:
        if method in COMPOSING:
            await asyncio.wait_for(self.composing.wait(), timeout=5)
        if method in PUBLISHING:
            await asyncio.wait_for(self.publishing.wait(), timeout=5)

    async def answer(self, method: str, body: dict[str, Any]) -> Any:
        if method == "compose_text":
            return {"text": body["text"].replace("http://example.com", "http://short-url/a"),
                    "user_mentions": [{"user_id": "8", "username": "username_8"}],
                    "urls": [{"shortened_url": "http://short-url/a",
                              "expanded_url": "http://example.com"}]}
        if method == "compose_creator_with_user_id":
            return {"creator": {"user_id": str(body["user_id"]), "username": body["username"]}}
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
            await self.rendezvous(method)
            if method in self.failing:
                error = {"error": "StoreError", "message": f"{method} is down"}
                return JSONResponse(error, status_code=503)
            if method in self.conflicting:
                error = {"error": "Conflict", "message": f"{method}: taken"}
                return JSONResponse(error, status_code=409)
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


async def test_a_post_is_composed_then_stored_and_published_concurrently(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    response = await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hi @username_8 http://example.com",
        "media_ids": ["111111111111111111"], "media_types": ["png"], "post_type": 0})
    assert response.status_code == 200, response.text
    assert response.json() == {"post_id": str(POST_ID)}

    methods = fakes.methods()
    assert sorted(methods[:4]) == sorted(COMPOSING)
    assert sorted(methods[4:]) == sorted(PUBLISHING)

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


async def test_a_failed_store_is_undone_timelines_first_then_the_post(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    # A failed store may still have stored (e.g. MongoDB did, memcached failed).
    fakes.failing.add("store_post")
    response = await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hello"})
    assert response.status_code == 503
    methods = fakes.methods()
    assert sorted(methods[4:7]) == sorted(PUBLISHING)
    assert sorted(methods[7:9]) == ["remove_home_timeline", "remove_user_timeline"]
    assert methods[9:] == ["delete_post"]
    assert fakes.payload("delete_post") == {"post_id": POST_ID}


async def test_a_taken_post_id_is_not_deleted(fakes: FakeNeighbours, client: AsyncClient) -> None:
    fakes.conflicting.add("store_post")
    response = await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hello"})
    assert response.status_code == 409
    # The timeline entries written beside it are removed; the post under that id stays.
    assert sorted(fakes.methods()[7:]) == ["remove_home_timeline", "remove_user_timeline"]


async def compose_7(client: AsyncClient) -> Any:
    return await client.post("/compose_post", json={
        "username": "username_7", "user_id": 7, "text": "hi @username_8"})


async def compensation_failures(client: AsyncClient) -> int:
    errors: dict[str, int] = (await client.get("/stats")).json()["errors"]
    return errors.get(COMPENSATION_FAILED, 0)


@pytest.mark.parametrize("failing", ["write_user_timeline", "write_home_timeline"])
async def test_a_failed_timeline_write_is_undone_timelines_first_then_the_post(
    fakes: FakeNeighbours, client: AsyncClient, failing: str
) -> None:
    fakes.failing.add(failing)
    response = await compose_7(client)
    assert response.status_code == 503
    assert response.json()["message"].endswith(f"{failing} is down")

    methods = fakes.methods()
    assert sorted(methods[4:7]) == sorted(PUBLISHING)
    assert sorted(methods[7:9]) == ["remove_home_timeline", "remove_user_timeline"]
    assert methods[9:] == ["delete_post"]
    assert fakes.payload("remove_user_timeline") == {"user_id": 7, "post_id": POST_ID}
    assert fakes.payload("remove_home_timeline") == {
        "user_id": 7, "post_id": POST_ID, "user_mentions_id": [8]}
    assert fakes.payload("delete_post") == {"post_id": POST_ID}
    assert await compensation_failures(client) == 0


async def test_failed_removals_are_counted_and_the_original_error_is_answered(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    fakes.failing |= {"write_home_timeline", "remove_home_timeline", "delete_post"}
    response = await compose_7(client)
    assert response.status_code == 503
    assert response.json() == {
        "error": "NeighbourError",
        "message": "home-timeline: write_home_timeline: write_home_timeline is down"}
    # Every removal is still made, the post last.
    assert sorted(fakes.methods()[7:9]) == ["remove_home_timeline", "remove_user_timeline"]
    assert fakes.methods()[9:] == ["delete_post"]
    assert await compensation_failures(client) == 2


async def test_a_compose_that_succeeds_removes_nothing(
    fakes: FakeNeighbours, client: AsyncClient
) -> None:
    assert (await compose_7(client)).status_code == 200
    assert not {"remove_user_timeline", "remove_home_timeline", "delete_post"} & set(
        fakes.methods())


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


# With the real post-storage, user-timeline and home-timeline (real stores), faults
# injected in front of them; the composing neighbours and social-graph faked.

REAL = ("post-storage", "user-timeline", "home-timeline")
FAKED = ("text", "user", "media", "unique-id", "social-graph")


def new_id() -> int:
    return random.randrange(1, 1 << 50)


class InjectFaults:
    """Answers a method in ``neighbours.faults`` 503, before or after the app serves it."""

    def __init__(self, app: ASGIApp, neighbours: RealNeighbours) -> None:
        self.app = app
        self.neighbours = neighbours

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["path"].lstrip("/") if scope["type"] == "http" else ""
        when = self.neighbours.faults.get(method)
        if when is None:
            await self.app(scope, receive, send)
            return
        if when == "after":
            await self.app(scope, receive, lose_message)
        self.neighbours.injected.append(method)
        error = {"error": "StoreError", "message": f"{method} failed on purpose"}
        await JSONResponse(error, status_code=503)(scope, receive, send)


async def lose_message(message: Message) -> None:
    """A ``send`` whose answer never reaches the caller."""


@dataclass
class RealNeighbours:
    """The real services compose-post publishes to, a fault per method, the fakes' post ids."""

    author: int = field(default_factory=new_id)
    followers: list[int] = field(default_factory=lambda: [new_id(), new_id()])
    mentioned: int = field(default_factory=new_id)
    # method -> "before" (answer 503, do nothing) or "after" (do it, then answer 503)
    faults: dict[str, str] = field(default_factory=dict)
    injected: list[str] = field(default_factory=list)
    post_ids: list[int] = field(default_factory=list)
    apps: dict[str, FastAPI] = field(default_factory=dict)

    def fake_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{method}")
        async def call(method: str, request: Request) -> Any:
            body = await request.json()
            if method == "compose_text":
                mention = {"user_id": str(self.mentioned), "username": f"username_{self.mentioned}"}
                return {"text": body["text"], "user_mentions": [mention], "urls": []}
            if method == "compose_creator_with_user_id":
                return {"creator": {"user_id": str(body["user_id"]), "username": body["username"]}}
            if method == "compose_media":
                return {"media": []}
            if method == "compose_unique_id":
                self.post_ids.append(new_id())
                return {"post_id": str(self.post_ids[-1])}
            if method == "get_followers":
                return {"user_ids": self.followers if body["user_id"] == self.author else []}
            return JSONResponse({"error": "NotFound", "message": method}, status_code=404)

        return app

    def with_faults(self, app: ServiceApp) -> ServiceApp:
        """``app``, its answers to the methods in ``faults`` replaced by a 503."""
        app.runtime_middleware.insert(0, Middleware(InjectFaults, neighbours=self))
        return app

    async def call(self, service: str, method: str, body: dict[str, Any]) -> Any:
        async with AsyncClient(
            transport=ASGITransport(app=self.apps[service]), base_url="http://test"
        ) as http:
            return await http.post(f"/{method}", json=body)

    async def user_timeline(self, user_id: int) -> list[int]:
        answer = await self.call("user-timeline", "read_user_timeline",
                                 {"user_id": user_id, "start": 0, "stop": 10})
        return [int(post["post_id"]) for post in answer.json()["posts"]]

    async def home_timeline(self, user_id: int) -> list[int]:
        answer = await self.call("home-timeline", "read_home_timeline",
                                 {"user_id": user_id, "start": 0, "stop": 10})
        return [int(post["post_id"]) for post in answer.json()["posts"]]

    async def readers(self) -> dict[int, list[int]]:
        """Each reader's home timeline (the post ids in it)."""
        return {reader: await self.home_timeline(reader)
                for reader in (*self.followers, self.mentioned)}

    async def post_is_stored(self, post_id: int) -> bool:
        """Readable from post-storage (memcached or MongoDB)."""
        answer = await self.call("post-storage", "read_post", {"post_id": post_id})
        assert answer.status_code in (200, 404), answer.text
        return bool(answer.status_code == 200)


@pytest.fixture
async def real(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RealNeighbours]:
    neighbours = RealNeighbours()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(serve_fake(neighbours.fake_app()))
        for name in FAKED:
            point_at(monkeypatch, name, url)
        # In calling order: post-storage first, as the timelines call it.
        for name, module in zip(REAL, (post_storage, user_timeline, home_timeline), strict=True):
            app = neighbours.with_faults(module.create_app())
            await stack.enter_async_context(app.router.lifespan_context(app))
            point_at(monkeypatch, name, await stack.enter_async_context(serve_fake(app)))
            neighbours.apps[name] = app
        yield neighbours


@pytest.fixture
async def composer(real: RealNeighbours) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def compose_by(real: RealNeighbours, composer: AsyncClient) -> Any:
    return await composer.post("/compose_post", json={
        "username": f"username_{real.author}", "user_id": real.author, "text": "hello"})


async def test_a_composed_post_is_in_every_timeline(
    real: RealNeighbours, composer: AsyncClient
) -> None:
    response = await compose_by(real, composer)
    assert response.status_code == 200, response.text
    [post_id] = real.post_ids
    assert await real.user_timeline(real.author) == [post_id]
    assert await real.readers() == {reader: [post_id] for reader in await real.readers()}
    assert await real.post_is_stored(post_id)


@pytest.mark.parametrize(
    ("method", "when"),
    [
        ("write_home_timeline", "after"),  # fanned out, then the answer was lost
        ("write_user_timeline", "after"),
        ("write_user_timeline", "before"),
        ("write_home_timeline", "before"),
        ("store_post", "after"),  # stored and cached, then the answer was lost
        ("store_post", "before"),  # nothing stored, the timelines written beside it
    ],
)
async def test_a_failed_compose_leaves_the_post_nowhere(
    real: RealNeighbours, composer: AsyncClient, method: str, when: str
) -> None:
    real.faults[method] = when
    response = await compose_by(real, composer)
    assert response.status_code == 503, response.text
    assert response.json()["message"].endswith(f"{method} failed on purpose")
    assert real.injected == [method]
    [post_id] = real.post_ids

    assert await real.user_timeline(real.author) == []
    assert await real.readers() == {reader: [] for reader in await real.readers()}
    assert not await real.post_is_stored(post_id)
    # Not only unread: gone from the stores and caches.
    users: user_timeline.UserTimelineService = real.apps["user-timeline"].state.logic
    homes: home_timeline.HomeTimelineService = real.apps["home-timeline"].state.logic
    posts: post_storage.PostStorageService = real.apps["post-storage"].state.logic
    assert await users.entries.count_documents({"post_id": post_id}) == 0
    assert await users.redis.zscore(str(real.author), str(post_id)) is None
    for reader in (*real.followers, real.mentioned):
        assert await homes.redis.zscore(home_timeline.timeline_key(reader), str(post_id)) is None
    assert await posts.posts.count_documents({"post_id": post_id}) == 0
    assert await posts.cache.get(str(post_id).encode()) is None
    assert await compensation_failures(composer) == 0


async def test_a_failed_removal_is_counted_and_its_entry_points_at_no_post(
    real: RealNeighbours, composer: AsyncClient
) -> None:
    real.faults.update(write_home_timeline="after", remove_home_timeline="before")
    response = await compose_by(real, composer)
    assert response.status_code == 503
    assert response.json()["message"].endswith("write_home_timeline failed on purpose")
    assert await compensation_failures(composer) == 1
    [post_id] = real.post_ids

    homes: home_timeline.HomeTimelineService = real.apps["home-timeline"].state.logic
    [follower, *_] = real.followers
    # The entry stayed, but the post it points at is deleted: no read shows it.
    assert await homes.redis.zscore(home_timeline.timeline_key(follower), str(post_id))
    assert await real.readers() == {reader: [] for reader in await real.readers()}
    assert await real.user_timeline(real.author) == []
    assert not await real.post_is_stored(post_id)
