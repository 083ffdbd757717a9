"""The lighter dispatch of internal routes: which routes take it, and answers as FastAPI's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from httpx import ASGITransport, AsyncClient
from pydantic import BaseModel, Field
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from socialbench import registry
from socialbench.runtime.app import (
    ServiceContext,
    create_service_app,
    service_logic,
    strict_json_body,
)
from socialbench.runtime.dispatch import (
    InternalRoutes,
    find_front_end_routes,
    find_internal_routes,
)
from socialbench.runtime.errors import Conflict
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.models import MAX_ITEMS, Id, Text
from socialbench.runtime.pipelining import StoreConnectionError
from socialbench.runtime.web import failure_prefix, form_args, require_ints, text
from tests.services.support import app_client


class Logic:
    def __init__(self, context: ServiceContext) -> None:
        self.stored: list[Body] = []

    async def setup(self) -> None:
        return None


LogicDep = Annotated[Logic, Depends(service_logic)]


class Body(BaseModel):
    user_id: Id
    text: Text = ""
    post_ids: Annotated[list[Id], Field(max_length=MAX_ITEMS)] = []


class Answer(BaseModel):
    stored: int


def make_app() -> FastAPI:
    router = APIRouter()

    @router.post("/store")
    async def store(body: Body, logic: LogicDep) -> Response:
        """Internal: a body and the logic."""
        logic.stored.append(body)
        if body.user_id == 409:
            raise Conflict("taken")
        if body.user_id == 500:
            raise KeyError("oops")
        if body.user_id == 503:
            raise StoreConnectionError("redis is down")
        return JSONResponse({"user_id": body.user_id})

    @router.post("/count")
    async def count(logic: LogicDep) -> Answer:
        """Internal: no body, a model answered."""
        return Answer(stored=len(logic.stored))

    @router.post("/with_request")
    async def with_request(body: Body, request: Request) -> Response:
        """Not internal: it wants the request."""
        return JSONResponse({})

    @router.get("/read")
    async def read(logic: LogicDep) -> Response:
        """Not internal: a GET."""
        return JSONResponse({})

    # unique-id: a service without stores; its front-end routes are not ours here.
    return create_service_app("unique-id", router, Logic)


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    async with app_client(make_app()) as http:
        yield http


def test_internal_routes_are_posts_of_a_body_and_the_logic_only() -> None:
    app = make_app()
    ignored = (strict_json_body,)  # the app's own check of every JSON body
    found = find_internal_routes(app, (), service_logic, ignored)
    assert set(found) == {"/store", "/count"}
    assert found["/store"].model is Body
    assert found["/count"].model is None
    assert set(find_internal_routes(app, ("/store",), service_logic, ignored)) == {"/count"}
    assert find_internal_routes(app, (), service_logic) == {}  # an unknown dependency


async def test_the_dispatch_answers_an_internal_route_without_the_app_behind_it() -> None:
    app = make_app()

    async def not_called(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("handed to FastAPI")

    logic = Logic(None)  # type: ignore[arg-type]
    dispatch = InternalRoutes(
        not_called, service_app=app, public=(), logic_dependency=service_logic,
        ignored_dependencies=(strict_json_body,), logic=lambda: logic,
        error_answer=lambda scope, exc: JSONResponse({}, status_code=599),
    )
    sent: list[dict[str, Any]] = []
    bodies = [{"type": "http.request", "body": b'{"user_id": 7', "more_body": True},
              {"type": "http.request", "body": b"}", "more_body": False}]

    async def receive() -> dict[str, Any]:
        return bodies.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/store",
             "headers": [(b"content-type", b"application/json")]}
    await dispatch(scope, receive, send)
    assert sent[0]["status"] == 200
    assert sent[1]["body"] == b'{"user_id":7}'
    assert [body.user_id for body in logic.stored] == [7]


BODIES = [
    b'{"user_id": 1, "text": "hello", "post_ids": [1, 2]}',
    b'{"user_id": -1}',
    b'{"user_id": "7"}',
    b'{"user_id": 7.0}',
    b'{"text": "no id"}',
    b'{"user_id": 1, "post_ids": [' + b",".join([b"1"] * (MAX_ITEMS + 1)) + b"]}",
    b'{"user_id": 1, "text": "\\ud800"}',
    b'{"user_id": 1, "text": "\xed\xa0\x80"}',
    b'{"user_id": 1, "text": "\\ud83d\\ude00"}',
    b'{"user_id": 1',
    b"[]",
    b"",
    b'{"user_id": 409}',
    b'{"user_id": 500}',
    b'{"user_id": 503}',
]


@pytest.mark.parametrize("body", BODIES)
async def test_answers_are_those_fastapi_gives(client: AsyncClient, body: bytes) -> None:
    # application/json takes the dispatch; a +json type, which FastAPI reads as JSON too, not.
    fast = await client.post("/store", content=body, headers={"Content-Type": "application/json"})
    full = await client.post("/store", content=body,
                             headers={"Content-Type": "application/test+json"})
    assert (fast.status_code, fast.json()) == (full.status_code, full.json())
    assert fast.headers["content-type"] == full.headers["content-type"]


async def test_errors_are_counted_and_a_model_answer_is_its_json(client: AsyncClient) -> None:
    for user_id in (409, 500, 503):
        await client.post("/store", json={"user_id": user_id})
    errors = (await client.get("/stats")).json()["errors"]
    assert errors == {"Conflict": 1, "InternalError": 1, "StoreError": 1}
    response = await client.post("/count", json={})
    assert (response.status_code, response.json()) == (200, {"stored": 3})
    assert response.headers["content-type"] == "application/json"
    openapi = (await client.get("/openapi.json")).json()
    assert {"/store", "/count", "/with_request", "/read"} <= set(openapi["paths"])


@pytest.mark.parametrize("content_type", [b"application/json", b"application/test+json"])
async def test_a_client_hanging_up_mid_body_is_a_counted_499_not_a_500(
    content_type: bytes,
) -> None:
    # application/json takes the dispatch, +json FastAPI's own body reading.
    app = make_app()
    async with app.router.lifespan_context(app):
        messages = [{"type": "http.request", "body": b'{"user_id": 7', "more_body": True},
                    {"type": "http.disconnect"}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/store", "query_string": b"",
                 "headers": [(b"content-type", content_type)], "app": app}
        await app(scope, receive, send)  # type: ignore[arg-type]
        assert sent[0]["status"] == 499
        assert app.state.logic.stored == []
        stats = await app_client_stats(app)
    assert stats == {"ClientClosedRequest": 1}


async def app_client_stats(app: FastAPI) -> dict[str, int]:
    transport_client = AsyncClient(transport=ASGITransport(app=app), base_url="http://test")
    async with transport_client as http:
        errors: dict[str, int] = (await http.get("/stats")).json()["errors"]
    return errors


# ---------------------------------------------------------------- front-end routes


def make_front_end_app() -> FastAPI:
    """An app named after a service with front-end routes, answering one of them."""
    router = APIRouter()
    path = registry.get("home-timeline").gateway_routes[0]

    @router.api_route(path, methods=["GET", "POST"])
    @failure_prefix("Thing failure")
    async def thing(request: Request, logic: LogicDep) -> Response:
        """Front end: the original's form or query arguments."""
        (user_id,) = require_ints(await form_args(request), "user_id")
        if user_id == 13:
            raise RuntimeError("unlucky")
        if user_id == 409:
            raise Conflict("taken")
        if user_id == 503:
            raise StoreConnectionError("redis is down")
        return text(f"thing {user_id}")

    @router.get("/api/home-timeline/read")
    async def with_a_login(request: Request, logic: LogicDep,
                           user: Annotated[int, Depends(lambda: 1)]) -> Response:
        """Front end with another dependency: FastAPI's."""
        return text("ok")

    return create_service_app("home-timeline", router, Logic)


def test_front_end_routes_taken_are_those_of_the_request_and_the_logic_only() -> None:
    app = make_front_end_app()
    public = registry.get("home-timeline").gateway_routes
    found = find_front_end_routes(app, public, service_logic, (strict_json_body,))
    assert set(found) == {public[0]}
    assert found[public[0]].methods >= {"GET", "POST"}
    assert find_front_end_routes(app, (), service_logic, (strict_json_body,)) == {}


FRONT_END_QUERIES = ["user_id=7", "user_id=x", "", "user_id=13", "user_id=409",
                     "user_id=503", "user_id=%ff", "user_id=1&user_id=2"]


@pytest.mark.parametrize("query", FRONT_END_QUERIES)
async def test_front_end_answers_are_those_fastapi_gives(query: str) -> None:
    path = registry.get("home-timeline").gateway_routes[0]
    async with app_client(make_front_end_app()) as http:
        light = await http.get(f"{path}?{query}")
        # A JSON content type keeps the request on FastAPI's path.
        full = await http.get(f"{path}?{query}", headers={"Content-Type": "application/json"})
        form = await http.post(path, content=query,
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        errors = (await http.get("/stats")).json()["errors"]
    assert (light.status_code, light.text) == (full.status_code, full.text)
    assert (form.status_code, form.text.replace("form body", "query string")) == (
        full.status_code, full.text)
    assert light.headers["content-type"] == full.headers["content-type"]
    if light.status_code >= 400:
        assert sum(errors.values()) == 3, errors  # each path counts its error


async def test_a_front_end_route_is_answered_without_the_app_behind_it() -> None:
    app = make_front_end_app()
    path = registry.get("home-timeline").gateway_routes[0]

    async def not_called(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("handed to FastAPI")

    dispatch = InternalRoutes(
        not_called, service_app=app, public=(path,), logic_dependency=service_logic,
        ignored_dependencies=(strict_json_body,), logic=lambda: Logic(None),  # type: ignore[arg-type]
        error_answer=lambda scope, exc: JSONResponse({}, status_code=599),
    )
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"user_id=7",
             "headers": []}
    await dispatch(scope, receive, send)
    assert (sent[0]["status"], sent[1]["body"]) == (200, b"thing 7\n")
    scope = scope | {"query_string": b"user_id=13"}
    sent.clear()
    await dispatch(scope, receive, send)
    assert sent[0]["status"] == 599  # the runtime's error answer
