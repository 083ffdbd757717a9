"""text: the mentions and urls of a post's text, with each url replaced by its short form.

url-shorten and user-mention are called concurrently, as the original does, and a call
is skipped when there is nothing to send. Unlike the original, the text after the last
url is kept.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel, ValidationError

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.errors import NeighbourError
from socialbench.runtime.models import (
    Text,
    Url,
    UrlsAnswer,
    UserMention,
    UserMentionsAnswer,
    check_items,
)

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


class ComposedText(BaseModel):
    text: str
    user_mentions: list[UserMention]
    urls: list[Url]


class TextService:
    """The service's logic: parse, ask the neighbours, rewrite."""

    def __init__(self, context: ServiceContext) -> None:
        self.url_shorten = context.rpc["url-shorten"]
        self.user_mention = context.rpc["user-mention"]

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
        if not usernames:
            return []
        answer = await self.user_mention.call("compose_user_mentions", {"usernames": usernames})
        return _parse(UserMentionsAnswer, answer, "user-mention").user_mentions

    async def _shorten(self, urls: list[str]) -> list[Url]:
        if not urls:
            return []
        answer = await self.url_shorten.call("compose_urls", {"urls": urls})
        pairs = _parse(UrlsAnswer, answer, "url-shorten").urls
        if len(pairs) != len(urls):
            raise _bad_answer("url-shorten", f"{len(pairs)} short urls for {len(urls)} urls")
        return pairs


AnswerT = TypeVar("AnswerT", bound=BaseModel)


def _parse(model: type[AnswerT], answer: Any, neighbour: str) -> AnswerT:
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        raise _bad_answer(neighbour, str(exc)) from None


def _bad_answer(neighbour: str, problem: str) -> NeighbourError:
    return NeighbourError(f"{neighbour}: unexpected answer: {problem}", status_code=502,
                          remote_kind="BadAnswer")


TextDep = Annotated[TextService, Depends(service_logic)]
router = APIRouter()


class ComposeTextRequest(BaseModel):
    text: Text


@router.post("/compose_text")
async def compose_text(body: ComposeTextRequest, service: TextDep) -> ComposedText:
    """The text with short urls, its user mentions and its urls."""
    return await service.compose(body.text)


def create_app() -> FastAPI:
    return create_service_app("text", router, TextService)
