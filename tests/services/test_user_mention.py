from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiomcache
import pytest
from httpx import AsyncClient

from socialbench.services.user_mention import create_app
from tests.services.support import app_client, mongo_client, unique_name


@dataclass
class Stores:
    users: Any
    memcached: aiomcache.Client


@pytest.fixture
async def stores(store_env: dict[str, str]) -> AsyncIterator[Stores]:
    """Direct handles on the stores the service reads, for seeding and checking."""
    mongo = mongo_client(store_env)
    host, port = store_env["SOCIALBENCH_MEMCACHED_ADDRESS"].rsplit(":", 1)
    memcached = aiomcache.Client(host, int(port))
    yield Stores(mongo["user"]["user"], memcached)
    await memcached.close()
    await mongo.close()


@pytest.fixture
async def client(stores: Stores) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def add_users(stores: Stores, count: int) -> dict[str, int]:
    """``count`` new users straight into MongoDB: name -> id."""
    users = {unique_name("mention"): random.randrange(1 << 40, 1 << 62) for _ in range(count)}
    await stores.users.insert_many(
        [{"user_id": uid, "username": name} for name, uid in users.items()]
    )
    return users


async def test_mentions_keep_the_order_asked_once_each_and_drop_unknown_names(
    client: AsyncClient, stores: Stores
) -> None:
    users = await add_users(stores, 3)
    a, b, c = users
    unknown = unique_name("nobody")
    asked = [c, unknown, a, c, "has space", b, a]
    response = await client.post("/compose_user_mentions", json={"usernames": asked})
    assert response.status_code == 200, response.text
    assert response.json()["user_mentions"] == [
        {"user_id": str(users[name]), "username": name} for name in (c, a, b)
    ]
    # Found names are cached for the next post; unknown ones are not.
    assert await stores.memcached.get(f"{a}:user_id".encode()) == str(users[a]).encode()
    assert await stores.memcached.get(f"{unknown}:user_id".encode()) is None


async def test_memcached_is_read_before_mongodb(client: AsyncClient, stores: Stores) -> None:
    (name,) = await add_users(stores, 1)
    await stores.memcached.set(f"{name}:user_id".encode(), b"42")
    response = await client.post("/compose_user_mentions", json={"usernames": [name]})
    assert response.json()["user_mentions"] == [{"user_id": "42", "username": name}]


async def test_no_names_is_no_mentions(client: AsyncClient) -> None:
    response = await client.post("/compose_user_mentions", json={"usernames": []})
    assert response.json() == {"user_mentions": []}


@pytest.mark.parametrize("body", [{"usernames": "alice"}, {"usernames": [1]}, {}])
async def test_a_malformed_body_is_400(client: AsyncClient, body: object) -> None:
    response = await client.post("/compose_user_mentions", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidArgument"
