"""user-mention: the user ids of the usernames mentioned in a post.

memcached first (``<username>:user_id``, the key the user service fills too), the
misses from MongoDB ``user.user`` in one ``$in`` query on the username index, and the
ones found written back to memcached (a memcached that fails is a miss:
:mod:`socialbench.runtime.cache_aside`). Unknown names are dropped; the answer keeps the
order asked, each name once. Ids are strings, the shape of a post's ``user_mentions``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.cache_aside import Cache
from socialbench.runtime.interfaces import ComposeUserMentionsRequest, UserMentionsAnswer
from socialbench.runtime.models import UserMention
from socialbench.runtime.stores import user_id_cache_key


class UserMentionService:
    """The service's logic: usernames to ``{user_id, username}``."""

    def __init__(self, context: ServiceContext) -> None:
        self.cache = Cache(context.stores.require_memcached(), context.errors)
        self.users = context.stores.require_mongodb()["user"]["user"]

    async def setup(self) -> None:
        # The same index the user service creates (creating it twice is a no-op).
        await self.users.create_index("username", unique=True)

    async def mentions(self, usernames: list[str]) -> list[UserMention]:
        """The known users among ``usernames``, in the order asked, each once."""
        keys = {name: key for name in dict.fromkeys(usernames) if (key := user_id_cache_key(name))}
        if not keys:
            return []
        cached = await self.cache.multi_get(*keys.values())
        ids = {name: value.decode() for name, value in zip(keys, cached, strict=True) if value}
        misses = [name for name in keys if name not in ids]
        if misses:
            cursor = self.users.find(
                {"username": {"$in": misses}}, {"_id": 0, "username": 1, "user_id": 1}
            )
            fetched = {doc["username"]: str(doc["user_id"]) async for doc in cursor}
            await self.cache.fill_many(
                {keys[name]: user_id.encode() for name, user_id in fetched.items()})
            ids.update(fetched)
        return [UserMention(user_id=ids[name], username=name) for name in keys if name in ids]


UserMentionDep = Annotated[UserMentionService, Depends(service_logic)]
router = APIRouter()


@router.post("/compose_user_mentions")
async def compose_user_mentions(
    body: ComposeUserMentionsRequest, service: UserMentionDep
) -> UserMentionsAnswer:
    """``{user_id, username}`` of each known name in ``usernames``; unknown names dropped."""
    return UserMentionsAnswer(user_mentions=await service.mentions(body.usernames))


def create_app() -> FastAPI:
    return create_service_app("user-mention", router, UserMentionService)
