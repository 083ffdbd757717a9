"""The app factory's mapping of every exception to an answer, and keep-alive kept across them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
import pytest
from fastapi import APIRouter, Depends, Request
from httpx import AsyncClient
from pydantic import BaseModel, Field
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from socialbench.runtime.app import ServiceApp, ServiceContext, create_service_app, service_logic
from socialbench.runtime.errors import Conflict
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.models import MAX_ITEMS, Id, Text
from socialbench.runtime.web import failure_prefix, form_args, require_ints, text
from tests.services.support import app_client, connection_to


class Logic:
    def __init__(self, context: ServiceContext) -> None:
        self.stored: list[object] = []

    async def setup(self) -> None:
        return None


class Body(BaseModel):
    user_id: Id
    text: Text = ""
    post_ids: Annotated[list[Id], Field(max_length=MAX_ITEMS)] = []


def make_app() -> ServiceApp:
    router = APIRouter()

    @router.post("/store")
    async def store(body: Body, request: Request) -> Response:
        request.app.state.logic.stored.append(body)
        return JSONResponse({})

    @router.post("/count")
    async def count(body: Body, logic: Annotated[Logic, Depends(service_logic)]) -> dict[str, int]:
        logic.stored.append(body)
        return {"stored": len(logic.stored)}

    @router.post("/unwritable")
    async def unwritable(body: Body, logic: Annotated[Logic, Depends(service_logic)]) -> Any:
        return {"stored": object()}

    @router.post("/overflow")
    async def overflow() -> Response:
        # What pymongo raised for an id past 64 bits, before ids were checked.
        raise OverflowError("MongoDB can only handle up to 8-byte ints")

    @router.post("/bug")
    async def bug() -> Response:
        raise KeyError("oops")

    @router.post("/conflict")
    async def conflict() -> Response:
        raise Conflict("taken")

    @router.post("/wrk2-api/thing")
    @failure_prefix("Thing failure")
    async def front(request: Request) -> Response:
        (user_id,) = require_ints(await form_args(request), "user_id")
        if user_id == 13:
            raise RuntimeError("unlucky")
        return text("Success!")

    # unique-id: a service without stores, so this app needs none.
    return create_service_app("unique-id", router, Logic)


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    async with app_client(make_app()) as http:
        yield http


async def test_an_unexpected_exception_is_a_500_json_answer(client: AsyncClient) -> None:
    for path in ("/overflow", "/bug"):
        response = await client.post(path)
        assert response.status_code == 500
        assert response.json()["error"] == "InternalError"
    response = await client.post("/overflow")
    assert "OverflowError" in response.json()["message"]
    stats = (await client.get("/stats")).json()
    assert stats["errors"]["InternalError"] == 3
    assert stats["requests"] == 4  # the three failures and this /stats


async def test_stats_count_every_request_this_worker_received(client: AsyncClient) -> None:
    for user_id in range(5):
        assert (await client.post("/count", json={"user_id": user_id})).status_code == 200
    assert (await client.post("/count", json={"user_id": "x"})).status_code == 400
    assert (await client.get("/stats")).json()["requests"] == 7


class Record:
    """Middleware: notes each request's path under ``name``."""

    def __init__(self, app: ASGIApp, name: str, seen: list[str]) -> None:
        self.app, self.name, self.seen = app, name, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{self.name} {scope['path']}")
        await self.app(scope, receive, send)


async def test_an_internal_route_is_answered_before_fastapis_middleware() -> None:
    app = make_app()
    seen: list[str] = []
    app.add_middleware(Record, name="fastapi", seen=seen)
    app.runtime_middleware.insert(0, Middleware(Record, name="runtime", seen=seen))
    async with app_client(app) as http:
        response = await http.post("/count", json={"user_id": 1})
        assert (response.status_code, response.json()) == (200, {"stored": 1})
        assert (await http.get("/stats")).status_code == 200
    assert seen == ["runtime /count", "runtime /stats", "fastapi /stats"]


async def test_an_answer_that_cannot_be_written_is_a_500_counted(client: AsyncClient) -> None:
    response = await client.post("/unwritable", json={"user_id": 1})
    assert response.status_code == 500
    assert response.json()["error"] == "InternalError"
    assert "PydanticSerializationError" in response.json()["message"]
    assert (await client.get("/stats")).json()["errors"] == {"InternalError": 1}


async def test_a_front_end_route_answers_its_prefix_on_an_unexpected_exception(
    client: AsyncClient,
) -> None:
    response = await client.post("/wrk2-api/thing", content=b"user_id=13")
    assert (response.status_code, response.text) == (
        500, "Thing failure: RuntimeError: unlucky\n")


async def test_starlette_errors_answer_the_runtimes_json(client: AsyncClient) -> None:
    response = await client.post("/nowhere")
    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "message": "Not Found"}
    response = await client.get("/store")
    assert response.status_code == 405
    assert response.json()["error"] == "ClientError"
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"user_id": 1, "text": "\xff"}', "error parsing the body"),  # not UTF-8 at all
        (b'{"user_id": 1, "text": "\xed\xa0\x80"}', "not valid UTF-8"),  # a surrogate, raw
        (b'{"user_id": 1, "text": "\\ud800"}', "not valid UTF-8"),  # one escaped alone
        (b'{"user_id": 1, "text": "a"', "JSON decode error"),
    ],
)
async def test_a_json_body_that_is_not_utf8_is_a_400_and_not_handled(
    client: AsyncClient, body: bytes, message: str
) -> None:
    response = await client.post(
        "/store", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidArgument"
    assert message in response.json()["message"]
    assert client._transport.app.state.logic.stored == []  # type: ignore[attr-defined]
    # An escaped pair is one valid character.
    ok = await client.post("/store", content=b'{"user_id": 1, "text": "\\ud83d\\ude00"}',
                           headers={"Content-Type": "application/json"})
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "user_id", [-1, 2**63, 99999999999999999999999, "7", 7.0, True, None]
)
async def test_an_id_out_of_range_or_not_an_integer_is_a_400(
    client: AsyncClient, user_id: object
) -> None:
    response = await client.post("/store", json={"user_id": user_id})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidArgument"
    assert response.json()["message"].startswith("user_id: ")


async def test_ids_at_the_ends_of_the_range_are_taken(client: AsyncClient) -> None:
    for user_id in (0, 2**63 - 1):
        assert (await client.post("/store", json={"user_id": user_id})).status_code == 200


async def test_values_over_their_caps_are_a_413(client: AsyncClient) -> None:
    response = await client.post("/store", json={"user_id": 1, "text": "é" * (32 * 1024 + 1)})
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "PayloadTooLarge"
    assert "65538 bytes of UTF-8, over the cap of 65536" in response.json()["message"]
    response = await client.post("/store", json={"user_id": 1, "post_ids": [1] * 129})
    assert response.status_code == 413
    # A cap and another problem together: the other problem decides (400).
    response = await client.post("/store", json={"user_id": -1, "post_ids": [1] * 129})
    assert response.status_code == 400
    ok = await client.post("/store", json={"user_id": 1, "text": "é" * (32 * 1024)})
    assert ok.status_code == 200


# ------------------------------------------------- the same connection, over real HTTP


async def test_an_unexpected_exception_keeps_the_connection_alive() -> None:
    async with connection_to(make_app()) as conn:
        status, headers, body = await conn.request("POST", "/overflow")
        assert status == 500 and orjson.loads(body)["error"] == "InternalError"
        assert headers.get("connection") != "close"
        status, _, body = await conn.request("POST", "/wrk2-api/thing", b"user_id=13")
        assert (status, body) == (500, b"Thing failure: RuntimeError: unlucky\n")
        status, _, body = await conn.request("POST", "/wrk2-api/thing", b"user_id=1")
        assert (status, body) == (200, b"Success!\n")


async def test_a_bad_request_then_a_good_one_on_one_connection() -> None:
    async with connection_to(make_app()) as conn:
        status, _, body = await conn.request(
            "POST", "/wrk2-api/thing", b"user_id=99999999999999999999999")
        assert status == 400
        assert body.startswith(b"Thing failure: user_id must be an integer in [0, ")
        status, _, _ = await conn.request(
            "POST", "/store", b'{"user_id": 1, "text": "\\ud800"}', "application/json")
        assert status == 400
        status, _, body = await conn.request("POST", "/wrk2-api/thing", b"user_id=1")
        assert (status, body) == (200, b"Success!\n")
