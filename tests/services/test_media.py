from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import jwt
import pytest
from httpx import AsyncClient

from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.settings import get_settings
from socialbench.services.media import CHUNK_BYTES, create_app
from tests.services.support import app_client, mongo_client

PNG = b"\x89PNG\r\n\x1a\n"
JPEG = b"\xff\xd8\xff\xe0"
MP4 = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01"


def log_in(client: AsyncClient) -> AsyncClient:
    """``client`` with a login cookie of this process's secret."""
    client.cookies.set(COOKIE_NAME, issue_token(get_settings(), 42, "username_42"))
    return client


@pytest.fixture
async def anonymous(store_env: dict[str, str]) -> AsyncIterator[AsyncClient]:
    async with app_client(create_app()) as http:
        yield http


@pytest.fixture
async def client(anonymous: AsyncClient) -> AsyncClient:
    """A logged-in client (uploads need a login)."""
    return log_in(anonymous)


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
    data = PNG + os.urandom(size - len(PNG))
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
    upload = await client.post("/upload-media",
                               files={"media": ("a.jpg", JPEG + b"jpeg!", "image/jpeg")})
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
        log_in(client)
        at_limit = await client.post("/upload-media",
                                     files={"media": ("a.png", PNG + b"x" * (1000 - len(PNG)))})
        over = await client.post("/upload-media", files={"media": ("a.png", PNG + b"x" * size)})
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
        response = await log_in(client).post(
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


async def test_an_upload_needs_a_login(
    anonymous: AsyncClient, store_env: dict[str, str]
) -> None:
    before = await stored_count(store_env)
    files = {"media": ("cat.png", PNG + b"x", "image/png")}
    response = await anonymous.post("/upload-media", files=files)
    assert response.status_code == 401
    assert response.text.startswith("Upload media failure: ")
    # A token signed with the secret that used to be the public default is no login.
    old_default = "socialbench-login-token-secret-change-me"
    payload = {"user_id": "42", "username": "username_42",
               "timestamp": str(int(time.time())), "ttl": "3600"}
    anonymous.cookies.set(COOKIE_NAME, jwt.encode(payload, old_default, algorithm="HS256"))
    forged = await anonymous.post("/upload-media", files=files)
    assert forged.status_code == 401
    assert await stored_count(store_env) == before


@pytest.mark.parametrize("part", [
    ("page.html", b"<html><script>alert(1)</script>", "text/html"),
    ("a.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>', "image/svg+xml"),
    ("a", b"x", "application/octet-stream"),
    ("a.png", b"MZ\x90\x00 a program", "image/png"),  # the bytes are no image
    ("a.png", JPEG + b"...", "image/png"),  # a JPEG declared a PNG
    ("a.png", PNG + b"...", "text/plain"),  # a PNG declared text
    ("clip.mp4", MP4, "image/png"),
])
async def test_an_upload_that_is_not_an_image_or_a_video_is_415(
    client: AsyncClient, store_env: dict[str, str], part: tuple[str, bytes, str]
) -> None:
    before = await stored_count(store_env)
    response = await client.post("/upload-media", files={"media": part})
    assert response.status_code == 415, response.text
    assert response.text.startswith("Upload media failure: ")
    assert await stored_count(store_env) == before


@pytest.mark.parametrize(("part", "media_type", "content_type"), [
    (("clip.mp4", MP4 + b"video", "video/mp4"), "mp4", "video/mp4"),
    (("clip", WEBM + b"video", "video/webm"), "webm", "video/webm"),
    (("cat.JPEG", JPEG + b"img", "image/jpeg"), "jpeg", "image/jpeg"),
    (("cat.png", JPEG + b"img", "image/jpeg"), "jpg", "image/jpeg"),  # the bytes decide
])
async def test_videos_and_images_keep_their_type(
    client: AsyncClient, part: tuple[str, bytes, str], media_type: str, content_type: str
) -> None:
    upload = await client.post("/upload-media", files={"media": part})
    assert upload.status_code == 200, upload.text
    assert upload.json()["media_type"] == media_type
    filename = f"{upload.json()['media_id']}.{media_type}"
    fetched = await client.get("/get-media", params={"filename": filename})
    assert fetched.headers["content-type"] == content_type
    assert fetched.content == part[1]
