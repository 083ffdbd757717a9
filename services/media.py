"""media: the media list of a post, and the media files the front end uploads and shows.

``/compose_media`` zips ``media_ids`` with ``media_types`` (the original's whole job).
The front-end routes ``/upload-media`` and ``/get-media`` keep files in MongoDB
``media.media``: one document per 1 MiB chunk, unique on ``(media_id, chunk)``, so a
file under the upload limit never meets MongoDB's 16 MiB document limit. Chunk 0 (the
head) carries the type and the chunk count; it is inserted first, which claims the
random id atomically, and is marked ``complete`` only once every chunk is stored, so
a reader never sees half a file. Each write is tried once more after a dropped
connection (a restarted MongoDB), as every service's writes are.

Only a logged-in user uploads (the ``login_token`` cookie, as the original's pages do:
the compose form of the main page uploads), and only images and videos: the part's
declared content type and the file's first bytes must both name one of :data:`FORMATS`,
else 415. SVG is not among them (it can carry scripts).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import CurrentUser
from socialbench.runtime.errors import (
    ClientError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    StoreError,
)
from socialbench.runtime.interfaces import ComposeMediaRequest, MediaAnswer
from socialbench.runtime.models import Media, check_media_lists
from socialbench.runtime.mongodb_client import DuplicateKeyError
from socialbench.runtime.pipelining import StoreClientError
from socialbench.runtime.web import failure_prefix, form_args, require

CHUNK_BYTES = 1 << 20
UPLOAD_FIELDS = ("media", "file")
MEDIA_TYPE = re.compile(r"[a-z0-9]{1,10}")
# Room for the multipart boundaries and part headers around the file itself.
MULTIPART_OVERHEAD_BYTES = 64 * 1024
MAX_ID_ATTEMPTS = 3


class UnsupportedMediaType(ClientError):
    """An upload that is not an image or a video of :data:`FORMATS`."""

    status_code = 415


@dataclass(frozen=True)
class MediaFormat:
    """An image or video format the service accepts."""

    media_type: str  # stored and named in URLs (``<id>.<type>``) when the extension is not
    content_type: str  # what /get-media answers with
    extensions: frozenset[str]  # file extensions kept as the stored type
    declared: frozenset[str]  # content types an upload of it may declare
    matches: Callable[[bytes], bool]  # its magic bytes


def _ftyp(*brands: bytes) -> Callable[[bytes], bool]:
    """An ISO base media file (``....ftyp<brand>``) of one of ``brands`` (any when none)."""
    return lambda data: data[4:8] == b"ftyp" and (not brands or data[8:12] in brands)


def _riff(kind: bytes) -> Callable[[bytes], bool]:
    return lambda data: data[:4] == b"RIFF" and data[8:12] == kind


def _format(media_type: str, content_type: str, extensions: str, declared: str,
            matches: Callable[[bytes], bool]) -> MediaFormat:
    return MediaFormat(media_type, content_type, frozenset(extensions.split()),
                       frozenset(declared.split()), matches)


# Most specific first: an AVIF or QuickTime file is an ``ftyp`` file too.
FORMATS: tuple[MediaFormat, ...] = (
    _format("png", "image/png", "png", "image/png image/apng",
            lambda data: data.startswith(b"\x89PNG\r\n\x1a\n")),
    _format("jpg", "image/jpeg", "jpg jpeg", "image/jpeg image/jpg image/pjpeg",
            lambda data: data.startswith(b"\xff\xd8\xff")),
    _format("gif", "image/gif", "gif", "image/gif",
            lambda data: data[:6] in (b"GIF87a", b"GIF89a")),
    _format("webp", "image/webp", "webp", "image/webp", _riff(b"WEBP")),
    _format("avif", "image/avif", "avif", "image/avif", _ftyp(b"avif", b"avis")),
    _format("mov", "video/quicktime", "mov qt", "video/quicktime", _ftyp(b"qt  ")),
    _format("mp4", "video/mp4", "mp4 m4v", "video/mp4 video/x-m4v", _ftyp()),
    _format("webm", "video/webm", "webm mkv", "video/webm video/x-matroska",
            lambda data: data.startswith(b"\x1a\x45\xdf\xa3")),
    _format("ogv", "video/ogg", "ogv ogg", "video/ogg", lambda data: data.startswith(b"OggS")),
    _format("avi", "video/x-msvideo", "avi", "video/x-msvideo video/avi video/msvideo",
            _riff(b"AVI ")),
)
FORMAT_OF_TYPE = {ext: fmt for fmt in FORMATS for ext in fmt.extensions}


def new_media_id() -> str:
    """A random 63-bit id, as the decimal string the front end uses."""
    return str(secrets.randbits(63))


class MediaService:
    """The service's logic: zip media lists, store and load media files."""

    def __init__(self, context: ServiceContext) -> None:
        self.files = context.stores.require_mongodb()["media"]["media"]
        self.max_bytes = context.settings.upload_max_bytes

    async def setup(self) -> None:
        await self.files.create_index([("media_id", 1), ("chunk", 1)], unique=True)

    @staticmethod
    def compose(media_ids: list[str], media_types: list[str]) -> list[Media]:
        """``{media_id, media_type}`` pairs; a client error if the lists differ in length."""
        check_media_lists(media_ids, media_types)
        return [
            Media(media_id=media_id, media_type=media_type)
            for media_id, media_type in zip(media_ids, media_types, strict=True)
        ]

    async def store(self, data: bytes, media_type: str) -> str:
        """Store a media file under a new id and return the id."""
        chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        media_id = await self._claim_id(chunks[0], media_type, len(chunks))
        if len(chunks) > 1:
            try:
                await self.files.insert_many([{"media_id": media_id, "chunk": n, "data": chunk}
                                              for n, chunk in enumerate(chunks) if n > 0])
                await self.files.update_one(
                    {"media_id": media_id, "chunk": 0}, {"$set": {"complete": True}})
            except BaseException:
                # The id is ours (its head claimed it): drop the partial file. If even that
                # fails, the leftovers are never served (their head is not complete).
                with contextlib.suppress(StoreClientError):
                    await self.files.delete_many({"media_id": media_id})
                raise
        return media_id

    async def _claim_id(self, head: bytes, media_type: str, chunk_count: int) -> str:
        """Insert the head chunk under a fresh id (redrawn if taken) and return the id."""
        for _ in range(MAX_ID_ATTEMPTS):
            media_id = new_media_id()
            document: dict[str, Any] = {
                "media_id": media_id, "chunk": 0, "data": head, "media_type": media_type,
                "chunks": chunk_count, "complete": chunk_count == 1,
            }
            try:
                await self.files.insert_one(document)
            except DuplicateKeyError:
                continue
            return media_id
        raise StoreError(f"no free media id after {MAX_ID_ATTEMPTS} attempts")

    async def load(self, media_id: str, media_type: str) -> bytes:
        """The bytes of a complete media file; :class:`NotFound` otherwise."""
        head = await self.files.find_one({"media_id": media_id, "chunk": 0}, {"_id": 0})
        if head is None or not head.get("complete") or head.get("media_type") != media_type:
            raise NotFound(f"no media {media_id}.{media_type}")
        if head["chunks"] == 1:
            return bytes(head["data"])
        cursor = self.files.find(
            {"media_id": media_id, "chunk": {"$gt": 0}}, {"_id": 0, "data": 1}
        ).sort("chunk", 1)
        rest = [bytes(doc["data"]) async for doc in cursor]
        return b"".join([bytes(head["data"]), *rest])


MediaDep = Annotated[MediaService, Depends(service_logic)]
router = APIRouter()


class UploadAnswer(BaseModel):
    media_id: str
    media_type: str


@router.post("/compose_media")
async def compose_media(body: ComposeMediaRequest, service: MediaDep) -> MediaAnswer:
    """``media_ids`` zipped with ``media_types``; 400 if their lengths differ."""
    return MediaAnswer(media=service.compose(body.media_ids, body.media_types))


# Front-end routes (behind nginx).


async def _at_most(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    """``stream``, failing with 413 once it has passed ``limit`` bytes."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"the upload is larger than {limit} bytes")
        yield chunk


def media_type_of(upload: UploadFile, data: bytes) -> str:
    """The stored type of an image or video upload; 415 for anything else.

    The part's content type and the file's magic bytes must name the same format of
    :data:`FORMATS`; the type is the file's extension when it names that format too
    (``cat.JPEG``: ``jpeg``), else the format's own (``jpg``).
    """
    declared = (upload.content_type or "").split(";", 1)[0].strip().lower()
    if not declared.startswith(("image/", "video/")):
        raise UnsupportedMediaType(
            f"only images and videos can be uploaded, not {declared or 'an untyped file'}"
        )
    found = next((fmt for fmt in FORMATS if fmt.matches(data)), None)
    if found is None:
        raise UnsupportedMediaType("the file is not an image or a video of a known format")
    if declared not in found.declared:
        raise UnsupportedMediaType(f"the file is declared {declared} but is {found.content_type}")
    suffix = PurePosixPath(upload.filename or "").suffix.lstrip(".").lower()
    if suffix in found.extensions and MEDIA_TYPE.fullmatch(suffix):
        return suffix
    return found.media_type


async def read_upload(request: Request, max_bytes: int) -> tuple[bytes, str]:
    """The bytes and the type of the file a multipart upload carries."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidArgument("expected a multipart/form-data upload")
    limit = max_bytes + MULTIPART_OVERHEAD_BYTES
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the upload is larger than {max_bytes} bytes")
    parser = MultiPartParser(request.headers, _at_most(request.stream(), limit), max_files=2)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidArgument(exc.message) from None
    try:
        uploads = [f for name in UPLOAD_FIELDS if isinstance(f := form.get(name), UploadFile)]
        if not uploads:
            raise InvalidArgument("no file in field 'media' (or 'file')")
        data = await uploads[0].read()
        if len(data) > max_bytes:
            raise PayloadTooLarge(f"the file is larger than {max_bytes} bytes")
        if not data:
            raise InvalidArgument("the file is empty")
        media_type = media_type_of(uploads[0], data)
    finally:
        await form.close()
    return data, media_type


@router.post("/upload-media")
@failure_prefix("Upload media failure")
async def upload_media(request: Request, user: CurrentUser, service: MediaDep) -> UploadAnswer:
    """Front end: store the uploaded file (field ``media`` or ``file``); its id and type.

    401 without a login (checked before the body is read); 415 unless an image or a video.
    """
    data, media_type = await read_upload(request, service.max_bytes)
    return UploadAnswer(media_id=await service.store(data, media_type), media_type=media_type)


@router.get("/get-media")
@failure_prefix("Get media failure")
async def get_media(request: Request, service: MediaDep) -> Response:
    """Front end: the bytes of ``filename`` (``<media_id>.<type>``); 404 if absent."""
    (filename,) = require(await form_args(request), "filename")
    media_id, _, media_type = filename.rpartition(".")
    data = await service.load(media_id, media_type.lower())
    known = FORMAT_OF_TYPE.get(media_type.lower())
    return Response(
        data,
        # A file stored before uploads were checked: bytes, never rendered as markup.
        media_type=known.content_type if known else "application/octet-stream",
        # A media id never names other bytes: the file can be cached for good.
        headers={"Cache-Control": "public, max-age=31536000, immutable",
                 "X-Content-Type-Options": "nosniff"},
    )


def create_app() -> FastAPI:
    return create_service_app("media", router, MediaService)
