"""text: the mentions and urls of a post's text, with each url replaced by its short form.

url-shorten and user-mention are called concurrently, as the original does, and a call
is skipped when there is nothing to send. Unlike the original, the text after the last
url is kept.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.interfaces import (
    ComposedText,
    ComposeTextRequest,
    UrlShortenClient,
    UserMentionClient,
)
from socialbench.runtime.models import Url, UserMention, check_items

MENTION = re.compile(r"@[A-Za-z0-9_-]+")
URL = re.compile(r"(?:http|https)://[A-Za-z0-9_!~*'().&=+$%-]+")


def mentions_and_urls(text: str) -> tuple[list[str], list[str]]:
    """The usernames ``text`` mentions (each once, in order) and its urls; a client error
    over the caps (checked before url-shorten stores any url)."""
    usernames = list(dict.fromkeys(match[1:] for match in MENTION.findall(text)))
    urls = URL.findall(text)
    check_items("mentions", usernames)
    check_items("urls", urls)
    return usernames, urls


def with_short_urls(text: str, short_urls: list[Url]) -> str:
    """``text`` with its urls replaced, in order, by ``short_urls``."""
    if not short_urls:
        return text
    shortened = iter(short_urls)
    return URL.sub(lambda _: next(shortened).shortened_url, text)


class TextService:
    """The service's logic: parse, ask the neighbours, rewrite."""

    def __init__(self, context: ServiceContext) -> None:
        self.url_shorten = UrlShortenClient(context.rpc["url-shorten"])
        self.user_mention = UserMentionClient(context.rpc["user-mention"])

    async def setup(self) -> None:
        return None

    async def compose(self, text: str) -> ComposedText:
        """``text`` with short urls, its known mentions and its url pairs."""
        usernames, urls = mentions_and_urls(text)
        mentions, short_urls = await asyncio.gather(
            self._user_mentions(usernames), self._shorten(urls)
        )
        return ComposedText(text=with_short_urls(text, short_urls), user_mentions=mentions,
                            urls=short_urls)

    async def _user_mentions(self, usernames: list[str]) -> list[UserMention]:
        return await self.user_mention.compose(usernames) if usernames else []

    async def _shorten(self, urls: list[str]) -> list[Url]:
        return await self.url_shorten.compose(urls) if urls else []


TextDep = Annotated[TextService, Depends(service_logic)]
router = APIRouter()


@router.post("/compose_text")
async def compose_text(body: ComposeTextRequest, service: TextDep) -> ComposedText:
    """The text with short urls, its user mentions and its urls."""
    return await service.compose(body.text)


def create_app() -> FastAPI:
    return create_service_app("text", router, TextService)
