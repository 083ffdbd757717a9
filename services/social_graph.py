"""social-graph: who follows whom.

MongoDB ``social-graph.social-graph`` holds one document per follow edge, ``_id``
``"<follower_id>:<followee_id>"`` with the ids and the time: follow is an insert (a
duplicate is an edge that exists), unfollow a delete by ``_id`` (the one filter FerretDB
v1 evaluates without decoding every document). An unfollow first records the interval it
ends in ``social-graph.ended-follows``, which only the stores check reads. Redis caches
each user's lists as ZSETs ``<uid>:followers`` and ``<uid>:followees`` scored by follow
time; a set loaded from MongoDB carries a marker member (score -inf) saying it is whole,
so a partial set is never served as whole and an empty one is not read again. The flag
``social-graph:whole`` (:func:`flag_fresh_cache`, on fresh stores) says Redis holds
every list.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel
from starlette.responses import Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import CurrentUser
from socialbench.runtime.interfaces import (
    EMPTY,
    Empty,
    UserClient,
    UserIdsAnswer,
    UserRequest,
)
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.models import Id, now_ms
from socialbench.runtime.mongodb_client import DuplicateKeyError
from socialbench.runtime.singleflight import SingleFlight
from socialbench.runtime.stores import flag_fresh_cache
from socialbench.runtime.web import (
    IncompleteArguments,
    failure_prefix,
    form_args,
    parse_int,
    text,
)

Relation = Literal["followers", "followees"]
LOADED = b"~loaded"  # marker member: this set holds the whole list
ALL_LOADED = "social-graph:whole"  # flag: Redis holds every list
_OTHER_END: dict[Relation, tuple[str, str]] = {
    # relation -> (the user's field in an edge, the field of the users listed)
    "followers": ("followee_id", "follower_id"),
    "followees": ("follower_id", "followee_id"),
}


def _edge_id(user_id: int, followee_id: int) -> str:
    return f"{user_id}:{followee_id}"


class SocialGraphService:
    """The service's logic: follow edges in MongoDB, cached per user in Redis."""

    def __init__(self, context: ServiceContext) -> None:
        database = context.stores.require_mongodb()["social-graph"]
        self.edges = database["social-graph"]
        self.ended_follows = database["ended-follows"]
        self.redis = context.stores.require_redis()
        self.user = UserClient(context.rpc["user"])
        self._loads: SingleFlight[tuple[int, Relation], list[int]] = SingleFlight()

    async def setup(self) -> None:
        await self.edges.create_index([("follower_id", 1), ("followee_id", 1)], unique=True)
        await self.edges.create_index("followee_id")
        await flag_fresh_cache(self.redis, self.edges, ALL_LOADED)

    async def insert_user(self, user_id: int) -> None:
        """Nothing to store: a user's lists start empty and exist implicitly."""

    async def follow(self, user_id: int, followee_id: int) -> None:
        """``user_id`` follows ``followee_id``; following again keeps the first follow."""
        await self.follow_many([(user_id, followee_id)])

    async def follow_many(self, follows: Sequence[tuple[int, int]]) -> None:
        """Each ``(user_id, followee_id)`` follows, as :meth:`follow`, in one insert and one
        Redis round trip (bulk seeding: workloads/seeding/bulk.py)."""
        if not follows:
            return
        now = now_ms()
        edges = [{"_id": _edge_id(user_id, followee_id), "follower_id": user_id,
                  "followee_id": followee_id, "timestamp": now}
                 for user_id, followee_id in follows]
        with contextlib.suppress(DuplicateKeyError):  # an edge that exists is kept as it is
            await self.edges.insert_many(edges)
        await self.redis.pipeline(*(
            command for user_id, followee_id in follows for command in (
                ("ZADD", f"{user_id}:followees", "NX", now, followee_id),
                ("ZADD", f"{followee_id}:followers", "NX", now, user_id),
            )))

    async def unfollow(self, user_id: int, followee_id: int) -> None:
        """``user_id`` no longer follows ``followee_id`` (a no-op if it did not); the
        ended follow is kept in ``ended-follows``."""
        now = now_ms()
        edge_id = _edge_id(user_id, followee_id)
        edge = await self.edges.find_one({"_id": edge_id}, {"_id": 0, "timestamp": 1})
        if edge is not None:
            # Recorded before the edge goes, so that a failure in between loses no history
            # (a retry records the follow again: overlapping intervals mean the same).
            await self.ended_follows.insert_one({
                "follower_id": user_id, "followee_id": followee_id,
                "followed_at": edge["timestamp"], "unfollowed_at": now})
            await self.edges.delete_one({"_id": edge_id})
        await self.redis.pipeline(
            ("ZREM", f"{user_id}:followees", followee_id),
            ("ZREM", f"{followee_id}:followers", user_id),
        )

    async def user_id_of(self, username: str) -> int:
        """The id of ``username`` (from the user service; 404 if unknown)."""
        return await self.user.user_id(username)

    async def user_ids_of(self, username: str, followee_username: str) -> tuple[int, int]:
        """The ids of both users, looked up concurrently."""
        user_id, followee_id = await asyncio.gather(
            self.user_id_of(username), self.user_id_of(followee_username)
        )
        return user_id, followee_id

    async def users(self, user_id: int, relation: Relation) -> list[int]:
        """The followers or followees of ``user_id``, oldest follow first."""
        key = f"{user_id}:{relation}"
        members, all_loaded = await self.redis.pipeline(
            ("ZRANGE", key, 0, -1), ("EXISTS", ALL_LOADED))
        if members and members[0] == LOADED:
            return [int(member) for member in members[1:]]
        if all_loaded:
            return [int(member) for member in members]
        # Concurrent misses of one list (a hot user, after Redis lost it) share one read.
        return await self._loads.run(
            (user_id, relation), lambda: self._load(user_id, relation, key)
        )

    async def _load(self, user_id: int, relation: Relation, key: str) -> list[int]:
        """Read one list from MongoDB and cache it, marked whole, in Redis."""
        own_field, other_field = _OTHER_END[relation]
        edges = await self.edges.find(
            {own_field: user_id}, {"_id": 0, other_field: 1, "timestamp": 1}
        ).to_list()
        # Redis orders equal scores by member: sort the same way.
        edges.sort(key=lambda edge: (edge["timestamp"], str(edge[other_field])))
        mapping = {LOADED: float("-inf")}
        mapping.update((str(edge[other_field]).encode(), edge["timestamp"]) for edge in edges)
        await self.redis.zadd(key, mapping)
        return [int(edge[other_field]) for edge in edges]


SocialGraphDep = Annotated[SocialGraphService, Depends(service_logic)]
router = APIRouter()


class FollowRequest(BaseModel):
    user_id: Id
    followee_id: Id


class FollowWithUsernameRequest(BaseModel):
    user_username: str
    followee_username: str


@router.post("/insert_user")
async def insert_user(body: UserRequest, service: SocialGraphDep) -> Empty:
    """Make a new user known to the graph."""
    await service.insert_user(body.user_id)
    return EMPTY


@router.post("/follow")
async def follow(body: FollowRequest, service: SocialGraphDep) -> Empty:
    """user_id follows followee_id."""
    await service.follow(body.user_id, body.followee_id)
    return EMPTY


@router.post("/unfollow")
async def unfollow(body: FollowRequest, service: SocialGraphDep) -> Empty:
    """user_id stops following followee_id."""
    await service.unfollow(body.user_id, body.followee_id)
    return EMPTY


@router.post("/follow_with_username")
async def follow_with_username(
    body: FollowWithUsernameRequest, service: SocialGraphDep
) -> Empty:
    """Follow, naming both users by username."""
    await service.follow(*await service.user_ids_of(body.user_username, body.followee_username))
    return EMPTY


@router.post("/unfollow_with_username")
async def unfollow_with_username(
    body: FollowWithUsernameRequest, service: SocialGraphDep
) -> Empty:
    """Unfollow, naming both users by username."""
    await service.unfollow(*await service.user_ids_of(body.user_username, body.followee_username))
    return EMPTY


# orjson rather than the model's serializer: a list of 10,000 followers is ~4 times
# faster to encode (docs/performance.md, "Typed calls between services").
@router.post("/get_followers", response_model=UserIdsAnswer)
async def get_followers(body: UserRequest, service: SocialGraphDep) -> Response:
    """The ids of the user's followers."""
    return JSONResponse({"user_ids": await service.users(body.user_id, "followers")})


@router.post("/get_followees", response_model=UserIdsAnswer)
async def get_followees(body: UserRequest, service: SocialGraphDep) -> Response:
    """The ids of the users the user follows."""
    return JSONResponse({"user_ids": await service.users(body.user_id, "followees")})


# Front-end routes (behind nginx), as the original's Lua scripts.


async def _pair_from_form(service: SocialGraphService, args: dict[str, str]) -> tuple[int, int]:
    """(user, followee) from ``user_id`` + ``followee_id``, or ``user_name`` + ``followee_name``."""
    if args.get("user_id") and args.get("followee_id"):
        return parse_int(args["user_id"], "user_id"), parse_int(args["followee_id"], "followee_id")
    if args.get("user_name") and args.get("followee_name"):
        return await service.user_ids_of(args["user_name"], args["followee_name"])
    raise IncompleteArguments(["user_id", "followee_id"])


async def _followee_from_form(service: SocialGraphService, args: dict[str, str]) -> int:
    """The followee from ``followee_id`` or ``followee_name``."""
    if args.get("followee_id"):
        return parse_int(args["followee_id"], "followee_id")
    if args.get("followee_name"):
        return await service.user_id_of(args["followee_name"])
    raise IncompleteArguments(["followee_id"])


@router.post("/wrk2-api/user/follow")
@failure_prefix("Follow Failed")
async def wrk2_follow(request: Request, service: SocialGraphDep) -> Response:
    """Follow by ids or by usernames."""
    await service.follow(*await _pair_from_form(service, await form_args(request)))
    return text("Success!")


@router.post("/wrk2-api/user/unfollow")
@failure_prefix("Unfollow Failed")
async def wrk2_unfollow(request: Request, service: SocialGraphDep) -> Response:
    """Unfollow by ids or by usernames."""
    await service.unfollow(*await _pair_from_form(service, await form_args(request)))
    return text("Success!")


@router.post("/api/user/follow")
@failure_prefix("Follow Failed")
async def api_follow(request: Request, user: CurrentUser, service: SocialGraphDep) -> Response:
    """The logged-in user follows followee_id or followee_name."""
    followee_id = await _followee_from_form(service, await form_args(request))
    await service.follow(user.user_id, followee_id)
    return text("Success!")


@router.post("/api/user/unfollow")
@failure_prefix("Unfollow Failed")
async def api_unfollow(request: Request, user: CurrentUser, service: SocialGraphDep) -> Response:
    """The logged-in user stops following followee_id or followee_name."""
    followee_id = await _followee_from_form(service, await form_args(request))
    await service.unfollow(user.user_id, followee_id)
    return text("Success!")


@router.get("/api/user/get_follower")
@failure_prefix("Get followers failure")
async def api_get_follower(user: CurrentUser, service: SocialGraphDep) -> Response:
    """The logged-in user's followers."""
    followers = await service.users(user.user_id, "followers")
    return JSONResponse([{"follower_id": str(user_id)} for user_id in followers])


@router.get("/api/user/get_followee")
@failure_prefix("Get followees failure")
async def api_get_followee(user: CurrentUser, service: SocialGraphDep) -> Response:
    """The users the logged-in user follows."""
    followees = await service.users(user.user_id, "followees")
    return JSONResponse([{"followee_id": str(user_id)} for user_id in followees])


def create_app() -> FastAPI:
    return create_service_app("social-graph", router, SocialGraphService)
