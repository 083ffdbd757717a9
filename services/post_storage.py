"""post-storage: posts in MongoDB ``post.post`` (unique ``post_id``), cached in memcached.

memcached holds each post's JSON (the front end's shape) under ``<post_id>``. Reading
many posts is the hottest path of the read workloads, so cached posts pass through as
the bytes memcached returned: the answer is assembled from them without parsing.
A memcached that refuses a post (too large) or is down costs only the cache: the post is
stored and read from MongoDB (:mod:`socialbench.runtime.cache_aside`).
A post is deleted only to undo a failed compose (see compose-post).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.cache_aside import Cache
from socialbench.runtime.errors import Conflict, InvalidArgument, NotFound
from socialbench.runtime.interfaces import (
    EMPTY,
    DeletePostRequest,
    Empty,
    PostsAnswer,
    ReadPostsRequest,
    StorePostRequest,
)
from socialbench.runtime.jsonio import json_bytes
from socialbench.runtime.models import Id, Post
from socialbench.runtime.mongodb_client import DuplicateKeyError


def _cache_key(post_id: int) -> bytes:
    return str(post_id).encode()


def _stored_forms(post: Post) -> tuple[int, dict[str, Any], bytes]:
    """A post's id, its MongoDB document (``post_id`` an int64) and its cached JSON."""
    try:
        post_id = int(post.post_id)
    except ValueError:
        raise InvalidArgument(f"post_id must be an integer, got {post.post_id!r}") from None
    fields = post.model_dump(mode="json")
    return post_id, {**fields, "post_id": post_id}, orjson.dumps(fields)


def _post_json(document: dict[str, Any]) -> bytes:
    """The front end's JSON of a MongoDB post document (``post_id`` is an int64 there)."""
    document["post_id"] = str(document["post_id"])
    return orjson.dumps(document)


class PostStorageService:
    """The service's logic: the post collection and its memcached cache."""

    def __init__(self, context: ServiceContext) -> None:
        self.posts = context.stores.require_mongodb()["post"]["post"]
        self.cache = Cache(context.stores.require_memcached(), context.errors)

    async def setup(self) -> None:
        await self.posts.create_index("post_id", unique=True)

    async def store_post(self, post: Post) -> None:
        """Store ``post`` in MongoDB (acknowledged), then cache it if memcached takes it."""
        post_id, document, cached = _stored_forms(post)
        try:
            await self.posts.insert_one(document)
        except DuplicateKeyError:
            raise Conflict(f"post {post_id} is already stored") from None
        await self.cache.fill(_cache_key(post_id), cached)

    async def store_posts(self, posts: Sequence[Post]) -> set[int]:
        """Store each post as :meth:`store_post` does, in one insert (bulk seeding:
        workloads/seeding/bulk.py); the positions of those whose id was taken (each
        stored nothing)."""
        forms = [_stored_forms(post) for post in posts]
        taken: set[int] = set()
        try:
            await self.posts.insert_many([document for _, document, _ in forms])
        except DuplicateKeyError as exc:
            taken = set(exc.indexes)
        await self.cache.fill_many({_cache_key(post_id): cached for position, (post_id, _, cached)
                                    in enumerate(forms) if position not in taken})
        return taken

    async def delete_post(self, post_id: int) -> None:
        """Delete a post, if stored: MongoDB first, then memcached (so a miss finds nothing);
        StoreError if memcached cannot confirm it."""
        await self.posts.delete_one({"post_id": post_id})
        await self.cache.delete(_cache_key(post_id))

    async def read_post_json(self, post_id: int) -> bytes:
        """The JSON of one post; :class:`NotFound` if there is none."""
        key = _cache_key(post_id)
        cached = await self.cache.get(key)
        if cached is not None:
            return cached
        document = await self.posts.find_one({"post_id": post_id}, {"_id": 0})
        if document is None:
            raise NotFound(f"post {post_id} not found")
        raw = _post_json(document)
        await self.cache.fill(key, raw)
        return raw

    async def read_posts_json(self, post_ids: list[int]) -> bytes:
        """A JSON array of the posts asked, in the order asked, each once; unknown ids left out."""
        ids = list(dict.fromkeys(post_ids))
        if not ids:
            return b"[]"
        found = await self.cache.multi_get(*(_cache_key(i) for i in ids))
        missing = [post_id for post_id, raw in zip(ids, found, strict=True) if raw is None]
        loaded = await self._load_and_cache(missing) if missing else {}
        posts = (loaded.get(i) if raw is None else raw for i, raw in zip(ids, found, strict=True))
        return b"[" + b",".join(raw for raw in posts if raw is not None) + b"]"

    async def _load_and_cache(self, post_ids: list[int]) -> dict[int, bytes]:
        """Posts missing from memcached, read from MongoDB in one query and cached again."""
        loaded: dict[int, bytes] = {}
        async for document in self.posts.find({"post_id": {"$in": post_ids}}, {"_id": 0}):
            post_id = int(document["post_id"])
            loaded[post_id] = _post_json(document)
        await self.cache.fill_many({_cache_key(i): raw for i, raw in loaded.items()})
        return loaded


PostStorageDep = Annotated[PostStorageService, Depends(service_logic)]
router = APIRouter()


class ReadPostRequest(BaseModel):
    post_id: Id


@router.post("/store_post")
async def store_post(body: StorePostRequest, service: PostStorageDep) -> Empty:
    """Store a new post; 409 if its id is taken."""
    await service.store_post(body.post)
    return EMPTY


@router.post("/read_post")
async def read_post(body: ReadPostRequest, service: PostStorageDep) -> Response:
    """One post; 404 if unknown."""
    return json_bytes(b'{"post":' + await service.read_post_json(body.post_id) + b"}")


@router.post("/read_posts", response_model=PostsAnswer)
async def read_posts(body: ReadPostsRequest, service: PostStorageDep) -> Response:
    """Posts in the order asked, duplicates once, unknown ids left out."""
    return json_bytes(b'{"posts":' + await service.read_posts_json(body.post_ids) + b"}")


@router.post("/delete_post")
async def delete_post(body: DeletePostRequest, service: PostStorageDep) -> Empty:
    """Delete a post (undoing a failed compose); a post not stored is no error."""
    await service.delete_post(body.post_id)
    return EMPTY


def create_app() -> FastAPI:
    return create_service_app("post-storage", router, PostStorageService)
