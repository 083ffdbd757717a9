"""A service's start with its stores' credentials wrong, right, or its stores not up yet:
real FerretDB with a user, a redis-server with ``requirepass``, and a service process."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from socialbench.registry import Store
from socialbench.runtime.settings import Settings, get_settings
from socialbench.runtime.store_check import StoreCredentialsRefused, check_stores_at_start
from socialbench.runtime.stores import Stores
from socialbench.services.post_storage import create_app
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_port,
    mongodb_command,
    port_open,
)
from tests.runtime.conftest import MONGODB_USER, REDIS_PASSWORD
from tests.services.support import app_client

ALL = (Store.REDIS, Store.MEMCACHED, Store.MONGODB)
USER, PASSWORD = MONGODB_USER
WRONG = "not-the-password"


def mongodb_url(server: ServerCommand, password: str | None, *, pymongo: bool = False) -> str:
    login = f"{USER}:{password}@" if password is not None else ""
    options = "&appName=socialbench" if pymongo else ""  # any other option: PyMongo
    return f"mongodb://{login}{server.address}/?authSource=admin{options}"


def settings(mongodb: str, redis: str, memcached: str) -> Settings:
    return Settings(mongodb_url=mongodb, redis_url=redis, memcached_address=memcached,
                    store_connect_timeout_s=1.0, store_call_timeout_s=2.0,
                    mongodb_pool_size=2, redis_pool_size=2, memcached_pool_size=2)


async def check(config: Settings) -> None:
    stores = Stores.connect(config, ALL)
    try:
        await check_stores_at_start(stores, config, service="test-service")
    finally:
        await stores.close()


@pytest.mark.parametrize("pymongo", [False, True], ids=["ours", "pymongo"])
async def test_a_wrong_mongodb_password_stops_the_start_naming_store_host_and_user(
    pymongo: bool, mongodb_user_server: ServerCommand, redis_password_server: ServerCommand,
    memcached_server: ServerCommand,
) -> None:
    config = settings(mongodb_url(mongodb_user_server, WRONG, pymongo=pymongo),
                      f"redis://:{REDIS_PASSWORD}@{redis_password_server.address}/1",
                      memcached_server.address)
    with pytest.raises(StoreCredentialsRefused) as refused:
        await check(config)
    message = str(refused.value)
    assert message.startswith("test-service: MongoDB at "
                              f"{mongodb_user_server.address} refused the credentials of "
                              f"user {USER!r}")
    assert "Authentication failed" in message
    assert WRONG not in message
    assert "Redis" not in message  # Redis's password was right


async def test_no_mongodb_user_where_one_is_needed_stops_the_start(
    mongodb_user_server: ServerCommand, redis_server: ServerCommand,
    memcached_server: ServerCommand,
) -> None:
    config = settings(f"mongodb://{mongodb_user_server.address}",
                      f"redis://{redis_server.address}/0", memcached_server.address)
    with pytest.raises(StoreCredentialsRefused, match="requires a login and the URL gives no "
                                                      "user"):
        await check(config)


@pytest.mark.parametrize(("login", "database", "refusal"),
                         [(f":{WRONG}@", 1, "WRONGPASS"), ("", 0, "NOAUTH")])
async def test_a_wrong_or_missing_redis_password_stops_the_start(
    login: str, database: int, refusal: str, mongodb_server: ServerCommand,
    redis_password_server: ServerCommand, memcached_server: ServerCommand,
) -> None:
    config = settings(f"mongodb://{mongodb_server.address}",
                      f"redis://{login}{redis_password_server.address}/{database}",
                      memcached_server.address)
    with pytest.raises(StoreCredentialsRefused) as refused:
        await check(config)
    message = str(refused.value)
    assert message.startswith(f"test-service: Redis at {redis_password_server.address} "
                              "refused the credentials of user 'default'")
    assert refusal in message
    assert WRONG not in message and "MongoDB" not in message


@pytest.mark.parametrize("pymongo", [False, True], ids=["ours", "pymongo"])
async def test_the_right_credentials_pass_quietly(
    pymongo: bool, mongodb_user_server: ServerCommand, redis_password_server: ServerCommand,
    memcached_server: ServerCommand, caplog: pytest.LogCaptureFixture,
) -> None:
    config = settings(mongodb_url(mongodb_user_server, PASSWORD, pymongo=pymongo),
                      f"redis://:{REDIS_PASSWORD}@{redis_password_server.address}/1",
                      memcached_server.address)
    with caplog.at_level(logging.WARNING, logger="socialbench"):
        await check(config)
    assert caplog.records == []


async def test_stores_not_up_are_logged_and_do_not_stop_the_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mongodb, redis, memcached = (f"127.0.0.1:{free_port()}" for _ in range(3))
    config = settings(f"mongodb://{USER}:{PASSWORD}@{mongodb}",
                      f"redis://:{REDIS_PASSWORD}@{redis}/0", memcached)
    with caplog.at_level(logging.WARNING, logger="socialbench"):
        await check(config)
    logged = " ".join(record.getMessage() for record in caplog.records)
    for store in ("mongodb", "redis", "memcached"):
        assert f"test-service: {store} did not answer at start-up" in logged
    assert PASSWORD not in logged and REDIS_PASSWORD not in logged


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch, memcached_server: ServerCommand,
                redis_server: ServerCommand) -> Iterator[None]:
    monkeypatch.setenv("SOCIALBENCH_MEMCACHED_ADDRESS", memcached_server.address)
    monkeypatch.setenv("SOCIALBENCH_REDIS_URL", f"redis://{redis_server.address}/0")
    monkeypatch.setenv("SOCIALBENCH_STORE_CONNECT_TIMEOUT_S", "1")
    monkeypatch.setenv("SOCIALBENCH_STORE_CALL_TIMEOUT_S", "2")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def post_storage(monkeypatch: pytest.MonkeyPatch, url: str) -> FastAPI:
    monkeypatch.setenv("SOCIALBENCH_MONGODB_URL", url)
    get_settings.cache_clear()
    return create_app()


POST = {"post_id": "4242", "creator": {"user_id": "7", "username": "username_7"},
        "req_id": "1", "text": "through a login", "user_mentions": [], "media": [], "urls": [],
        "timestamp": "1700000000000", "post_type": 0}


async def store_and_read(client: AsyncClient, post_id: int) -> None:
    post = {**POST, "post_id": str(post_id)}
    stored = await client.post("/store_post", json={"post": post})
    assert stored.status_code == 200, stored.text
    again = await client.post("/store_post", json={"post": post})
    assert again.status_code == 409, again.text  # the unique index, through the login
    read = await client.post("/read_posts", json={"post_ids": [post_id]})
    assert read.status_code == 200, read.text
    assert read.json()["posts"][0]["text"] == "through a login"


@pytest.mark.parametrize("pymongo", [False, True], ids=["ours", "pymongo"])
async def test_a_service_works_through_a_login_and_stops_at_start_on_a_wrong_password(
    pymongo: bool, monkeypatch: pytest.MonkeyPatch, service_env: None,
    mongodb_user_server: ServerCommand,
) -> None:
    good = post_storage(monkeypatch, mongodb_url(mongodb_user_server, PASSWORD,
                                                 pymongo=pymongo))
    async with app_client(good) as client:
        await store_and_read(client, 4242 + pymongo)
        health = await client.get("/healthz")
        assert health.status_code == 200, health.text

    bad = post_storage(monkeypatch, mongodb_url(mongodb_user_server, WRONG, pymongo=pymongo))
    with pytest.raises(StoreCredentialsRefused, match=f"refused the credentials of user "
                                                      f"'{USER}'"):
        async with app_client(bad):
            pass


@pytest.mark.parametrize("pymongo", [False, True], ids=["ours", "pymongo"])
async def test_a_service_whose_mongodb_is_not_up_starts_and_is_ready_once_it_is(
    pymongo: bool, monkeypatch: pytest.MonkeyPatch, service_env: None, tmp_path: Path,
) -> None:
    port = free_port()
    url = f"mongodb://127.0.0.1:{port}" + ("/?appName=socialbench" if pymongo else "")
    app = post_storage(monkeypatch, url)
    async with app_client(app) as client:
        waiting = await client.get("/healthz")
        assert waiting.status_code == 503
        assert waiting.json()["status"] == "starting"
        server = ServerProcess(mongodb_command(port, tmp_path / "db"), tmp_path / "mongodb.log")
        try:
            server.wait_ready()
            for _ in range(600):  # the setup is tried every second
                health = await client.get("/healthz")
                if health.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert health.status_code == 200, health.text
            await store_and_read(client, 77)
        finally:
            server.stop()


def test_socialbench_serve_exits_3_naming_the_store_on_a_wrong_password(
    mongodb_user_server: ServerCommand, memcached_server: ServerCommand,
) -> None:
    port = free_port()
    env = {**os.environ,
           "SOCIALBENCH_MONGODB_URL": mongodb_url(mongodb_user_server, WRONG),
           "SOCIALBENCH_MEMCACHED_ADDRESS": memcached_server.address,
           "SOCIALBENCH_JWT_SECRET": "x" * 40}
    done = subprocess.run([sys.executable, "-m", "socialbench.cli", "serve", "post-storage",
                           "--port", str(port)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("socialbench serve: the app's startup failed: "
                    "socialbench.runtime.store_check.StoreCredentialsRefused: post-storage: "
                    f"MongoDB at {mongodb_user_server.address} refused the credentials of user "
                    f"'{USER}' (Authentication failed.)")
    assert WRONG not in done.stderr
    assert not port_open("127.0.0.1", port)
