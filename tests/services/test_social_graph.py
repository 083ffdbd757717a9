from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.settings import get_settings
from socialbench.services.social_graph import ALL_LOADED, LOADED, SocialGraphService, create_app
from tests.services.support import app_client, connection_to, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def new_id() -> int:
    return random.randrange(1, 1 << 50)


@dataclass
class FakeUser:
    """The user service as social-graph sees it: usernames to ids."""

    ids: dict[str, int] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    # When set, each lookup waits for the other one (proves they are concurrent).
    rendezvous: asyncio.Barrier | None = None

    def add(self) -> tuple[int, str]:
        user_id = new_id()
        self.ids[f"username_{user_id}"] = user_id
        return user_id, f"username_{user_id}"

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/get_user_id")
        async def get_user_id(body: dict[str, str]) -> Any:
            self.asked.append(body["username"])
            if self.rendezvous is not None:
                await asyncio.wait_for(self.rendezvous.wait(), timeout=5)
            if body["username"] not in self.ids:
                error = {"error": "NotFound", "message": f"user {body['username']} not found"}
                return JSONResponse(error, status_code=404)
            return {"user_id": self.ids[body["username"]]}

        return app


@pytest.fixture
async def user(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeUser]:
    fake = FakeUser()
    async with serve_neighbours(monkeypatch, fake.app(), "user"):
        yield fake


@pytest.fixture
def app(store_env: dict[str, str], user: FakeUser) -> FastAPI:
    return create_app()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with app_client(app) as http:
        # The stores are shared by the session: Redis may miss, as after a restart.
        await graph(app).redis.delete(ALL_LOADED)
        yield http


def graph(app: FastAPI) -> SocialGraphService:
    logic: SocialGraphService = app.state.logic
    return logic


async def call(client: AsyncClient, method: str, **payload: Any) -> Any:
    response = await client.post(f"/{method}", json=payload)
    assert response.status_code == 200, response.text
    return response.json()


async def followers(client: AsyncClient, user_id: int) -> list[int]:
    answer: list[int] = (await call(client, "get_followers", user_id=user_id))["user_ids"]
    return answer


async def followees(client: AsyncClient, user_id: int) -> list[int]:
    answer: list[int] = (await call(client, "get_followees", user_id=user_id))["user_ids"]
    return answer


async def test_following_twice_is_a_no_op(app: FastAPI, client: AsyncClient) -> None:
    a, b = new_id(), new_id()
    await call(client, "follow", user_id=a, followee_id=b)
    first = await graph(app).redis.zscore(f"{b}:followers", str(a))
    await call(client, "follow", user_id=a, followee_id=b)

    assert await followers(client, b) == [a]
    assert await followees(client, a) == [b]
    [edge] = await graph(app).edges.find({"follower_id": a}).to_list()
    assert edge["timestamp"] == first
    assert await graph(app).redis.zscore(f"{b}:followers", str(a)) == first


async def test_unfollow_removes_the_edge_everywhere(app: FastAPI, client: AsyncClient) -> None:
    a, b, c = new_id(), new_id(), new_id()
    await call(client, "follow", user_id=a, followee_id=b)
    await call(client, "follow", user_id=a, followee_id=c)
    await call(client, "unfollow", user_id=a, followee_id=b)

    assert await followees(client, a) == [c]
    assert await followers(client, b) == []
    assert await graph(app).edges.count_documents({"follower_id": a, "followee_id": b}) == 0
    await call(client, "unfollow", user_id=a, followee_id=b)  # again: a no-op


async def ended_follows(app: FastAPI, follower: int, followee: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await graph(app).ended_follows.find(
        {"follower_id": follower, "followee_id": followee}, {"_id": 0}).sort(
        "followed_at").to_list()
    return found


async def test_an_unfollow_keeps_the_follow_it_ends_and_a_refollow_starts_anew(
    app: FastAPI, client: AsyncClient
) -> None:
    a, b = new_id(), new_id()
    await call(client, "unfollow", user_id=a, followee_id=b)  # not following: nothing kept
    assert await ended_follows(app, a, b) == []
    await call(client, "follow", user_id=a, followee_id=b)
    [first] = await graph(app).edges.find({"follower_id": a, "followee_id": b}).to_list()
    await call(client, "unfollow", user_id=a, followee_id=b)
    [ended] = await ended_follows(app, a, b)
    assert ended["followed_at"] == first["timestamp"] <= ended["unfollowed_at"]
    assert ended["follower_id"] == a and ended["followee_id"] == b

    await call(client, "follow", user_id=a, followee_id=b)
    [second] = await graph(app).edges.find({"follower_id": a, "followee_id": b}).to_list()
    assert second["timestamp"] >= ended["unfollowed_at"]
    assert await followers(client, b) == [a]
    assert await graph(app).redis.zscore(f"{b}:followers", str(a)) == second["timestamp"]
    await call(client, "unfollow", user_id=a, followee_id=b)
    again = await ended_follows(app, a, b)
    assert [e["followed_at"] for e in again] == [first["timestamp"], second["timestamp"]]
    assert again[0] == ended and again[1]["unfollowed_at"] >= second["timestamp"]
    assert await followers(client, b) == []
    assert await graph(app).edges.count_documents({"follower_id": a, "followee_id": b}) == 0


async def test_a_redis_miss_reads_mongodb_and_refills_redis(
    app: FastAPI, client: AsyncClient
) -> None:
    a, b, c = new_id(), new_id(), new_id()
    await call(client, "follow", user_id=a, followee_id=c)
    await call(client, "follow", user_id=b, followee_id=c)
    redis = graph(app).redis
    await redis.delete(f"{c}:followers", f"{a}:followees")

    assert sorted(await followers(client, c)) == sorted([a, b])
    assert await followees(client, a) == [c]
    cached = await redis.zrange(f"{c}:followers", 0, -1)
    assert cached[0] == LOADED and sorted(cached[1:]) == sorted([str(a).encode(), str(b).encode()])
    await graph(app).edges.delete_many({"followee_id": c})
    assert sorted(await followers(client, c)) == sorted([a, b])  # now from Redis alone


async def test_concurrent_misses_of_one_list_share_one_mongodb_read(
    app: FastAPI, client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = new_id(), new_id(), new_id()
    await call(client, "follow", user_id=a, followee_id=c)
    await call(client, "follow", user_id=b, followee_id=c)
    logic = graph(app)
    await logic.redis.delete(f"{c}:followers")
    loads: list[tuple[int, str]] = []
    load = logic._load

    async def counted(user_id: int, relation: Any, key: str) -> list[int]:
        loads.append((user_id, str(relation)))
        await asyncio.sleep(0.2)  # a slow read: every request misses while it runs
        return await load(user_id, relation, key)

    monkeypatch.setattr(logic, "_load", counted)
    lists = await asyncio.gather(*(followers(client, c) for _ in range(20)))
    assert [sorted(found) for found in lists] == [sorted([a, b])] * 20
    assert loads == [(c, "followers")]


async def test_a_set_a_follow_recreated_after_a_miss_is_not_taken_as_whole(
    app: FastAPI, client: AsyncClient
) -> None:
    a, b, c = new_id(), new_id(), new_id()
    await call(client, "follow", user_id=a, followee_id=c)
    await graph(app).redis.delete(f"{c}:followers")
    await call(client, "follow", user_id=b, followee_id=c)  # recreates the key with b alone
    assert sorted(await followers(client, c)) == sorted([a, b])


async def test_with_the_fresh_store_flag_a_missing_set_is_empty_without_mongodb(
    app: FastAPI, client: AsyncClient
) -> None:
    a, b = new_id(), new_id()
    await graph(app).edges.insert_one({"follower_id": a, "followee_id": b, "timestamp": 1})
    await graph(app).redis.set(ALL_LOADED, b"1")
    try:
        assert await followers(client, b) == []  # MongoDB was not read
        await call(client, "follow", user_id=new_id(), followee_id=b)
        assert len(await followers(client, b)) == 1
    finally:
        await graph(app).redis.delete(ALL_LOADED)
    assert a in await followers(client, b)  # without the flag: read from MongoDB


async def test_a_user_without_followers_is_cached_as_empty(
    app: FastAPI, client: AsyncClient
) -> None:
    loner = new_id()
    await call(client, "insert_user", user_id=loner)
    assert await followers(client, loner) == []
    assert await graph(app).redis.zrange(f"{loner}:followers", 0, -1) == [LOADED]


async def test_follow_by_username_looks_both_users_up_concurrently(
    user: FakeUser, client: AsyncClient
) -> None:
    (a, a_name), (b, b_name) = user.add(), user.add()
    user.rendezvous = asyncio.Barrier(2)
    await call(client, "follow_with_username", user_username=a_name, followee_username=b_name)
    assert sorted(user.asked) == sorted([a_name, b_name])
    assert await followers(client, b) == [a]
    await call(client, "unfollow_with_username", user_username=a_name, followee_username=b_name)
    assert await followers(client, b) == []


async def test_an_unknown_username_is_404_and_nothing_is_stored(
    app: FastAPI, user: FakeUser, client: AsyncClient
) -> None:
    a, a_name = user.add()
    response = await client.post(
        "/follow_with_username", json={"user_username": a_name, "followee_username": "nobody"}
    )
    assert response.status_code == 404
    assert await graph(app).edges.count_documents({"follower_id": a}) == 0


async def test_wrk2_follow_and_unfollow_by_ids_and_by_names(
    user: FakeUser, client: AsyncClient
) -> None:
    (a, a_name), (b, b_name) = user.add(), user.add()
    response = await client.post(
        "/wrk2-api/user/follow", content=f"user_id={a}&followee_id={b}", headers=FORM
    )
    assert (response.status_code, response.text) == (200, "Success!\n")
    assert await followers(client, b) == [a]
    response = await client.post(
        "/wrk2-api/user/unfollow", content=f"user_name={a_name}&followee_name={b_name}",
        headers=FORM,
    )
    assert (response.status_code, response.text) == (200, "Success!\n")
    assert await followers(client, b) == []


@pytest.mark.parametrize(
    ("path", "body", "status", "text"),
    [
        ("/wrk2-api/user/follow", "user_id={a}", 400, "Incomplete arguments\n"),
        ("/wrk2-api/user/unfollow", "followee_name={b_name}", 400, "Incomplete arguments\n"),
        ("/wrk2-api/user/follow", "user_id={a}x&followee_id={b}", 400, "Follow Failed: user_id"),
        ("/wrk2-api/user/follow", "user_name={a_name}&followee_name=no", 404, "Follow Failed: "),
        ("/api/user/follow", "followee_id={b}", 401, "Follow Failed: not logged in"),
    ],
)
async def test_front_end_errors_change_nothing(
    app: FastAPI, user: FakeUser, client: AsyncClient,
    path: str, body: str, status: int, text: str,
) -> None:
    (a, a_name), (b, b_name) = user.add(), user.add()
    body = body.format(a=a, b=b, a_name=a_name, b_name=b_name)
    response = await client.post(path, content=body, headers=FORM)
    assert response.status_code == status
    assert response.text.startswith(text)
    assert await graph(app).edges.count_documents({"follower_id": a}) == 0


async def test_api_routes_take_the_user_from_the_login_cookie(
    user: FakeUser, client: AsyncClient
) -> None:
    (me, my_name), (other, other_name) = user.add(), user.add()
    third = new_id()
    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), me, my_name))
    response = await client.post("/api/user/follow", content=f"followee_name={other_name}",
                                 headers=FORM)
    assert response.status_code == 200, response.text
    await client.post("/api/user/follow", content=f"followee_id={third}", headers=FORM)
    await call(client, "follow", user_id=other, followee_id=me)

    followee_list = await client.get("/api/user/get_followee")
    assert sorted(followee_list.json(), key=str) == sorted(
        [{"followee_id": str(other)}, {"followee_id": str(third)}], key=str
    )
    follower_list = await client.get("/api/user/get_follower")
    assert follower_list.json() == [{"follower_id": str(other)}]

    response = await client.post("/api/user/unfollow", content=f"followee_id={third}",
                                 headers=FORM)
    assert response.status_code == 200
    assert await followees(client, me) == [other]

    client.cookies.clear()
    assert (await client.get("/api/user/get_follower")).status_code == 401


# Bad ids (issue 11): refused at the edge with a 400, nothing stored, the connection kept.

BAD_IDS = ("99999999999999999999999", "9223372036854775808", "-1", "+5", " 5", "1_0",
           "\u0667", "5\u0660")


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_follow_with_a_bad_id_is_a_400_and_stores_nothing(
    app: FastAPI, user: FakeUser, client: AsyncClient, bad: str
) -> None:
    a, b = new_id(), new_id()
    for body in (f"user_id={a}&followee_id={bad}", f"user_id={bad}&followee_id={b}"):
        response = await client.post("/wrk2-api/user/follow", content=body.encode(),
                                     headers=FORM)
        assert response.status_code == 400, response.text
        assert response.text.startswith("Follow Failed: ")
        assert "must be an integer in [0, 9223372036854775807]" in response.text
    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), a, f"username_{a}"))
    response = await client.post("/api/user/follow", content=f"followee_id={bad}".encode(),
                                 headers=FORM)
    assert response.status_code == 400, response.text
    assert await graph(app).edges.count_documents({"follower_id": a}) == 0
    assert await graph(app).edges.count_documents({"followee_id": b}) == 0
    assert await graph(app).redis.exists(f"{a}:followees", f"{b}:followers") == 0


@pytest.mark.parametrize("bad", [-1, 2**63, 99999999999999999999999, "5", 5.0, True])
async def test_the_json_follow_refuses_a_bad_id_and_stores_nothing(
    app: FastAPI, client: AsyncClient, bad: object
) -> None:
    a = new_id()
    response = await client.post("/follow", json={"user_id": a, "followee_id": bad})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidArgument"
    assert response.json()["message"].startswith("followee_id: ")
    assert await graph(app).edges.count_documents({"follower_id": a}) == 0


async def test_ids_zero_and_the_largest_are_valid(app: FastAPI, client: AsyncClient) -> None:
    await call(client, "follow", user_id=0, followee_id=2**63 - 1)
    assert await followers(client, 2**63 - 1) == [0]
    await call(client, "unfollow", user_id=0, followee_id=2**63 - 1)


async def test_a_bad_follow_then_a_good_one_on_one_keep_alive_connection(
    store_env: dict[str, str], user: FakeUser
) -> None:
    app = create_app()
    a, b = new_id(), new_id()
    async with connection_to(app) as conn:
        status, _, body = await conn.request(
            "POST", "/wrk2-api/user/follow", b"user_id=99999999999999999999999&followee_id=1")
        assert status == 400, body
        status, _, body = await conn.request(
            "POST", "/wrk2-api/user/follow", f"user_id={a}&followee_id={b}".encode())
        assert (status, body) == (200, b"Success!\n")
        assert await graph(app).edges.count_documents({"follower_id": a}) == 1
