"""A cache that refuses is still a cache (issue 28, item 8).

Every service a compose and a read pass through runs here, in-process on real stores
(social-graph faked), with a memcached of the test's own that refuses large items or is
killed: composes, registrations, logins and reads still answer 200 from MongoDB, and a
field over its cap is a 413 that changes nothing.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from httpx import ASGITransport, AsyncClient, Response

from socialbench.runtime.cache_aside import CACHE_REFUSED, CACHE_UNAVAILABLE
from socialbench.runtime.models import MAX_USERNAME_BYTES
from socialbench.services import (
    compose_post,
    home_timeline,
    media,
    post_storage,
    text,
    unique_id,
    url_shorten,
    user,
    user_mention,
    user_timeline,
)
from socialbench.stack.servers import ServerProcess, free_port, memcached_command
from tests.services.support import mongo_client, point_at, serve_fake, unique_name

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
# Callees before callers: a service's neighbours are pointed at before it is created.
SERVICES = (
    ("unique-id", unique_id), ("media", media), ("url-shorten", url_shorten),
    ("user-mention", user_mention), ("post-storage", post_storage), ("user", user),
    ("text", text), ("user-timeline", user_timeline), ("home-timeline", home_timeline),
    ("compose-post", compose_post),
)
CACHING = ("post-storage", "user", "user-mention")


@dataclass
class Stack:
    """The services in-process, a fake social-graph, and the test's own memcached."""

    memcached: ServerProcess
    followers: dict[int, list[int]] = field(default_factory=dict)
    apps: dict[str, FastAPI] = field(default_factory=dict)

    def graph_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{method}")
        async def call(method: str, request: Request) -> Any:
            body = await request.json()
            if method == "get_followers":
                return {"user_ids": self.followers.get(body["user_id"], [])}
            return {}  # insert_user

        return app

    async def post(self, service: str, path: str, **kwargs: Any) -> Response:
        transport = ASGITransport(app=self.apps[service])
        async with AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post(path, **kwargs)

    async def call(self, service: str, method: str, body: dict[str, Any]) -> Any:
        response = await self.post(service, f"/{method}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def register(self) -> tuple[int, str]:
        user_id, username = random.randrange(1 << 40, 1 << 61), unique_name("user")
        await self.call("user", "register_user", {
            "first_name": "Ada", "last_name": "Lovelace", "username": username,
            "password": "pw", "user_id": user_id})
        return user_id, username

    async def compose(self, user_id: int, username: str, post_text: str) -> None:
        answer = await self.call("compose-post", "compose_post", {
            "username": username, "user_id": user_id, "text": post_text})
        assert answer["post_id"]

    async def timeline(self, kind: str, user_id: int) -> list[dict[str, Any]]:
        answer = await self.call(f"{kind}-timeline", f"read_{kind}_timeline",
                                 {"user_id": user_id, "start": 0, "stop": 10})
        posts: list[dict[str, Any]] = answer["posts"]
        return posts

    async def cache_errors(self, service: str) -> dict[str, int]:
        transport = ASGITransport(app=self.apps[service])
        async with AsyncClient(transport=transport, base_url="http://test") as http:
            errors: dict[str, int] = (await http.get("/stats")).json()["errors"]
        return {k: v for k, v in errors.items() if k in (CACHE_REFUSED, CACHE_UNAVAILABLE)}


def own_memcached(tmp_path: Path, *options: str) -> Iterator[ServerProcess]:
    command = memcached_command(free_port(), memory_mb=16, threads=1)
    command.argv += options
    server = ServerProcess(command, tmp_path / "memcached.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def memcached(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from own_memcached(tmp_path)


@pytest.fixture
def small_memcached(tmp_path: Path) -> Iterator[ServerProcess]:
    """A memcached whose items are at most 2 kB (a post of a few kB is refused)."""
    yield from own_memcached(tmp_path, "-I", "2k", "-o", "slab_chunk_max=2048")


@pytest.fixture
async def stack(
    request: pytest.FixtureRequest, store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    server: ServerProcess = request.getfixturevalue(request.param)
    monkeypatch.setenv("SOCIALBENCH_MEMCACHED_ADDRESS", server.command.address)
    stack = Stack(server)
    async with AsyncExitStack() as exits:
        point_at(monkeypatch, "social-graph",
                 await exits.enter_async_context(serve_fake(stack.graph_app())))
        for name, module in SERVICES:
            app = module.create_app()
            await exits.enter_async_context(app.router.lifespan_context(app))
            point_at(monkeypatch, name, await exits.enter_async_context(serve_fake(app)))
            stack.apps[name] = app
        yield stack


@pytest.mark.parametrize("stack", ["memcached"], indirect=True)
async def test_a_compose_with_a_1_mb_username_is_a_413_and_changes_nothing(
    stack: Stack, store_env: dict[str, str]
) -> None:
    author, _ = await stack.register()
    _, mentioned = await stack.register()
    marker = uuid.uuid4().hex
    post_text = f"{marker} @{mentioned} http://example.com/{marker}"
    huge = "u" * (1 << 20)

    form = f"username={huge}&user_id={author}&post_type=0&text={post_text}".encode()
    answer = await stack.post("compose-post", "/wrk2-api/post/compose", content=form,
                              headers=FORM)
    assert answer.status_code == 413, answer.text
    assert answer.text == (f"compost_post failure: username is {1 << 20} bytes of UTF-8, "
                           f"over the cap of {MAX_USERNAME_BYTES}\n")
    answer = await stack.post("compose-post", "/compose_post", json={
        "username": huge, "user_id": author, "text": post_text})
    assert answer.status_code == 413, answer.text
    assert answer.json()["message"] == (
        f"username: {1 << 20} bytes of UTF-8, over the cap of {MAX_USERNAME_BYTES}")

    assert await stack.timeline("user", author) == []
    mongo = mongo_client(store_env)
    try:
        assert await mongo["post"]["post"].count_documents({"text": {"$regex": marker}}) == 0
        assert await mongo["url-shorten"]["url-shorten"].count_documents(
            {"expanded_url": f"http://example.com/{marker}"}) == 0
        assert await mongo["user-timeline"]["user-timeline"].count_documents(
            {"user_id": author}) == 0
    finally:
        await mongo.close()


@pytest.mark.parametrize("stack", ["small_memcached"], indirect=True)
async def test_a_post_memcached_refuses_is_stored_and_read_back_from_mongodb(
    stack: Stack,
) -> None:
    author, username = await stack.register()
    follower, _ = await stack.register()
    stack.followers[author] = [follower]
    long_text = "a post over memcached's item size " + "x" * 8000

    await stack.compose(author, username, long_text)

    [post] = await stack.timeline("user", author)
    assert post["text"] == long_text
    assert await stack.timeline("home", follower) == [post]
    read = await stack.call("post-storage", "read_post", {"post_id": int(post["post_id"])})
    assert read == {"post": post}
    assert (await stack.cache_errors("post-storage"))[CACHE_REFUSED] >= 1


@pytest.mark.parametrize("stack", ["memcached"], indirect=True)
async def test_with_memcached_killed_composes_registrations_and_reads_succeed(
    stack: Stack,
) -> None:
    author, username = await stack.register()
    follower, _ = await stack.register()
    _, mentioned = await stack.register()
    stack.followers[author] = [follower]
    await stack.compose(author, username, "before the kill")
    await stack.timeline("home", follower)  # cached

    stack.memcached.process.kill()
    stack.memcached.process.wait()

    newcomer, newcomer_name = await stack.register()
    login = await stack.call("user", "login", {"username": newcomer_name, "password": "pw"})
    assert login["token"]
    await stack.compose(author, username, f"after the kill @{mentioned} @{newcomer_name}")

    mine = await stack.timeline("user", author)
    assert [p["text"] for p in mine] == [f"after the kill @{mentioned} @{newcomer_name}",
                                         "before the kill"]
    assert {m["username"] for m in mine[0]["user_mentions"]} == {mentioned, newcomer_name}
    assert await stack.timeline("home", follower) == mine
    assert await stack.timeline("home", newcomer) == mine[:1]
    for post in mine:
        read = await stack.call("post-storage", "read_post", {"post_id": int(post["post_id"])})
        assert read == {"post": post}
    for service in CACHING:
        assert (await stack.cache_errors(service))[CACHE_UNAVAILABLE] >= 1, service

    transport = ASGITransport(app=stack.apps["post-storage"])
    async with AsyncClient(transport=transport, base_url="http://test") as http:
        health = await http.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "degraded"

    # A delete memcached cannot confirm is not acknowledged (the post might still be
    # cached there); MongoDB's copy is gone all the same.
    post_id = int(mine[0]["post_id"])
    deleted = await stack.post("post-storage", "/delete_post", json={"post_id": post_id})
    assert deleted.status_code == 503, deleted.text
    assert "did not confirm the delete" in deleted.json()["message"]
    missing = await stack.post("post-storage", "/read_post", json={"post_id": post_id})
    assert missing.status_code == 404
