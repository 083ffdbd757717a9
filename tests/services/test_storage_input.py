"""post-storage and user refuse bad ids and oversized posts before storing (issue 11)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.models import (
    MAX_ITEMS,
    MAX_PASSWORD_BYTES,
    MAX_PERSON_NAME_BYTES,
    MAX_READ_IDS,
    MAX_STORED_TEXT_BYTES,
    MAX_TEXT_BYTES,
    MAX_USERNAME_BYTES,
)
from socialbench.services import post_storage, user
from tests.services.support import app_client, mongo_client, point_at, serve_fake, unique_name

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def new_post(**overrides: Any) -> dict[str, Any]:
    post = {
        "post_id": str(random.randrange(1, 1 << 62)),
        "creator": {"user_id": "7", "username": "username_7"},
        "req_id": "123456789",
        "text": unique_name("text"),  # what finds the post if it was stored
        "user_mentions": [{"user_id": "8", "username": "username_8"}],
        "media": [{"media_id": "111111111111111111", "media_type": "png"}],
        "urls": [{"shortened_url": "http://short-url/abcdefghij", "expanded_url": "http://x.y"}],
        "timestamp": "1700000000000",
        "post_type": 0,
    }
    return {**post, **overrides}


@pytest.fixture
async def storage(store_env: dict[str, str]) -> AsyncIterator[tuple[FastAPI, AsyncClient]]:
    app = post_storage.create_app()
    async with app_client(app) as client:
        yield app, client


BAD_POSTS = [
    ("post_id", {"post_id": "9223372036854775808"}, 400),
    ("post_id", {"post_id": "-1"}, 400),
    ("post_id", {"post_id": "1_0"}, 400),
    ("post_id", {"post_id": "\u0667"}, 400),
    ("post_id", {"post_id": "007"}, 400),
    ("post_id", {"post_id": " 7"}, 400),
    ("creator", {"creator": {"user_id": "99999999999999999999999", "username": "u"}}, 400),
    ("timestamp", {"timestamp": "-5"}, 400),
    ("user_mentions", {"user_mentions": [{"user_id": "+8", "username": "u"}]}, 400),
    ("text", {"text": "x" * (MAX_STORED_TEXT_BYTES + 1)}, 413),
    ("text", {"text": "x" * 1_100_000}, 413),  # over memcached's item: once a 500, stored
    ("media", {"media": [{"media_id": "1", "media_type": "png"}] * (MAX_ITEMS + 1)}, 413),
    ("urls", {"urls": [{"shortened_url": "s", "expanded_url": "e"}] * (MAX_ITEMS + 1)}, 413),
    # Over memcached's item: once a 500 with the post stored (issue 28).
    ("creator.username", {"creator": {"user_id": "7", "username": "u" * (1 << 20)}}, 413),
    ("user_mentions.0.username",
     {"user_mentions": [{"user_id": "8", "username": "u" * (MAX_USERNAME_BYTES + 1)}]}, 413),
    ("req_id", {"req_id": "1" * (1 << 20)}, 413),
    ("urls.0.expanded_url",
     {"urls": [{"shortened_url": "s", "expanded_url": "e" * (MAX_TEXT_BYTES + 1)}]}, 413),
]


@pytest.mark.parametrize(("field", "change", "status"), BAD_POSTS)
async def test_a_bad_post_is_refused_and_not_stored(
    storage: tuple[FastAPI, AsyncClient], field: str, change: dict[str, Any], status: int
) -> None:
    app, client = storage
    post = new_post(**change)
    response = await client.post("/store_post", json={"post": post})
    assert response.status_code == status, response.text
    assert response.json()["message"].startswith(f"post.{field}")
    if post["post_id"].isascii() and post["post_id"].isdigit():
        post_id = int(post["post_id"])
        if post_id < 2**63:
            assert await app.state.logic.posts.count_documents({"post_id": post_id}) == 0
    assert await app.state.logic.posts.count_documents({"text": post["text"]}) == 0


async def test_reads_refuse_bad_ids_and_too_many(storage: tuple[FastAPI, AsyncClient]) -> None:
    _, client = storage
    for payload, route in (({"post_id": 2**63}, "read_post"), ({"post_id": -1}, "read_post"),
                           ({"post_ids": [1, 2**64]}, "read_posts")):
        assert (await client.post(f"/{route}", json=payload)).status_code == 400
    response = await client.post("/read_posts", json={"post_ids": [1] * (MAX_READ_IDS + 1)})
    assert response.status_code == 413
    response = await client.post("/read_posts", json={"post_ids": [1] * MAX_READ_IDS})
    assert response.status_code == 200


@pytest.fixture
async def user_client(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[AsyncClient, Any, list[Any]]]:
    inserted: list[Any] = []
    graph = FastAPI()

    @graph.post("/insert_user")
    async def insert_user(body: dict[str, Any]) -> Any:
        inserted.append(body)
        return {}

    mongo = mongo_client(store_env)
    async with serve_fake(graph) as graph_url:
        point_at(monkeypatch, "social-graph", graph_url)
        async with app_client(user.create_app()) as client:
            yield client, mongo["user"]["user"], inserted
    await mongo.close()


OUT_OF_RANGE = ("-1", "9223372036854775808", "99999999999999999999999")


@pytest.mark.parametrize("bad", [*OUT_OF_RANGE, "1_0", "\u0667", "+1", " 1"])
async def test_a_registration_with_a_bad_id_is_a_400_and_stores_nothing(
    user_client: tuple[AsyncClient, Any, list[Any]], bad: str
) -> None:
    client, users, inserted = user_client
    name = unique_name("user")
    body = f"first_name=A&last_name=L&username={name}&password=pw&user_id={bad}"
    response = await client.post("/wrk2-api/user/register", content=body.encode(), headers=FORM)
    assert response.status_code == 400, response.text
    assert response.text.startswith("User registration failure: user_id must be an integer in")
    response = await client.post("/register_user", json={
        "first_name": "A", "last_name": "L", "username": name, "password": "pw",
        "user_id": int(bad) if bad in OUT_OF_RANGE else bad})  # strict: no string id
    assert response.status_code == 400, response.text
    assert await users.find_one({"username": name}) is None
    assert inserted == []


async def test_the_creator_of_a_post_needs_a_good_id(
    user_client: tuple[AsyncClient, Any, list[Any]],
) -> None:
    client, _, _ = user_client
    for user_id in (-1, 2**63, "7"):
        response = await client.post("/compose_creator_with_user_id",
                                     json={"user_id": user_id, "username": "u"})
        assert response.status_code == 400, response.text
    response = await client.post("/compose_creator_with_user_id",
                                 json={"user_id": 0, "username": "u"})
    assert response.json() == {"creator": {"user_id": "0", "username": "u"}}


OVERSIZED = [
    ("first_name", MAX_PERSON_NAME_BYTES),
    ("last_name", MAX_PERSON_NAME_BYTES),
    ("username", MAX_USERNAME_BYTES),
    ("password", MAX_PASSWORD_BYTES),
]


@pytest.mark.parametrize(("field", "cap"), OVERSIZED)
@pytest.mark.parametrize("size", ["just over", "1 MB"])
async def test_a_registration_with_a_field_over_its_cap_is_a_413_and_stores_nothing(
    user_client: tuple[AsyncClient, Any, list[Any]], field: str, cap: int, size: str
) -> None:
    client, users, inserted = user_client
    name = unique_name("user")
    fields = {"first_name": "A", "last_name": "L", "username": name, "password": "pw"}
    value = "é" * (cap // 2 + 1) if size == "just over" else "x" * (1 << 20)
    fields[field] = value
    length = len(value.encode())
    for route in ("/wrk2-api/user/register", "/api/user/register"):
        body = "&".join(f"{k}={v}" for k, v in {**fields, "user_id": "5"}.items())
        response = await client.post(route, content=body.encode(), headers=FORM)
        assert response.status_code == 413, response.text
        assert response.text == (f"User registration failure: {field} is {length} bytes of "
                                 f"UTF-8, over the cap of {cap}\n")
    response = await client.post("/register_user", json=fields)
    assert response.status_code == 413, response.text
    assert response.json()["message"] == f"{field}: {length} bytes of UTF-8, over the cap of {cap}"
    assert await users.find_one({"username": fields["username"]}) is None
    assert inserted == []
    # At the cap, a registration is taken.
    fields[field] = name.ljust(cap, "x") if field == "username" else "é" * (cap // 2)
    response = await client.post("/register_user", json=fields)
    assert response.status_code == 200, response.text


async def test_a_login_over_the_caps_is_a_413(
    user_client: tuple[AsyncClient, Any, list[Any]],
) -> None:
    client, _, _ = user_client
    for field, cap in (("username", MAX_USERNAME_BYTES), ("password", MAX_PASSWORD_BYTES)):
        fields = {"username": "u", "password": "pw", field: "x" * (cap + 1)}
        body = "&".join(f"{k}={v}" for k, v in fields.items())
        response = await client.post("/api/user/login", content=body.encode(), headers=FORM)
        assert response.status_code == 413, response.text
        assert response.text.startswith(f"User login failure: {field} is {cap + 1} bytes")
        response = await client.post("/login", json=fields)
        assert response.status_code == 413, response.text
