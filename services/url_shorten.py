"""url-shorten: short urls for the urls of a post, and their expansion.

A short url is ``http://short-url/`` + 10 random ``[A-Za-z0-9]``, stored in MongoDB
``url-shorten.url-shorten`` as ``{shortened_url, expanded_url}`` under a unique index
on ``shortened_url``. The original never implemented expansion; here it is an
indexed lookup, also served to the front end at ``/api/url/expand``.
"""

from __future__ import annotations

import random
import string
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, Field

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.errors import NotFound, StoreError
from socialbench.runtime.interfaces import ComposeUrlsRequest, UrlsAnswer
from socialbench.runtime.models import MAX_ITEMS, Url
from socialbench.runtime.mongodb_client import DuplicateKeyError
from socialbench.runtime.web import failure_prefix, form_args, require

SHORT_URL_PREFIX = "http://short-url/"
SHORT_CODE_ALPHABET = string.ascii_letters + string.digits
SHORT_CODE_LENGTH = 10
# 62**10 codes make a clash rare; a clash is caught by the unique index and redrawn.
MAX_INSERT_ATTEMPTS = 3


def new_short_url() -> str:
    """A fresh random short url."""
    return SHORT_URL_PREFIX + "".join(random.choices(SHORT_CODE_ALPHABET, k=SHORT_CODE_LENGTH))


class UrlShortenService:
    """The service's logic: shorten in bulk, expand by index."""

    def __init__(self, context: ServiceContext) -> None:
        self.urls = context.stores.require_mongodb()["url-shorten"]["url-shorten"]

    async def setup(self) -> None:
        await self.urls.create_index("shortened_url", unique=True)

    async def shorten(self, expanded_urls: list[str]) -> list[Url]:
        """One new short url per url given (in order), stored before it is returned."""
        pairs = [Url(shortened_url=new_short_url(), expanded_url=u) for u in expanded_urls]
        pending = list(range(len(pairs)))
        for _ in range(MAX_INSERT_ATTEMPTS):
            if not pending:
                break
            pending = await self._insert(pairs, pending)
            for index in pending:
                pairs[index] = Url(shortened_url=new_short_url(),
                                   expanded_url=pairs[index].expanded_url)
        if pending:
            raise StoreError(f"no free short url after {MAX_INSERT_ATTEMPTS} attempts")
        return pairs

    async def _insert(self, pairs: list[Url], indexes: list[int]) -> list[int]:
        """Insert ``pairs[i]`` for ``i`` in ``indexes``; the indexes whose short url was taken."""
        documents = [pairs[i].model_dump() for i in indexes]
        try:
            await self.urls.insert_many(documents)
        except DuplicateKeyError as exc:
            return [indexes[position] for position in exc.indexes]
        return []

    async def expand(self, shortened_urls: list[str]) -> list[Url]:
        """The known ones of ``shortened_urls``, in the order asked, each once."""
        asked = list(dict.fromkeys(shortened_urls))
        if not asked:
            return []
        cursor = self.urls.find(
            {"shortened_url": {"$in": asked}}, {"_id": 0, "shortened_url": 1, "expanded_url": 1}
        )
        found = {doc["shortened_url"]: doc["expanded_url"] async for doc in cursor}
        return [Url(shortened_url=s, expanded_url=found[s]) for s in asked if s in found]


UrlShortenDep = Annotated[UrlShortenService, Depends(service_logic)]
router = APIRouter()


class ExpandUrlsRequest(BaseModel):
    shortened_urls: Annotated[list[str], Field(max_length=MAX_ITEMS)]


@router.post("/compose_urls")
async def compose_urls(body: ComposeUrlsRequest, service: UrlShortenDep) -> UrlsAnswer:
    """Shorten ``urls`` (one short url each, in order) and store the pairs."""
    return UrlsAnswer(urls=await service.shorten(body.urls))


@router.post("/get_extended_urls")
async def get_extended_urls(body: ExpandUrlsRequest, service: UrlShortenDep) -> UrlsAnswer:
    """The expanded urls of ``shortened_urls``; unknown ones are left out."""
    return UrlsAnswer(urls=await service.expand(body.shortened_urls))


# Front-end routes (behind nginx).


@router.get("/api/url/expand")
@failure_prefix("Failed to expand url")
async def api_expand_url(request: Request, service: UrlShortenDep) -> Url:
    """Front end: the expanded url of ``shortened_url``; 404 if unknown."""
    (shortened_url,) = require(await form_args(request), "shortened_url")
    found = await service.expand([shortened_url])
    if not found:
        raise NotFound(f"no url {shortened_url} was shortened here")
    return found[0]


def create_app() -> FastAPI:
    return create_service_app("url-shorten", router, UrlShortenService)
