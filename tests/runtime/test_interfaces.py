from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from httpx import AsyncClient
from starlette.responses import Response

from socialbench import registry
from socialbench.runtime import interfaces
from socialbench.runtime.errors import NeighbourError, NotFound
from socialbench.runtime.interfaces import (
    METHODS,
    ComposedText,
    ComposeTextRequest,
    Empty,
    Method,
    PostStorageClient,
    StorePostRequest,
    TextClient,
    UrlShortenClient,
    UserClient,
    WriteHomeTimelineRequest,
)
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.models import Creator, Media, Post, PostType, Url, UserMention
from socialbench.runtime.rpc import Neighbour, encode
from tests.services.support import app_client, serve_fake, serve_neighbours

COMPOSED = {"text": "hi http://short-url/a", "user_mentions": [{"user_id": "8", "username": "b"}],
            "urls": [{"shortened_url": "http://short-url/a", "expanded_url": "http://x.org"}]}


def route_of(method: Method[Any, Any]) -> APIRoute:
    module = importlib.import_module(registry.get(method.service).module)
    [route] = [r for r in module.router.routes
               if isinstance(r, APIRoute) and r.path == method.path]
    return route


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.service}{m.path}")
def test_each_method_is_its_route_with_the_same_models(method: Method[Any, Any]
                                                       ) -> None:
    route = route_of(method)
    assert route.methods == {"POST"}
    bodies = [body.field_info.annotation for body in route.dependant.body_params]
    # A request of no fields (``{}``) is sent to a route that reads no body.
    assert bodies == ([] if method.request is Empty else [method.request])
    assert route.response_model is method.answer


def test_every_method_is_checked_against_its_route() -> None:
    assert set(METHODS) == {m for m in vars(interfaces).values() if isinstance(m, Method)}


def test_every_client_calls_a_service_of_the_registry_through_its_methods() -> None:
    clients = [c for c in vars(interfaces).values()
               if isinstance(c, type) and issubclass(c, interfaces.Client)
               and c is not interfaces.Client]
    assert {c.service for c in clients} == {m.service for m in METHODS}
    assert {c.service for c in clients} <= set(registry.BY_NAME)


class Fake:
    """One neighbour answering ``answers[method]`` (or an error), recording the requests."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, Any]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{method}")
        async def call(method: str, request: Request) -> Any:
            self.requests.append((method, await request.json()))
            answer = self.answers[method]
            if isinstance(answer, tuple):
                return JSONResponse(answer[1], status_code=answer[0])
            if isinstance(answer, bytes):
                return Response(answer, media_type="text/html")
            return JSONResponse(answer)

        return app


@pytest.fixture
async def fake() -> AsyncIterator[tuple[Fake, str]]:
    neighbour = Fake({})
    async with serve_fake(neighbour.app()) as url:
        yield neighbour, url


def neighbour(name: str, url: str) -> Neighbour:
    return Neighbour(name, url, pool_size=2, timeout_s=5.0)


async def test_a_call_sends_the_request_model_and_reads_the_answer_model(
    fake: tuple[Fake, str]
) -> None:
    server, url = fake
    server.answers["compose_text"] = COMPOSED
    text = TextClient(neighbour("text", url))
    composed = await text.compose("hi http://x.org")
    assert composed == ComposedText(
        text="hi http://short-url/a", user_mentions=[UserMention(user_id="8", username="b")],
        urls=[Url(shortened_url="http://short-url/a", expanded_url="http://x.org")])
    assert server.requests == [("compose_text", {"text": "hi http://x.org"})]


@pytest.mark.parametrize("answer", [
    {"text": "hi"},  # fields missing
    {**COMPOSED, "user_mentions": [{"user_id": 8, "username": "b"}]},  # an id not a string
    {**COMPOSED, "user_mentions": [{"user_id": "-1", "username": "b"}]},  # not an id
    [],
])
async def test_an_answer_the_model_refuses_is_a_502_naming_the_neighbour_and_method(
    fake: tuple[Fake, str], answer: Any
) -> None:
    server, url = fake
    server.answers["compose_text"] = answer
    with pytest.raises(NeighbourError) as caught:
        await TextClient(neighbour("text", url)).compose("hi")
    assert caught.value.status_code == 502
    assert caught.value.remote_kind == "BadAnswer"
    assert str(caught.value).startswith("text: compose_text: unexpected answer: ")


async def test_an_answer_that_is_not_json_is_a_502(fake: tuple[Fake, str]) -> None:
    server, url = fake
    server.answers["get_user_id"] = b"<html>"
    with pytest.raises(NeighbourError) as caught:
        await UserClient(neighbour("user", url)).user_id("u")
    assert (caught.value.status_code, caught.value.remote_kind) == (502, "BadAnswer")


async def test_short_urls_not_one_per_url_are_a_502(fake: tuple[Fake, str]) -> None:
    server, url = fake
    server.answers["compose_urls"] = {"urls": []}
    with pytest.raises(NeighbourError) as caught:
        await UrlShortenClient(neighbour("url-shorten", url)).compose(["http://x.org"])
    assert caught.value.status_code == 502
    assert "0 short urls for 1 urls" in str(caught.value)


async def test_a_neighbours_client_error_stays_a_client_error(fake: tuple[Fake, str]) -> None:
    server, url = fake
    server.answers["get_user_id"] = (404, {"error": "NotFound", "message": "no user u"})
    with pytest.raises(NotFound, match="no user u"):
        await UserClient(neighbour("user", url)).user_id("u")
    assert server.requests == [("get_user_id", {"username": "u"})]


async def test_read_posts_passes_the_answer_on_unparsed(fake: tuple[Fake, str]) -> None:
    server, url = fake
    server.answers["read_posts"] = {"posts": []}
    answer = await PostStorageClient(neighbour("post-storage", url)).read_posts_json([3, 1])
    assert answer == b'{"posts":[]}'
    assert server.requests == [("read_posts", {"post_ids": [3, 1]})]


def test_fields_are_encoded_as_their_models_json() -> None:
    post = Post(post_id="12", creator=Creator(user_id="7", username="é"), req_id="1",
                text="hi \u2603 \"@b\"", user_mentions=[UserMention(user_id="8", username="b")],
                media=[Media(media_id="3", media_type="png")],
                urls=[Url(shortened_url="http://short-url/a", expanded_url="http://x.org")],
                timestamp="5", post_type=PostType.REPLY)
    for model in (StorePostRequest(post=post), ComposeTextRequest(text="é \u2603"),
                  WriteHomeTimelineRequest(user_id=1, post_id=2, timestamp=3,
                                           user_mentions_id=[4])):
        assert encode(model.__dict__) == encode(model) == model.model_dump_json().encode()


def test_a_client_refuses_another_services_neighbour() -> None:
    with pytest.raises(ValueError, match="TextClient calls text, not user"):
        TextClient(neighbour("user", "http://127.0.0.1:1"))


async def test_a_bad_answer_reaches_the_caller_as_a_502(monkeypatch: pytest.MonkeyPatch) -> None:
    from socialbench.services.text import create_app

    fake = Fake({"compose_user_mentions": {"user_mentions": [{"user_id": 1}]}})
    async with serve_neighbours(monkeypatch, fake.app(), "url-shorten", "user-mention"):
        http: AsyncClient
        async with app_client(create_app()) as http:
            response = await http.post("/compose_text", json={"text": "hi @bob"})
    assert response.status_code == 502
    assert response.json()["error"] == "NeighbourError"
    assert response.json()["message"].startswith(
        "user-mention: compose_user_mentions: unexpected answer: ")
