from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI

from socialbench.runtime.errors import InvalidArgument
from socialbench.runtime.jsonio import JSONResponse
from socialbench.services.text import MENTION, URL, create_app
from tests.services.support import app_client, point_at, serve_fake, serve_neighbours

KNOWN_USERS = {"alice": "1", "bob": "2"}


@dataclass
class FakeNeighbours:
    """url-shorten and user-mention as the text service sees them, recording every call."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    # When set, each fake waits until the other one was called too (proves concurrency).
    rendezvous: asyncio.Barrier | None = None
    reject_mentions: bool = False

    async def _arrive(self) -> None:
        if self.rendezvous is not None:
            await asyncio.wait_for(self.rendezvous.wait(), timeout=5)

    def app(self) -> FastAPI:
        """Both neighbours in one app (their routes do not overlap)."""
        app = FastAPI()

        @app.post("/compose_urls")
        async def compose_urls(body: dict[str, list[str]]) -> dict[str, Any]:
            self.calls.append(("compose_urls", body))
            await self._arrive()
            return {"urls": [{"shortened_url": f"http://short-url/{i:010d}", "expanded_url": u}
                             for i, u in enumerate(body["urls"])]}

        @app.post("/compose_user_mentions")
        async def compose_user_mentions(body: dict[str, list[str]]) -> Any:
            self.calls.append(("compose_user_mentions", body))
            await self._arrive()
            if self.reject_mentions:
                error = {"error": "InvalidArgument", "message": "bad usernames"}
                return JSONResponse(error, status_code=InvalidArgument.status_code)
            known = [n for n in body["usernames"] if n in KNOWN_USERS]
            return {"user_mentions": [{"user_id": KNOWN_USERS[n], "username": n} for n in known]}

        return app


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeNeighbours]:
    neighbours = FakeNeighbours()
    async with serve_neighbours(monkeypatch, neighbours.app(), "url-shorten", "user-mention"):
        yield neighbours


def test_patterns_are_the_originals() -> None:
    text = "a @bob_1-x, @ b ftp://no http://x.org/p?q=1 https://y.io_(c)!~*'.&=+$%-z/"
    assert MENTION.findall(text) == ["@bob_1-x"]
    # No "/" in the url characters: a path is not part of the url (as the original).
    assert URL.findall(text) == ["http://x.org", "https://y.io_(c)!~*'.&=+$%-z"]


async def test_urls_are_shortened_and_the_text_after_the_last_url_is_kept(
    fakes: FakeNeighbours,
) -> None:
    text = "hi @alice and @carol see http://a.com then https://b.org and the end @alice"
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": text})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["text"] == (
        "hi @alice and @carol see http://short-url/0000000000 then "
        "http://short-url/0000000001 and the end @alice"
    )
    assert body["urls"] == [
        {"shortened_url": "http://short-url/0000000000", "expanded_url": "http://a.com"},
        {"shortened_url": "http://short-url/0000000001", "expanded_url": "https://b.org"},
    ]
    assert body["user_mentions"] == [{"user_id": "1", "username": "alice"}]
    # Each name is asked for once.
    assert ("compose_user_mentions", {"usernames": ["alice", "carol"]}) in fakes.calls


async def test_both_neighbours_are_called_concurrently(fakes: FakeNeighbours) -> None:
    fakes.rendezvous = asyncio.Barrier(2)
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": "@bob http://c.net"})
    assert response.status_code == 200, response.text
    assert response.json()["text"] == "@bob http://short-url/0000000000"


async def test_a_neighbour_is_not_called_with_nothing_to_send(fakes: FakeNeighbours) -> None:
    async with app_client(create_app()) as client:
        plain = await client.post("/compose_text", json={"text": "no links, no names"})
        mentions_only = await client.post("/compose_text", json={"text": "hey @bob"})
    assert plain.json() == {"text": "no links, no names", "user_mentions": [], "urls": []}
    assert mentions_only.json()["urls"] == []
    assert [name for name, _ in fakes.calls] == ["compose_user_mentions"]


@pytest.mark.parametrize("body", [b'{"txt": "x"}', b'{"text": 3}', b"not json", b"[]"])
async def test_a_malformed_body_is_400(fakes: FakeNeighbours, body: bytes) -> None:
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", content=body,
                                     headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidArgument"
    assert fakes.calls == []


async def test_a_neighbours_client_error_comes_back_as_a_client_error(
    fakes: FakeNeighbours,
) -> None:
    fakes.reject_mentions = True
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": "@alice"})
    assert response.status_code == 400
    assert response.json() == {"error": "InvalidArgument", "message": "bad usernames"}


async def test_an_unreachable_neighbour_is_503(
    fakes: FakeNeighbours, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_fake(FastAPI()) as gone:
        pass  # the port is closed again once the block ends
    point_at(monkeypatch, "url-shorten", gone)
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": "see http://a.com"})
        stats = (await client.get("/stats")).json()
    assert response.status_code == 503
    assert response.json()["error"] == "NeighbourUnavailable"
    assert stats["errors"] == {"NeighbourUnavailable": 1}


async def test_more_urls_or_mentions_than_the_cap_are_a_413_and_no_url_is_stored(
    fakes: FakeNeighbours,
) -> None:
    from socialbench.runtime.models import MAX_ITEMS, MAX_TEXT_BYTES

    many = MAX_ITEMS + 1
    async with app_client(create_app()) as client:
        for text in (" ".join(f"http://x.org/{n} http://u{n}.org" for n in range(many)),
                     " ".join(f"@user{n}" for n in range(many))):
            response = await client.post("/compose_text", json={"text": text})
            assert response.status_code == 413, response.text
            assert response.json()["error"] == "PayloadTooLarge"
        response = await client.post("/compose_text", json={"text": "x" * (MAX_TEXT_BYTES + 1)})
        assert response.status_code == 413
        assert fakes.calls == []  # url-shorten stores the urls it is sent: none was
        # A repeated mention counts once.
        response = await client.post("/compose_text", json={"text": "@alice " * many})
        assert response.status_code == 200, response.text
