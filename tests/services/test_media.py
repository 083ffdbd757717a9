from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from httpx import AsyncClient
from socialbench.services.media import CHUNK_BYTES, create_app

from socialbench.runtime.settings import get_settings
from tests.services.support import app_client, mongo_client


@pytest.fixture
async def client(store_env: dict[str, str]) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


async def stored_count(store_env: dict[str, str]) -> int:
    mongo = mongo_client(store_env)
    try:
        return await mongo["media"]["media"].count_documents({})
    finally:
        await mongo.close()


async def test_compose_media_zips_ids_and_types(client: AsyncClient) -> None:
    body = {"media_ids": ["123456789012345678", "2"], "media_types": ["png", "jpg"]}
    response = await client.post("/compose_media", json=body)
    assert response.status_code == 200
    assert response.json() == {"media": [
        {"media_id": "123456789012345678", "media_type": "png"},
        {"media_id": "2", "media_type": "jpg"},
    ]}
    empty = await client.post("/compose_media", json={"media_ids": [], "media_types": []})
    assert empty.json() == {"media": []}


@pytest.mark.parametrize("body", [
    {"media_ids": ["1", "2"], "media_types": ["png"]},
    {"media_ids": "1", "media_types": "png"},
    {"media_ids": ["1"]},
])
async def test_compose_media_rejects_a_malformed_body(client: AsyncClient, body: object) -> None:
    response = await client.post("/compose_media", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidArgument"


@pytest.mark.parametrize(("field", "size"), [("media", 1000), ("file", 2 * CHUNK_BYTES + 17)])
async def test_an_upload_can_be_fetched_back(client: AsyncClient, field: str, size: int) -> None:
    data = os.urandom(size)
    upload = await client.post("/upload-media", files={field: ("cat.PNG", data, "image/png")})
    assert upload.status_code == 200, upload.text
    answer = upload.json()
    assert answer["media_type"] == "png" and answer["media_id"].isdigit()

    fetched = await client.get("/get-media", params={"filename": f"{answer['media_id']}.png"})
    assert fetched.status_code == 200
    assert fetched.headers["content-type"] == "image/png"
    assert fetched.content == data


async def test_the_type_comes_from_the_content_type_without_an_extension(
    client: AsyncClient,
) -> None:
    upload = await client.post("/upload-media", files={"media": ("blob", b"GIF89a", "image/gif")})
    assert upload.json()["media_type"] == "gif"


async def test_get_media_of_an_absent_file_is_404(client: AsyncClient) -> None:
    upload = await client.post("/upload-media", files={"media": ("a.jpg", b"jpeg!", "image/jpeg")})
    media_id = upload.json()["media_id"]
    for filename in ("1.png", f"{media_id}.png", media_id, "nothing"):
        response = await client.get("/get-media", params={"filename": filename})
        assert response.status_code == 404, filename
        assert response.text.startswith("Get media failure: ")
    missing = await client.get("/get-media")
    assert (missing.status_code, missing.text) == (400, "Incomplete arguments\n")


@pytest.mark.parametrize(("files", "data"), [
    ({"other": ("a.png", b"x", "image/png")}, None),  # no media/file field
    ({"media": ("a.png", b"", "image/png")}, None),  # empty file
    ({"media": ("a", b"x", "application/octet-stream")}, None),  # no type to tell
    (None, {"media": "not a file"}),  # a form without a file part
])
async def test_a_bad_upload_is_400_and_stores_nothing(
    client: AsyncClient, store_env: dict[str, str], files: object, data: object
) -> None:
    before = await stored_count(store_env)
    response = await client.post("/upload-media", files=files, data=data)  # type: ignore[arg-type]
    assert response.status_code == 400, response.text
    assert response.text.startswith("Upload media failure: ")
    assert await stored_count(store_env) == before


@pytest.mark.parametrize("size", [1001, 200_000])
async def test_an_upload_over_the_limit_is_413_and_stores_nothing(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setenv("SOCIALBENCH_UPLOAD_MAX_BYTES", "1000")
    get_settings.cache_clear()
    before = await stored_count(store_env)
    async with app_client(create_app()) as client:
        at_limit = await client.post("/upload-media", files={"media": ("a.png", b"x" * 1000)})
        over = await client.post("/upload-media", files={"media": ("a.png", b"x" * size)})
    assert at_limit.status_code == 200
    assert over.status_code == 413
    assert over.text.startswith("Upload media failure: ")
    assert await stored_count(store_env) == before + 1


async def test_a_streamed_upload_is_cut_off_at_the_limit(
    store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOCIALBENCH_UPLOAD_MAX_BYTES", "1000")
    get_settings.cache_clear()

    async def chunked_body() -> AsyncIterator[bytes]:
        yield b'--b\r\nContent-Disposition: form-data; name="media"; filename="a.png"\r\n\r\n'
        for _ in range(100):  # far past the limit, with no Content-Length to tell up front
            yield b"x" * 10_000
        yield b"\r\n--b--\r\n"

    before = await stored_count(store_env)
    async with app_client(create_app()) as client:
        response = await client.post(
            "/upload-media", content=chunked_body(),
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert await stored_count(store_env) == before


async def test_a_file_whose_chunks_are_not_all_stored_is_not_served(
    client: AsyncClient, store_env: dict[str, str]
) -> None:
    mongo = mongo_client(store_env)
    head = {"media_id": "7", "chunk": 0, "data": b"half", "media_type": "png", "chunks": 2,
            "complete": False}
    try:
        await mongo["media"]["media"].delete_many({"media_id": "7"})
        await mongo["media"]["media"].insert_one(head)
        response = await client.get("/get-media", params={"filename": "7.png"})
        assert response.status_code == 404
    finally:
        await mongo["media"]["media"].delete_many({"media_id": "7"})
        await mongo.close()
