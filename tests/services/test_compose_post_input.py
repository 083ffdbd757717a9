"""compose-post refuses bad input before it asks (or stores) anything (issue 11)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from httpx import AsyncClient
from hypothesis import example, given
from hypothesis import strategies as st

from socialbench.runtime.errors import InvalidArgument
from socialbench.runtime.models import MAX_ITEMS, MAX_TEXT_BYTES, MAX_USERNAME_BYTES
from socialbench.services.compose_post import _json_strings, create_app
from tests.services.support import app_client, serve_neighbours

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
NEIGHBOURS = ("text", "user", "media", "unique-id", "post-storage", "user-timeline",
              "home-timeline")
BAD_IDS = ("99999999999999999999999", "9223372036854775808", "-1", "+5", " 5", "5 ", "1_0",
           "\u0667", "0x10")


class Recorder:
    """Every neighbour of compose-post: records the calls, answers a plain post."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{method}")
        async def call(method: str, request: Request) -> Any:
            body = await request.json()
            self.calls.append(method)
            if method == "compose_text":
                return {"text": body["text"], "user_mentions": [], "urls": []}
            if method == "compose_creator_with_user_id":
                return {"creator": {"user_id": str(body["user_id"]), "username": body["username"]}}
            if method == "compose_media":
                return {"media": []}
            if method == "compose_unique_id":
                return {"post_id": "1234567890123456789"}
            return {}

        return app


@pytest.fixture
async def recorder(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Recorder]:
    fake = Recorder()
    async with serve_neighbours(monkeypatch, fake.app(), *NEIGHBOURS):
        yield fake


@pytest.fixture
async def client(recorder: Recorder) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def compose_form(client: AsyncClient, body: bytes) -> tuple[int, str]:
    response = await client.post("/wrk2-api/post/compose", content=body, headers=FORM)
    return response.status_code, response.text


async def test_a_good_compose_asks_everyone(recorder: Recorder, client: AsyncClient) -> None:
    status, text = await compose_form(client, b"username=u&user_id=0&post_type=0&text=hi")
    assert (status, text) == (200, "Successfully upload post\n")
    assert "store_post" in recorder.calls


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_bad_user_id_is_a_400_and_nothing_is_asked_or_stored(
    recorder: Recorder, client: AsyncClient, bad: str
) -> None:
    status, text = await compose_form(
        client, f"username=u&user_id={bad}&post_type=0&text=hi".encode()
    )
    assert status == 400, text
    assert text.startswith("compost_post failure: user_id must be an integer in [0, ")
    assert recorder.calls == []


@pytest.mark.parametrize("bad", [-1, 2**63, 99999999999999999999999, "7", 7.5])
async def test_the_json_compose_refuses_a_bad_user_id(
    recorder: Recorder, client: AsyncClient, bad: object
) -> None:
    response = await client.post("/compose_post", json={
        "username": "u", "user_id": bad, "text": "hi"})
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith("user_id: ")
    assert recorder.calls == []


@pytest.mark.parametrize("bad", ["4", "-1", "\u0661", "1_0"])
async def test_a_bad_post_type_is_a_400(
    recorder: Recorder, client: AsyncClient, bad: str
) -> None:
    status, _ = await compose_form(client, f"username=u&user_id=1&post_type={bad}&text=hi".encode())
    assert status == 400
    assert recorder.calls == []


async def test_a_text_over_the_cap_is_a_413_and_nothing_is_asked_or_stored(
    recorder: Recorder, client: AsyncClient
) -> None:
    # Over memcached's 1 MiB item: once answered 500 with the post stored.
    for text in ("x" * (MAX_TEXT_BYTES + 1), "é" * (MAX_TEXT_BYTES // 2 + 1), "x" * 1_100_000):
        status, answer = await compose_form(
            client, b"username=u&user_id=1&post_type=0&text=" + text.encode()
        )
        assert status == 413, answer
        assert answer.startswith("compost_post failure: text is ")
        response = await client.post("/compose_post", json={
            "username": "u", "user_id": 1, "text": text})
        assert response.status_code == 413
        assert response.json()["error"] == "PayloadTooLarge"
    assert recorder.calls == []
    status, _ = await compose_form(
        client, b"username=u&user_id=1&post_type=0&text=" + b"x" * MAX_TEXT_BYTES
    )
    assert status == 200


async def test_a_username_over_the_cap_is_a_413_and_nothing_is_asked_or_stored(
    recorder: Recorder, client: AsyncClient
) -> None:
    # A 1 MB username was stored in MongoDB, then answered 500 by memcached (issue 28).
    for username in ("u" * (MAX_USERNAME_BYTES + 1), "é" * (MAX_USERNAME_BYTES // 2 + 1),
                     "u" * (1 << 20)):
        size = len(username.encode())
        status, answer = await compose_form(
            client, f"username={username}&user_id=1&post_type=0&text=hi".encode()
        )
        assert status == 413, answer
        assert answer == (f"compost_post failure: username is {size} bytes of UTF-8, "
                          f"over the cap of {MAX_USERNAME_BYTES}\n")
        response = await client.post("/compose_post", json={
            "username": username, "user_id": 1, "text": "hi"})
        assert response.status_code == 413
        assert response.json()["message"].startswith("username: ")
    assert recorder.calls == []
    status, _ = await compose_form(
        client, b"username=" + b"u" * MAX_USERNAME_BYTES + b"&user_id=1&post_type=0&text=hi"
    )
    assert status == 200


async def test_media_lists_over_the_cap_are_a_413_and_nothing_is_asked(
    recorder: Recorder, client: AsyncClient
) -> None:
    many = MAX_ITEMS + 1
    ids, types = '["1"' + ',"1"' * (many - 1) + "]", '["png"' + ',"png"' * (many - 1) + "]"
    status, text = await compose_form(
        client, f"username=u&user_id=1&post_type=0&text=hi&media_ids={ids}&media_types={types}"
        .encode()
    )
    assert status == 413, text
    assert text.startswith("compost_post failure: media_ids has 129 items, over the cap of 128")
    response = await client.post("/compose_post", json={
        "username": "u", "user_id": 1, "text": "hi",
        "media_ids": ["1"] * many, "media_types": ["png"] * many})
    assert response.status_code == 413
    long_type = "p" * 257
    status, _ = await compose_form(client, (
        f'username=u&user_id=1&post_type=0&text=hi&media_ids=["1"]&media_types=["{long_type}"]'
    ).encode())
    assert status == 413
    assert recorder.calls == []


@pytest.mark.parametrize(
    "body",
    [
        b"username=u&user_id=1&post_type=0&text=caf\xe9",  # Latin-1
        b"username=u&user_id=1&post_type=0&text=%FF",
        b"username=u&user_id=1&post_type=0&text=%ED%A0%80",  # a surrogate
        b"username=\xff&user_id=1&post_type=0&text=hi",
    ],
)
async def test_a_form_that_is_not_utf8_is_a_400_and_nothing_is_stored(
    recorder: Recorder, client: AsyncClient, body: bytes
) -> None:
    status, text = await compose_form(client, body)
    assert status == 400, text
    assert text == "compost_post failure: the form body is not valid UTF-8\n"
    assert recorder.calls == []


async def test_a_json_text_with_a_lone_surrogate_is_a_400(
    recorder: Recorder, client: AsyncClient
) -> None:
    response = await client.post(
        "/compose_post", content=b'{"username": "u", "user_id": 1, "text": "a\\udc00"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert recorder.calls == []


@given(st.text())
@example('["1", 2]')
@example("[1e400]")
@example("[" * 2000)
@example('[true]')
def test_the_media_lists_of_a_form_parse_to_strings_or_a_400(value: str) -> None:
    try:
        items = _json_strings(value, "media_ids")
    except InvalidArgument:
        return
    assert isinstance(items, list) and all(isinstance(item, str) for item in items)
