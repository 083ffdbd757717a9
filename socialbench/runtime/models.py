"""The models and checks shared by the services that build, store and serve posts.

Every 64-bit id and the timestamp (ms since the epoch) are strings in a post's JSON, as
the original's front end sends them. Bad input is refused where it enters, before
anything is stored: an id is an integer in ``[0, 2**63 - 1]`` (:data:`Id` in internal
JSON, strict; :data:`IdText` in a post; ASCII digits in a form), else 400; a post's text
is at most :data:`MAX_TEXT_BYTES` and its lists :data:`MAX_ITEMS` long, and every other
stored string a client sends has a cap (:data:`MAX_USERNAME_BYTES`,
:data:`MAX_PERSON_NAME_BYTES`, :data:`MAX_PASSWORD_BYTES`, :data:`MAX_NAME_CHARS`), else
413 (:class:`PayloadTooLarge`). A post within the caps is under memcached's 1 MiB item
and MongoDB's 16 MiB document; should memcached refuse one all the same, the post is
still stored (:mod:`~socialbench.runtime.cache_aside`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from enum import IntEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field
from pydantic_core import PydanticCustomError

from socialbench.runtime.errors import InvalidArgument, PayloadTooLarge

MAX_ID = 2**63 - 1
MAX_TEXT_BYTES = 64 * 1024
# Stored text grows by the short urls that replace the urls (at most ~30 bytes each).
MAX_STORED_TEXT_BYTES = 2 * MAX_TEXT_BYTES
MAX_ITEMS = 128  # media, mentions or urls of one post
MAX_READ_IDS = 1024  # post ids of one read_posts call
MAX_NAME_CHARS = 256  # a media id or type
# A username's memcached keys (``<username>:user_id``, ``:login``) stay within 250 bytes.
MAX_USERNAME_BYTES = 240
MAX_PERSON_NAME_BYTES = 256  # a first or last name
MAX_PASSWORD_BYTES = 1024
# pydantic's error types of a value over its cap: answered 413, not 400.
TOO_LARGE_ERRORS = frozenset({"too_long", "string_too_long", "too_large"})
_ID_TEXT = re.compile(r"0|[1-9][0-9]{0,18}")  # canonical: no sign, space or leading zero

Id = Annotated[int, Field(strict=True, ge=0, le=MAX_ID)]
"""A user or post id (or a timestamp) in internal JSON: a JSON integer in ``[0, 2**63-1]``."""

Timestamp = Id


def _id_text(value: str) -> str:
    if _ID_TEXT.fullmatch(value) is None or int(value) > MAX_ID:
        raise ValueError(f"must be a decimal integer in [0, {MAX_ID}] (ASCII digits)")
    return value


def _text_size(cap: int) -> AfterValidator:
    def check(value: str) -> str:
        size = utf8_size(value)
        if size > cap:
            raise PydanticCustomError(
                "too_large", "{size} bytes of UTF-8, over the cap of {cap}",
                {"size": size, "cap": cap},
            )
        return value

    return AfterValidator(check)


IdText = Annotated[str, AfterValidator(_id_text)]
"""An id as a post carries it: a decimal string (ASCII digits) of an :data:`Id`."""

Text = Annotated[str, _text_size(MAX_TEXT_BYTES)]
"""A post's text as a client sends it."""

Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
"""A media id or type."""

Username = Annotated[str, _text_size(MAX_USERNAME_BYTES)]
PersonName = Annotated[str, _text_size(MAX_PERSON_NAME_BYTES)]
Password = Annotated[str, _text_size(MAX_PASSWORD_BYTES)]


def utf8_size(text: str) -> int:
    """The bytes of ``text`` in UTF-8; a lone surrogate (not UTF-8) counts as 3."""
    return len(text.encode("utf-8", "surrogatepass"))


class PostType(IntEnum):
    POST = 0
    REPOST = 1
    REPLY = 2
    DM = 3


class Creator(BaseModel):
    user_id: IdText
    username: Username


class UserMention(BaseModel):
    user_id: IdText
    username: Username


class Media(BaseModel):
    media_id: Name
    media_type: Name


class Url(BaseModel):
    shortened_url: Name
    expanded_url: Text


class Post(BaseModel):
    post_id: IdText
    creator: Creator
    req_id: Name
    text: Annotated[str, _text_size(MAX_STORED_TEXT_BYTES)]
    user_mentions: Annotated[list[UserMention], Field(max_length=MAX_ITEMS)]
    media: Annotated[list[Media], Field(max_length=MAX_ITEMS)]
    urls: Annotated[list[Url], Field(max_length=MAX_ITEMS)]
    timestamp: IdText
    post_type: PostType


def check_media_lists(media_ids: list[str], media_types: list[str]) -> None:
    """A clear 400 unless a post's ``media_ids`` and ``media_types`` pair up."""
    if len(media_ids) != len(media_types):
        raise InvalidArgument(f"{len(media_ids)} media_ids but {len(media_types)} media_types")


def check_size(name: str, value: str, cap: int) -> None:
    """A 413 naming ``name`` if ``value`` is over ``cap`` bytes of UTF-8."""
    size = utf8_size(value)
    if size > cap:
        raise PayloadTooLarge(f"{name} is {size} bytes of UTF-8, over the cap of {cap}")


def check_post_size(
    username: str, text: str, media_ids: list[str], media_types: list[str]
) -> None:
    """A 413 if a new post's fields are over their caps (before any call)."""
    check_size("username", username, MAX_USERNAME_BYTES)
    check_size("text", text, MAX_TEXT_BYTES)
    for name, items in (("media_ids", media_ids), ("media_types", media_types)):
        check_items(name, items)
        for item in items:
            if len(item) > MAX_NAME_CHARS:
                raise PayloadTooLarge(f"{name} has an item over {MAX_NAME_CHARS} characters")


def check_items(name: str, items: Sequence[object], cap: int = MAX_ITEMS) -> None:
    """A 413 if the list ``name`` has more than ``cap`` items."""
    if len(items) > cap:
        raise PayloadTooLarge(f"{name} has {len(items)} items, over the cap of {cap}")


def now_ms() -> int:
    """The time now, in the milliseconds since the Unix epoch that timestamps count."""
    return time.time_ns() // 1_000_000
