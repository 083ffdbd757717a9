from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiomcache
import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.runtime.auth import COOKIE_NAME, verify_token
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.settings import get_settings
from socialbench.services.user import SERVER_ID_FLOOR, create_app, hash_password
from tests.services.support import app_client, mongo_client, point_at, serve_fake, unique_name

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@dataclass
class FakeSocialGraph:
    inserted: list[int] = field(default_factory=list)
    failing: bool = False

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/insert_user")
        async def insert_user(body: dict[str, int]) -> Any:
            if self.failing:
                error = {"error": "StoreError", "message": "redis is down"}
                return JSONResponse(error, status_code=503)
            self.inserted.append(body["user_id"])
            return {}

        return app


@dataclass
class Harness:
    client: AsyncClient
    graph: FakeSocialGraph
    users: Any
    memcached: aiomcache.Client


@pytest.fixture
async def user(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    """The user service with a fake social-graph, and direct handles on its stores."""
    graph = FakeSocialGraph()
    mongo = mongo_client(store_env)
    host, port = store_env["SOCIALBENCH_MEMCACHED_ADDRESS"].rsplit(":", 1)
    memcached = aiomcache.Client(host, int(port))
    async with serve_fake(graph.app()) as graph_url:
        point_at(monkeypatch, "social-graph", graph_url)
        async with app_client(create_app()) as client:
            yield Harness(client, graph, mongo["user"]["user"], memcached)
    await memcached.close()
    await mongo.close()


def new_user(**overrides: Any) -> dict[str, Any]:
    """Registration fields of a user no other test has (ids far from the wrk2 range)."""
    name = unique_name("user")
    fields = {"first_name": "Ada", "last_name": "Lovelace", "username": name,
              "password": f"pw-{name}", "user_id": random.randrange(1 << 40, 1 << 61)}
    return {**fields, **overrides}


async def test_register_stores_a_salted_hash_and_inserts_into_the_graph(user: Harness) -> None:
    fields = new_user()
    response = await user.client.post("/register_user", json=fields)
    assert response.status_code == 200, response.text
    assert response.json() == {"user_id": fields["user_id"]}
    assert user.graph.inserted == [fields["user_id"]]
    stored = await user.users.find_one({"username": fields["username"]}, {"_id": 0})
    assert stored is not None
    assert stored["user_id"] == fields["user_id"]
    assert stored["password"] != fields["password"]
    assert stored["password"] == hash_password(fields["password"], stored["salt"])


async def test_a_taken_username_or_id_is_409(user: Harness) -> None:
    first = new_user()
    assert (await user.client.post("/register_user", json=first)).status_code == 200
    same_name = await user.client.post("/register_user", json=new_user(username=first["username"]))
    same_id = await user.client.post("/register_user", json=new_user(user_id=first["user_id"]))
    assert same_name.status_code == 409
    assert same_name.json()["message"] == f"Username {first['username']} already existed"
    assert same_id.status_code == 409
    assert same_id.json()["message"] == f"User id {first['user_id']} already existed"
    assert user.graph.inserted == [first["user_id"]]


@pytest.mark.parametrize("overrides", [
    {"password": None}, {"user_id": "seven"}, {"user_id": -1}, {"user_id": 1 << 63},
    {"username": "has space"}, {"username": ""},
])
async def test_a_malformed_registration_is_400_and_stores_nothing(
    user: Harness, overrides: dict[str, Any]
) -> None:
    fields = new_user()
    body = {k: v for k, v in {**fields, **overrides}.items() if v is not None}
    response = await user.client.post("/register_user", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidArgument"
    assert await user.users.find_one({"user_id": fields["user_id"]}) is None
    assert user.graph.inserted == []


async def test_a_user_is_kept_when_the_graph_insert_fails(user: Harness) -> None:
    user.graph.failing = True
    fields = new_user()
    response = await user.client.post("/register_user", json=fields)
    assert response.status_code == 503
    assert "redis is down" in response.json()["message"]
    assert await user.users.find_one({"user_id": fields["user_id"]}) is not None


async def test_login_and_user_id(user: Harness) -> None:
    fields = new_user()
    await user.client.post("/register_user", json=fields)

    good = await user.client.post("/login", json={"username": fields["username"],
                                                  "password": fields["password"]})
    assert good.status_code == 200
    logged_in = verify_token(get_settings(), good.json()["token"])
    assert (logged_in.user_id, logged_in.username) == (fields["user_id"], fields["username"])
    # The second login is served from the cached login record.
    assert await user.memcached.get(f"{fields['username']}:login".encode()) is not None
    again = await user.client.post("/login", json={"username": fields["username"],
                                                   "password": fields["password"]})
    assert again.status_code == 200

    for name, password in ((fields["username"], "wrong"), (unique_name("nobody"), "pw")):
        bad = await user.client.post("/login", json={"username": name, "password": password})
        assert bad.status_code == 401
        assert bad.json() == {"error": "Unauthorized", "message": "Incorrect username or password"}


async def test_get_user_id_reads_memcached_then_mongodb(user: Harness) -> None:
    fields = new_user()
    await user.client.post("/register_user", json=fields)
    key = f"{fields['username']}:user_id".encode()
    await user.memcached.delete(key)  # a cold cache: the id comes from MongoDB

    found = await user.client.post("/get_user_id", json={"username": fields["username"]})
    assert found.json() == {"user_id": fields["user_id"]}
    assert await user.memcached.get(key) == str(fields["user_id"]).encode()

    await user.memcached.set(key, b"42")  # the cache is asked first
    cached = await user.client.post("/get_user_id", json={"username": fields["username"]})
    assert cached.json() == {"user_id": 42}

    for unknown in (unique_name("nobody"), "has space"):
        missing = await user.client.post("/get_user_id", json={"username": unknown})
        assert missing.status_code == 404
        assert missing.json()["error"] == "NotFound"


async def test_compose_creator_has_string_ids(user: Harness) -> None:
    response = await user.client.post("/compose_creator_with_user_id",
                                      json={"user_id": 12345678901234567, "username": "ada"})
    assert response.json() == {"creator": {"user_id": "12345678901234567", "username": "ada"}}


async def test_wrk2_register(user: Harness) -> None:
    fields = new_user()
    body = "&".join(f"{k}={v}" for k, v in fields.items())
    response = await user.client.post("/wrk2-api/user/register", content=body, headers=FORM)
    assert (response.status_code, response.text) == (200, "Success!\n")
    assert user.graph.inserted == [fields["user_id"]]

    again = await user.client.post("/wrk2-api/user/register", content=body, headers=FORM)
    assert again.status_code == 409
    assert again.text == (
        f"User registration failure: Username {fields['username']} already existed\n"
    )


@pytest.mark.parametrize("missing", ["first_name", "last_name", "username", "password", "user_id"])
async def test_wrk2_register_without_a_parameter_is_incomplete(
    user: Harness, missing: str
) -> None:
    fields = new_user()
    body = "&".join(f"{k}={v}" for k, v in fields.items() if k != missing)
    response = await user.client.post("/wrk2-api/user/register", content=body, headers=FORM)
    assert (response.status_code, response.text) == (400, "Incomplete arguments\n")
    assert await user.users.find_one({"username": fields["username"]}) is None


async def test_wrk2_register_with_a_non_numeric_id_is_400(user: Harness) -> None:
    body = "&".join(f"{k}={v}" for k, v in new_user(user_id="abc").items())
    response = await user.client.post("/wrk2-api/user/register", content=body, headers=FORM)
    assert response.status_code == 400
    assert response.text.startswith("User registration failure: user_id must be an integer")


async def test_sign_up_makes_an_id_then_login_sets_the_cookie(user: Harness) -> None:
    fields = new_user()
    del fields["user_id"]
    signup = await user.client.post("/api/user/register", data=fields)
    assert signup.status_code == 302
    assert signup.headers["location"] == "/index.html"
    stored = await user.users.find_one({"username": fields["username"]})
    assert stored is not None and stored["user_id"] >= SERVER_ID_FLOOR
    assert user.graph.inserted == [stored["user_id"]]

    credentials = {"username": fields["username"], "password": fields["password"]}
    login = await user.client.post("/api/user/login", data=credentials)
    assert login.status_code == 302
    assert login.headers["location"] == "/main.html"
    token = login.cookies[COOKIE_NAME]
    assert verify_token(get_settings(), token).user_id == stored["user_id"]
    assert "httponly" in login.headers["set-cookie"].lower()

    wrong = await user.client.post("/api/user/login", data={**credentials, "password": "no"})
    assert wrong.status_code == 401
    assert COOKIE_NAME not in wrong.cookies
    assert wrong.text == "User login failure: Incorrect username or password\n"

    incomplete = await user.client.post("/api/user/login", data={"username": fields["username"]})
    assert (incomplete.status_code, incomplete.text) == (400, "Incomplete arguments\n")


async def test_the_login_cookie_is_secure_only_over_tls(user: Harness) -> None:
    fields = new_user()
    await user.client.post("/register_user", json=fields)
    credentials = {"username": fields["username"], "password": fields["password"]}
    plain = await user.client.post("/api/user/login", data=credentials)
    assert plain.status_code == 302
    assert "secure" not in plain.headers["set-cookie"].lower()
    # nginx behind a TLS-terminating proxy passes its X-Forwarded-Proto on.
    for forwarded in ("https", "HTTPS", "https, http"):
        tls = await user.client.post("/api/user/login", data=credentials,
                                     headers={"X-Forwarded-Proto": forwarded})
        assert tls.status_code == 302
        attributes = [a.strip().lower() for a in tls.headers["set-cookie"].split(";")]
        assert "secure" in attributes and "httponly" in attributes, forwarded
    over_http = await user.client.post("/api/user/login", data=credentials,
                                       headers={"X-Forwarded-Proto": "http"})
    assert "secure" not in over_http.headers["set-cookie"].lower()


async def test_sign_up_with_a_taken_username_is_409(user: Harness) -> None:
    fields = new_user()
    await user.client.post("/register_user", json=fields)
    del fields["user_id"]
    response = await user.client.post("/api/user/register", data=fields)
    assert response.status_code == 409
    assert response.text.endswith(f"Username {fields['username']} already existed\n")


async def test_registration_warms_memcached_for_mentions_and_login(user: Harness) -> None:
    fields = new_user()
    response = await user.client.post("/register_user", json=fields)
    assert response.status_code == 200, response.text
    name = fields["username"]
    assert await user.memcached.get(f"{name}:user_id".encode()) == str(fields["user_id"]).encode()
    # With MongoDB's copy gone, login and id lookups are served from the warmed cache.
    await user.users.delete_one({"username": name})
    login = await user.client.post("/login", json={"username": name,
                                                   "password": fields["password"]})
    assert login.status_code == 200, login.text
    looked_up = await user.client.post("/get_user_id", json={"username": name})
    assert looked_up.json() == {"user_id": fields["user_id"]}
