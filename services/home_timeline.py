"""home-timeline: the posts of the people each user follows, and of posts mentioning them.

Redis only (as the original): the ZSET ``<user_id>:home-timeline`` (member post id,
score timestamp ms; the suffix lets one Redis hold it beside user-timeline's
``<user_id>``). A new post fans out to every follower of its author and every mentioned
user, the author excluded, with the Redis client's ``each_key``: on one server (or a
primary with replicas) one Lua script per ``EACH_KEY_BATCH`` (500) recipients, the
batches one after the other; on a Redis Cluster one pipeline per master
(runtime/redis_cluster.py). Batches, because Redis runs a script to its end before any
other command: one script for a celebrity's 10,000 followers held every other request
(docs/performance.md, "A celebrity's post"). Undoing a failed compose removes it from the
same recipients (the followers as they are then) the same way.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import CurrentUser
from socialbench.runtime.interfaces import (
    EMPTY,
    Empty,
    PostsAnswer,
    PostStorageClient,
    RemoveHomeTimelineRequest,
    SocialGraphClient,
    WriteHomeTimelineRequest,
)
from socialbench.runtime.jsonio import json_bytes
from socialbench.runtime.redis_client import Arg
from socialbench.runtime.timelines import (
    ReadRequest,
    check_timeline_page,
    parse_page,
    posts_answer,
    read_posts,
)
from socialbench.runtime.web import failure_prefix, form_args, parse_int, require


def timeline_key(user_id: int) -> str:
    return f"{user_id}:home-timeline"


def recipients_of(user_id: int, followers: Iterable[int], user_mentions_id: Iterable[int]
                  ) -> set[int]:
    """Who gets a post of ``user_id``: its followers and the users it mentions, not its
    author."""
    recipients = {*followers, *user_mentions_id}
    recipients.discard(user_id)
    return recipients



class HomeTimelineService:
    """The service's logic: home timelines in Redis."""

    def __init__(self, context: ServiceContext) -> None:
        self.redis = context.stores.require_redis()
        self.post_storage = PostStorageClient(context.rpc["post-storage"])
        self.social_graph = SocialGraphClient(context.rpc["social-graph"])

    async def setup(self) -> None:
        return None

    async def write(
        self, user_id: int, post_id: int, timestamp: int, user_mentions_id: list[int]
    ) -> None:
        """Put a post of ``user_id`` in the home timelines of its followers and mentions."""
        recipients = await self._recipients(user_id, user_mentions_id)
        await self._each_timeline(recipients, ["ZADD", timestamp, post_id])

    async def remove(self, user_id: int, post_id: int, user_mentions_id: list[int]) -> None:
        """Take a post of ``user_id`` out of its followers' and mentions' home timelines."""
        recipients = await self._recipients(user_id, user_mentions_id)
        await self._each_timeline(recipients, ["ZREM", post_id])

    async def _each_timeline(self, recipients: set[int], command: list[Arg]) -> None:
        """``command`` on every recipient's home timeline."""
        await self.redis.each_key([timeline_key(recipient) for recipient in recipients], command)

    async def _recipients(self, user_id: int, user_mentions_id: list[int]) -> set[int]:
        """Who gets a post of ``user_id``: its followers and mentions, not its author."""
        followers = await self.social_graph.followers(user_id)
        return recipients_of(user_id, followers, user_mentions_id)

    async def write_many(self, posts: Sequence[tuple[int, int, int, list[int]]]) -> None:
        """Put each ``(user_id, post_id, timestamp, user_mentions_id)`` in the home
        timelines :meth:`write` puts it in, an author's posts together: its followers read
        once and given all of them in one ZADD each, then each post's other recipients
        (bulk seeding, where an author's posts come together: workloads/seeding/bulk.py)."""
        by_author: dict[int, list[tuple[int, int, list[int]]]] = defaultdict(list)
        for user_id, post_id, timestamp, user_mentions_id in posts:
            by_author[user_id].append((post_id, timestamp, user_mentions_id))
        answers = await asyncio.gather(*(
            self.social_graph.followers(author) for author in by_author))
        writes = []
        for (author, its_posts), followers in zip(by_author.items(), answers, strict=True):
            everyone = recipients_of(author, followers, ())
            members: list[Arg] = [arg for post_id, timestamp, _ in its_posts
                                  for arg in (timestamp, post_id)]
            writes.append(self._each_timeline(everyone, ["ZADD", *members]))
            for post_id, timestamp, user_mentions_id in its_posts:
                others = recipients_of(author, (), user_mentions_id) - everyone
                if others:
                    writes.append(self._each_timeline(others, ["ZADD", timestamp, post_id]))
        await asyncio.gather(*writes)

    async def read(self, user_id: int, start: int, stop: int) -> bytes:
        """The JSON array of posts ``[start, stop)`` of the user's home timeline, newest first."""
        check_timeline_page(start, stop)
        if stop <= start:
            return b"[]"
        found = await self.redis.zrevrange(timeline_key(user_id), start, stop - 1)
        post_ids = [int(member) for member in found]
        return await read_posts(self.post_storage, post_ids)


HomeTimelineDep = Annotated[HomeTimelineService, Depends(service_logic)]
router = APIRouter()


@router.post("/write_home_timeline")
async def write_home_timeline(
    body: WriteHomeTimelineRequest, service: HomeTimelineDep
) -> Empty:
    """Fan a new post out to its author's followers and the users it mentions."""
    await service.write(body.user_id, body.post_id, body.timestamp, body.user_mentions_id)
    return EMPTY


@router.post("/remove_home_timeline")
async def remove_home_timeline(
    body: RemoveHomeTimelineRequest, service: HomeTimelineDep
) -> Empty:
    """Take a post out of the home timelines it was fanned out to (undoing a failed compose)."""
    await service.remove(body.user_id, body.post_id, body.user_mentions_id)
    return EMPTY


@router.post("/read_home_timeline", response_model=PostsAnswer)
async def read_home_timeline(body: ReadRequest, service: HomeTimelineDep) -> Response:
    """Posts [start, stop) of the user's home timeline, newest first."""
    return json_bytes(posts_answer(await service.read(body.user_id, body.start, body.stop)))


# Front-end routes (behind nginx), as the original's Lua scripts.


@router.api_route("/wrk2-api/home-timeline/read", methods=["GET", "POST"])
@failure_prefix("Get home-timeline failure")
async def wrk2_read(request: Request, service: HomeTimelineDep) -> Response:
    """A page of any user's home timeline: user_id, start, stop."""
    user_id, start, stop = require(await form_args(request), "user_id", "start", "stop")
    return json_bytes(await service.read(parse_int(user_id, "user_id"), *parse_page(start, stop)))


@router.api_route("/api/home-timeline/read", methods=["GET", "POST"])
@failure_prefix("Get home-timeline failure")
async def api_read(request: Request, user: CurrentUser, service: HomeTimelineDep) -> Response:
    """A page of the logged-in user's home timeline."""
    start, stop = require(await form_args(request), "start", "stop")
    return json_bytes(await service.read(user.user_id, *parse_page(start, stop)))


def create_app() -> FastAPI:
    return create_service_app("home-timeline", router, HomeTimelineService)
