from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.services.post_storage import PostStorageService, create_app
from tests.services.support import app_client, unique_name


def new_post(post_id: int | None = None, text: str = "hello") -> dict[str, Any]:
    post_id = post_id if post_id is not None else random.randrange(1, 1 << 62)
    return {
        "post_id": str(post_id),
        "creator": {"user_id": "7", "username": "username_7"},
        "req_id": "123456789",
        "text": text,
        "user_mentions": [{"user_id": "8", "username": "username_8"}],
        "media": [{"media_id": "111111111111111111", "media_type": "png"}],
        "urls": [{"shortened_url": "http://short-url/abcdefghij", "expanded_url": "http://x.y/z"}],
        "timestamp": "1700000000000",
        "post_type": 0,
    }


@pytest.fixture
def app(store_env: dict[str, str]) -> FastAPI:
    return create_app()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with app_client(app) as http:
        yield http


def storage(app: FastAPI) -> PostStorageService:
    logic: PostStorageService = app.state.logic
    return logic


async def store(client: AsyncClient, post: dict[str, Any]) -> None:
    response = await client.post("/store_post", json={"post": post})
    assert response.status_code == 200, response.text


async def read_posts(client: AsyncClient, post_ids: list[int]) -> list[dict[str, Any]]:
    response = await client.post("/read_posts", json={"post_ids": post_ids})
    assert response.status_code == 200, response.text
    posts: list[dict[str, Any]] = response.json()["posts"]
    return posts


async def test_a_stored_post_reads_back_the_same(client: AsyncClient) -> None:
    post = new_post()
    await store(client, post)
    response = await client.post("/read_post", json={"post_id": int(post["post_id"])})
    assert response.status_code == 200
    assert response.json() == {"post": post}


async def test_read_posts_answers_in_the_order_asked_each_post_once(client: AsyncClient) -> None:
    posts = [new_post(text=f"post {i}") for i in range(3)]
    for post in posts:
        await store(client, post)
    a, b, c = (int(p["post_id"]) for p in posts)
    answer = await read_posts(client, [c, a, c, b, a])
    assert [p["text"] for p in answer] == ["post 2", "post 0", "post 1"]


async def test_posts_missing_from_memcached_come_from_mongodb_and_are_cached_again(
    app: FastAPI, client: AsyncClient
) -> None:
    posts = [new_post(text=f"post {i}") for i in range(4)]
    for post in posts:
        await store(client, post)
    ids = [int(p["post_id"]) for p in posts]
    cache = storage(app).cache
    for post_id in ids[1:3]:
        await cache.client.delete(str(post_id).encode())

    assert await read_posts(client, ids) == posts

    for post, post_id in zip(posts, ids, strict=True):
        cached = await cache.get(str(post_id).encode())
        assert cached is not None and orjson.loads(cached) == post


async def test_a_post_only_in_mongodb_keeps_its_shape(app: FastAPI, client: AsyncClient) -> None:
    post = new_post()
    await store(client, post)
    await storage(app).cache.client.delete(post["post_id"].encode())
    response = await client.post("/read_post", json={"post_id": int(post["post_id"])})
    assert response.json() == {"post": post}


async def test_unknown_ids_are_left_out(client: AsyncClient) -> None:
    post = new_post()
    await store(client, post)
    unknown = random.randrange(1, 1 << 62)
    assert await read_posts(client, [unknown, int(post["post_id"])]) == [post]
    assert await read_posts(client, []) == []
    response = await client.post("/read_post", json={"post_id": unknown})
    assert response.status_code == 404
    assert response.json()["error"] == "NotFound"


async def test_a_post_id_is_stored_once(client: AsyncClient) -> None:
    post = new_post()
    await store(client, post)
    again = await client.post("/store_post", json={"post": {**post, "text": "other"}})
    assert again.status_code == 409
    [kept] = await read_posts(client, [int(post["post_id"])])
    assert kept["text"] == post["text"]


@pytest.mark.parametrize(
    ("field", "value"), [("post_id", "not-a-number"), ("post_type", 9), ("creator", None)]
)
async def test_a_malformed_post_is_400_and_not_stored(
    app: FastAPI, client: AsyncClient, field: str, value: Any
) -> None:
    post = {**new_post(text=unique_name("malformed")), field: value}
    response = await client.post("/store_post", json={"post": post})
    assert response.status_code == 400, response.text
    assert await storage(app).posts.count_documents({"text": post["text"]}) == 0


async def test_a_deleted_post_is_gone_from_mongodb_and_memcached(
    app: FastAPI, client: AsyncClient
) -> None:
    post, kept = new_post(), new_post()
    for stored in (post, kept):
        await store(client, stored)
    post_id = int(post["post_id"])
    assert await read_posts(client, [post_id]) == [post]  # cached
    assert await storage(app).cache.get(post["post_id"].encode()) is not None

    response = await client.post("/delete_post", json={"post_id": post_id})
    assert (response.status_code, response.json()) == (200, {})
    assert (await client.post("/read_post", json={"post_id": post_id})).status_code == 404
    assert await read_posts(client, [post_id, int(kept["post_id"])]) == [kept]
    assert await storage(app).cache.get(post["post_id"].encode()) is None
    assert await storage(app).posts.count_documents({"post_id": post_id}) == 0


async def test_a_post_read_before_its_delete_is_not_cached_again_after_it(
    app: FastAPI, client: AsyncClient
) -> None:
    post = new_post()
    await store(client, post)
    key = post["post_id"].encode()
    read_before = await storage(app).cache.get(key)  # a reader that has the post
    assert read_before is not None
    response = await client.post("/delete_post", json={"post_id": int(post["post_id"])})
    assert response.status_code == 200
    await storage(app).cache.fill(key, read_before)  # its fill, landing after the delete
    read = await client.post("/read_post", json={"post_id": int(post["post_id"])})
    assert read.status_code == 404
    assert await read_posts(client, [int(post["post_id"])]) == []


async def test_deleting_is_idempotent(app: FastAPI, client: AsyncClient) -> None:
    post = new_post()
    await store(client, post)
    await storage(app).cache.client.delete(post["post_id"].encode())  # in MongoDB only
    for post_id in (int(post["post_id"]), int(post["post_id"]), random.randrange(1, 1 << 62)):
        response = await client.post("/delete_post", json={"post_id": post_id})
        assert response.status_code == 200, response.text
    assert await read_posts(client, [int(post["post_id"])]) == []
    await store(client, post)  # the id can be stored again
    assert await read_posts(client, [int(post["post_id"])]) == [post]
