"""user-timeline: each user's own posts, newest first.

MongoDB ``user-timeline.user-timeline`` holds one document per entry ``{user_id,
post_id, timestamp}`` (indexed by user and time); Redis caches each timeline as the ZSET
``<user_id>`` (member post id, score timestamp ms). When Redis holds fewer entries than a
read needs, the newest are read from MongoDB and put back (concurrent misses of one user
share that read). Most reads go past the end of short timelines, so a timeline loaded
whole carries a marker member (score -inf), and the flag ``user-timeline:whole``
(:func:`flag_fresh_cache`, on fresh stores) says Redis has every timeline: such reads
stay in Redis. An entry is removed only to undo a failed compose; the markers stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, NamedTuple

from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import CurrentUser
from socialbench.runtime.interfaces import (
    EMPTY,
    Empty,
    PostsAnswer,
    PostStorageClient,
    RemoveUserTimelineRequest,
    WriteUserTimelineRequest,
)
from socialbench.runtime.jsonio import json_bytes
from socialbench.runtime.singleflight import SingleFlight
from socialbench.runtime.stores import flag_fresh_cache
from socialbench.runtime.timelines import (
    ReadRequest,
    check_timeline_page,
    parse_page,
    posts_answer,
    read_posts,
)
from socialbench.runtime.web import failure_prefix, form_args, parse_int, require

WHOLE = b"~whole"  # marker member: this ZSET holds the user's whole timeline
ALL_WHOLE = "user-timeline:whole"  # flag: Redis holds every user's whole timeline


class UserTimelineService:
    """The service's logic: timeline entries in MongoDB, cached in Redis."""

    def __init__(self, context: ServiceContext) -> None:
        self.entries = context.stores.require_mongodb()["user-timeline"]["user-timeline"]
        self.redis = context.stores.require_redis()
        self.post_storage = PostStorageClient(context.rpc["post-storage"])
        self._loads: SingleFlight[int, Refill] = SingleFlight()

    async def setup(self) -> None:
        await self.entries.create_index([("user_id", 1), ("timestamp", -1)])
        await flag_fresh_cache(self.redis, self.entries, ALL_WHOLE)

    async def write(self, user_id: int, post_id: int, timestamp: int) -> None:
        """Add a post to the user's timeline: MongoDB first, then Redis."""
        await self.entries.insert_one(
            {"user_id": user_id, "post_id": post_id, "timestamp": timestamp})
        await self.redis.zadd(str(user_id), {str(post_id): timestamp})

    async def write_many(self, entries: Sequence[tuple[int, int, int]]) -> None:
        """Add each ``(user_id, post_id, timestamp)`` as :meth:`write` does, in one insert
        and one Redis round trip (bulk seeding: workloads/seeding/bulk.py)."""
        if not entries:
            return
        await self.entries.insert_many(
            [{"user_id": user_id, "post_id": post_id, "timestamp": timestamp}
             for user_id, post_id, timestamp in entries])
        await self.redis.pipeline(*(("ZADD", str(user_id), timestamp, str(post_id))
                                    for user_id, post_id, timestamp in entries))

    async def remove(self, user_id: int, post_id: int) -> None:
        """Remove a post from the user's timeline, if there: MongoDB first, then Redis."""
        await self.entries.delete_many({"user_id": user_id, "post_id": post_id})
        await self.redis.zrem(str(user_id), str(post_id))

    async def read(self, user_id: int, start: int, stop: int) -> bytes:
        """The JSON array of posts ``[start, stop)`` of the user's timeline, newest first."""
        check_timeline_page(start, stop)
        if stop <= start:
            return b"[]"
        return await read_posts(self.post_storage, await self.post_ids(user_id, start, stop))

    async def post_ids(self, user_id: int, start: int, stop: int) -> list[int]:
        """Ids of posts ``[start, stop)``, newest first: Redis, else MongoDB."""
        key = str(user_id)
        members, whole, all_whole = await self.redis.pipeline(
            ("ZREVRANGE", key, start, stop - 1), ("ZSCORE", key, WHOLE), ("EXISTS", ALL_WHOLE))
        if members and members[-1] == WHOLE:
            members.pop()
        if len(members) < stop - start and whole is None and not all_whole:
            return await self._load(user_id, start, stop)
        return [int(member) for member in members]

    async def _load(self, user_id: int, start: int, stop: int) -> list[int]:
        """Posts ``[start, stop)`` from MongoDB; concurrent misses of one user share a read.

        A shared read that was for a shorter page (and did not reach the timeline's end)
        is not enough: then this page is read on its own.
        """
        refill = await self._loads.run(user_id, lambda: self._refill(user_id, stop))
        if len(refill.post_ids) < stop and not refill.whole:
            refill = await self._refill(user_id, stop)
        return refill.post_ids[start:stop]

    async def _refill(self, user_id: int, limit: int) -> Refill:
        """Read the newest ``limit`` entries from MongoDB and put them back in Redis.

        The refill is always the newest entries (not only the page asked), so that ranks
        in Redis stay those of the whole timeline.
        """
        entries = (
            await self.entries.find({"user_id": user_id}, {"_id": 0, "post_id": 1, "timestamp": 1})
            .sort("timestamp", -1)
            .limit(limit)
            .to_list()
        )
        mapping = {str(entry["post_id"]).encode(): float(entry["timestamp"]) for entry in entries}
        whole = len(entries) < limit
        if whole:
            mapping[WHOLE] = float("-inf")
        await self.redis.zadd(str(user_id), mapping)
        return Refill([int(entry["post_id"]) for entry in entries], whole)


class Refill(NamedTuple):
    """The newest entries of a timeline read from MongoDB."""

    post_ids: list[int]  # newest first
    whole: bool  # fewer than asked for: the whole timeline


UserTimelineDep = Annotated[UserTimelineService, Depends(service_logic)]
router = APIRouter()


@router.post("/write_user_timeline")
async def write_user_timeline(
    body: WriteUserTimelineRequest, service: UserTimelineDep
) -> Empty:
    """Add a post to its creator's timeline."""
    await service.write(body.user_id, body.post_id, body.timestamp)
    return EMPTY


@router.post("/remove_user_timeline")
async def remove_user_timeline(
    body: RemoveUserTimelineRequest, service: UserTimelineDep
) -> Empty:
    """Remove a post from its creator's timeline (undoing a failed compose); idempotent."""
    await service.remove(body.user_id, body.post_id)
    return EMPTY


@router.post("/read_user_timeline", response_model=PostsAnswer)
async def read_user_timeline(body: ReadRequest, service: UserTimelineDep) -> Response:
    """Posts [start, stop) of the user's timeline, newest first."""
    return json_bytes(posts_answer(await service.read(body.user_id, body.start, body.stop)))


# Front-end routes (behind nginx), as the original's Lua scripts.


@router.api_route("/wrk2-api/user-timeline/read", methods=["GET", "POST"])
@failure_prefix("Get user-timeline failure")
async def wrk2_read(request: Request, service: UserTimelineDep) -> Response:
    """A page of any user's timeline: user_id, start, stop."""
    user_id, start, stop = require(await form_args(request), "user_id", "start", "stop")
    return json_bytes(await service.read(parse_int(user_id, "user_id"), *parse_page(start, stop)))


@router.api_route("/api/user-timeline/read", methods=["GET", "POST"])
@failure_prefix("Get user-timeline failure")
async def api_read(request: Request, user: CurrentUser, service: UserTimelineDep) -> Response:
    """A page of the logged-in user's timeline, or of user_id's (profile pages)."""
    args = await form_args(request)
    start, stop = require(args, "start", "stop")
    user_id = parse_int(args["user_id"], "user_id") if args.get("user_id") else user.user_id
    return json_bytes(await service.read(user_id, *parse_page(start, stop)))


def create_app() -> FastAPI:
    return create_service_app("user-timeline", router, UserTimelineService)
