"""compose-post: build a new post from its parts, then store it and put it in the timelines.

Text (mentions and short urls), creator, media and post id are asked for concurrently;
then, as the original does, the post is stored by post-storage, written to its author's
user timeline and fanned out to home timelines, all three concurrently. A timeline entry
may so land a moment before its post: a read leaves out an entry whose post it cannot
find, so no reader sees a post that is not stored.

A compose is all or nothing: when storing or a timeline write fails, what it may have
written is removed again (timeline entries first, the post last) and the client gets the
original error. A removal that fails too is logged and counted (``/stats``:
``errors.CompensationFailed``); see "Compose is all or nothing" in services/README.md.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import CurrentUser
from socialbench.runtime.errors import ClientError, InvalidArgument
from socialbench.runtime.interfaces import (
    DELETE_POST,
    REMOVE_HOME_TIMELINE,
    REMOVE_USER_TIMELINE,
    ComposedText,
    HomeTimelineClient,
    MediaClient,
    Method,
    PostIdAnswer,
    PostStorageClient,
    TextClient,
    UniqueIdClient,
    UserClient,
    UserTimelineClient,
)
from socialbench.runtime.models import (
    MAX_ITEMS,
    Creator,
    Id,
    Media,
    Name,
    Post,
    PostType,
    Text,
    Username,
    check_media_lists,
    check_post_size,
    now_ms,
)
from socialbench.runtime.web import failure_prefix, form_args, parse_int, require, text

# The original's prefix, spelling included.
FAILURE_PREFIX = "compost_post failure"
# The error counter (``/stats``) of removals that failed while undoing a compose.
COMPENSATION_FAILED = "CompensationFailed"

log = logging.getLogger("socialbench")


class ComposePostService:
    """The service's logic: calls to the services a post is made of and stored by."""

    def __init__(self, context: ServiceContext) -> None:
        self.text = TextClient(context.rpc["text"])
        self.user = UserClient(context.rpc["user"])
        self.media = MediaClient(context.rpc["media"])
        self.unique_id = UniqueIdClient(context.rpc["unique-id"])
        self.post_storage = PostStorageClient(context.rpc["post-storage"])
        self.user_timeline = UserTimelineClient(context.rpc["user-timeline"])
        self.home_timeline = HomeTimelineClient(context.rpc["home-timeline"])
        self.errors = context.errors

    async def setup(self) -> None:
        return None

    async def compose(
        self,
        username: str,
        user_id: int,
        text: str,
        media_ids: list[str],
        media_types: list[str],
        post_type: PostType,
    ) -> str:
        """Compose, store and publish a post; its id."""
        # Checked here too (media checks it) so that nothing is asked of the others in vain,
        # nor stored (url-shorten stores the urls of the text) for a post refused anyway.
        check_media_lists(media_ids, media_types)
        check_post_size(username, text, media_ids, media_types)
        composed, creator, media, post_id = await asyncio.gather(
            self.text.compose(text),
            self.user.compose_creator(user_id, username),
            self.media.compose(media_ids, media_types),
            self.unique_id.compose(),
        )
        timestamp = now_ms()
        post = build_post(post_id, creator, composed, media, timestamp, post_type)
        await self._publish(post, user_id, timestamp)
        return post.post_id

    async def _publish(self, post: Post, user_id: int, timestamp: int) -> None:
        """Store the post and write it to the timelines; on a failure, undo and raise."""
        post_id = int(post.post_id)
        mentioned = [int(mention.user_id) for mention in post.user_mentions]
        try:
            # All three are waited for, failed or not, so none lands after the undo.
            results = await asyncio.gather(
                self.post_storage.store(post),
                self.user_timeline.write(user_id, post_id, timestamp),
                self.home_timeline.write(user_id, post_id, timestamp, mentioned),
                return_exceptions=True,
            )
        except BaseException:
            # Cancelled: any of the writes may have landed. Shielded: undone all the same.
            await asyncio.shield(self._undo(post_id, user_id, mentioned, post=True))
            raise
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            # A 4xx of store_post stored nothing (a taken id is another post's: keep it).
            taken = isinstance(results[0], ClientError)
            await asyncio.shield(self._undo(post_id, user_id, mentioned, post=not taken))
            raise failed

    async def _undo(self, post_id: int, user_id: int, mentioned: list[int], *, post: bool) -> None:
        """Remove what a failed compose may have written: timeline entries, then the post.

        The post goes last: a timeline entry left by a removal that failed then points at
        no post, and reads leave it out. Every removal is made, whatever the others did.
        """
        await asyncio.gather(
            self._remove(post_id, REMOVE_USER_TIMELINE,
                         self.user_timeline.remove(user_id, post_id)),
            self._remove(post_id, REMOVE_HOME_TIMELINE,
                         self.home_timeline.remove(user_id, post_id, mentioned)),
        )
        if post:
            await self._remove(post_id, DELETE_POST, self.post_storage.delete(post_id))

    async def _remove(
        self, post_id: int, method: Method[..., Any], removal: Awaitable[None]
    ) -> None:
        """One idempotent removal; a failure is logged and counted, not raised."""
        try:
            await removal
        except Exception as error:
            self.errors[COMPENSATION_FAILED] += 1
            log.error("undoing the compose of post %s: %s %s failed, left as it is: %s",
                      post_id, method.service, method.name, error)


def build_post(
    post_id: str,
    creator: Creator,
    composed: ComposedText,
    media: list[Media],
    timestamp: int,
    post_type: PostType,
) -> Post:
    """The post made of the neighbours' answers (ids as strings, as the front end has them)."""
    return Post(
        post_id=post_id,
        creator=creator,
        req_id=str(random.getrandbits(63)),
        text=composed.text,
        user_mentions=composed.user_mentions,
        media=media,
        urls=composed.urls,
        timestamp=str(timestamp),
        post_type=post_type,
    )


ComposePostDep = Annotated[ComposePostService, Depends(service_logic)]
router = APIRouter()


class ComposePostRequest(BaseModel):
    username: Username
    user_id: Id
    text: Text
    media_ids: Annotated[list[Name], Field(max_length=MAX_ITEMS)] = []
    media_types: Annotated[list[Name], Field(max_length=MAX_ITEMS)] = []
    post_type: PostType = PostType.POST


@router.post("/compose_post")
async def compose_post(body: ComposePostRequest, service: ComposePostDep) -> PostIdAnswer:
    """Compose a new post; its id."""
    post_id = await service.compose(
        body.username, body.user_id, body.text, body.media_ids, body.media_types, body.post_type
    )
    return PostIdAnswer(post_id=post_id)


# Front-end routes (behind nginx), as the original's Lua scripts.


def _post_type(value: str) -> PostType:
    number = parse_int(value, "post_type")
    try:
        return PostType(number)
    except ValueError:
        raise InvalidArgument(f"post_type must be 0 to 3, got {number}") from None


def _json_strings(value: str, name: str) -> list[str]:
    """A form parameter holding a JSON array of strings (or numbers) as strings."""
    try:
        items = orjson.loads(value)
    except orjson.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not all(
        isinstance(item, str) or (isinstance(item, int) and not isinstance(item, bool))
        for item in items
    ):
        raise InvalidArgument(f"{name} must be a JSON array of strings, got {value[:100]!r}")
    return [str(item) for item in items]


def _media_from_form(args: dict[str, str]) -> tuple[list[str], list[str]]:
    """media_ids and media_types, when both are given (as the original)."""
    if not args.get("media_ids") or not args.get("media_types"):
        return [], []
    return (
        _json_strings(args["media_ids"], "media_ids"),
        _json_strings(args["media_types"], "media_types"),
    )


@router.post("/wrk2-api/post/compose")
@failure_prefix(FAILURE_PREFIX)
async def wrk2_compose(request: Request, service: ComposePostDep) -> Response:
    """Compose a post for username/user_id (the wrk2 workload's request)."""
    args = await form_args(request)
    user_id, username, post_type, post_text = require(
        args, "user_id", "username", "post_type", "text"
    )
    media_ids, media_types = _media_from_form(args)
    await service.compose(
        username, parse_int(user_id, "user_id"), post_text,
        media_ids, media_types, _post_type(post_type),
    )
    return text("Successfully upload post")


@router.post("/api/post/compose")
@failure_prefix(FAILURE_PREFIX)
async def api_compose(request: Request, user: CurrentUser, service: ComposePostDep) -> Response:
    """Compose a post for the logged-in user."""
    args = await form_args(request)
    post_type, post_text = require(args, "post_type", "text")
    media_ids, media_types = _media_from_form(args)
    await service.compose(
        user.username, user.user_id, post_text, media_ids, media_types, _post_type(post_type)
    )
    return text("Successfully upload post")


def create_app() -> FastAPI:
    return create_service_app("compose-post", router, ComposePostService)
