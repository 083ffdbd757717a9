from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from httpx import AsyncClient

from socialbench.services import url_shorten
from socialbench.services.url_shorten import create_app
from tests.services.support import app_client, mongo_client, unique_name

SHORT_URL = re.compile(r"http://short-url/[A-Za-z0-9]{10}")


@pytest.fixture
async def client(store_env: dict[str, str]) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def stored_count(store_env: dict[str, str]) -> int:
    mongo = mongo_client(store_env)
    try:
        return await mongo["url-shorten"]["url-shorten"].count_documents({})
    finally:
        await mongo.close()


async def test_urls_are_shortened_in_order_and_expand_back(client: AsyncClient) -> None:
    urls = [f"http://{unique_name('site')}.org" for _ in range(3)]
    urls.append(urls[0])  # a url twice gets two short urls, as the original
    response = await client.post("/compose_urls", json={"urls": urls})
    assert response.status_code == 200, response.text
    pairs = response.json()["urls"]
    assert [p["expanded_url"] for p in pairs] == urls
    shorts = [p["shortened_url"] for p in pairs]
    assert all(SHORT_URL.fullmatch(s) for s in shorts)
    assert len(set(shorts)) == 4

    unknown = "http://short-url/0000000000"
    asked = [shorts[2], unknown, shorts[0], shorts[2]]
    expanded = await client.post("/get_extended_urls", json={"shortened_urls": asked})
    assert expanded.status_code == 200, expanded.text
    assert expanded.json()["urls"] == [
        {"shortened_url": shorts[2], "expanded_url": urls[2]},
        {"shortened_url": shorts[0], "expanded_url": urls[0]},
    ]


async def test_no_urls_is_no_urls(client: AsyncClient) -> None:
    assert (await client.post("/compose_urls", json={"urls": []})).json() == {"urls": []}
    answer = await client.post("/get_extended_urls", json={"shortened_urls": []})
    assert answer.json() == {"urls": []}


@pytest.mark.parametrize("body", [{"urls": "http://a.com"}, {"urls": [1]}, {"url": []}, []])
async def test_a_malformed_body_is_400_and_stores_nothing(
    client: AsyncClient, store_env: dict[str, str], body: object
) -> None:
    before = await stored_count(store_env)
    response = await client.post("/compose_urls", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidArgument"
    assert await stored_count(store_env) == before


async def test_a_short_url_already_taken_is_redrawn(
    client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = (await client.post("/compose_urls", json={"urls": ["http://a.com"]})).json()
    taken = first["urls"][0]["shortened_url"]
    fresh = "http://short-url/" + unique_name("x")[-10:]
    draws = iter([taken, fresh])
    monkeypatch.setattr(url_shorten, "new_short_url", lambda: next(draws))

    response = await client.post("/compose_urls", json={"urls": ["http://b.com"]})
    assert response.json()["urls"] == [{"shortened_url": fresh, "expanded_url": "http://b.com"}]
    both = await client.post("/get_extended_urls", json={"shortened_urls": [taken, fresh]})
    assert [p["expanded_url"] for p in both.json()["urls"]] == ["http://a.com", "http://b.com"]


async def test_front_end_expand(client: AsyncClient) -> None:
    url = f"http://{unique_name('site')}.org"
    short = (await client.post("/compose_urls", json={"urls": [url]})).json()["urls"][0]

    found = await client.get("/api/url/expand", params={"shortened_url": short["shortened_url"]})
    assert found.status_code == 200
    assert found.json() == {"shortened_url": short["shortened_url"], "expanded_url": url}

    unknown = await client.get("/api/url/expand",
                               params={"shortened_url": "http://short-url/0000000000"})
    assert unknown.status_code == 404
    assert unknown.text.startswith("Failed to expand url: ")

    missing = await client.get("/api/url/expand")
    assert (missing.status_code, missing.text) == (400, "Incomplete arguments\n")
