"""The models and checks shared by the services that build, store and serve posts.

Every 64-bit id and the timestamp are strings in a post's JSON, as the original's front
end sends them (JavaScript cannot hold a 64-bit integer exactly). Timestamps are
milliseconds since the Unix epoch.
"""

from __future__ import annotations

import time
from enum import IntEnum

from pydantic import BaseModel

from socialbench.runtime.errors import InvalidArgument


class PostType(IntEnum):
    POST = 0
    REPOST = 1
    REPLY = 2
    DM = 3


class Creator(BaseModel):
    user_id: str
    username: str


class UserMention(BaseModel):
    user_id: str
    username: str


class Media(BaseModel):
    media_id: str
    media_type: str


class Url(BaseModel):
    shortened_url: str
    expanded_url: str


# The answers of url-shorten and user-mention, which text reads (no docstrings: they
# would become descriptions in the services' OpenAPI).
class UrlsAnswer(BaseModel):
    urls: list[Url]


class UserMentionsAnswer(BaseModel):
    user_mentions: list[UserMention]


class Post(BaseModel):
    post_id: str
    creator: Creator
    req_id: str
    text: str
    user_mentions: list[UserMention]
    media: list[Media]
    urls: list[Url]
    timestamp: str
    post_type: PostType


def check_media_lists(media_ids: list[str], media_types: list[str]) -> None:
    """A clear 400 unless a post's ``media_ids`` and ``media_types`` pair up."""
    if len(media_ids) != len(media_types):
        raise InvalidArgument(f"{len(media_ids)} media_ids but {len(media_types)} media_types")


def now_ms() -> int:
    """The time now, in the milliseconds since the Unix epoch that timestamps count."""
    return time.time_ns() // 1_000_000
