"""The post model shared by the services that build, store and serve posts.

Every 64-bit id and the timestamp are strings in JSON, as the original's front end
sends them (JavaScript cannot hold a 64-bit integer exactly).
"""

from __future__ import annotations

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


MAX_TIMELINE_INDEX = 1 << 31


def check_timeline_page(start: int, stop: int) -> None:
    """A clear 400 unless ``start`` and ``stop`` of a timeline page are in ``[0, 2**31]``."""
    if not (0 <= start <= MAX_TIMELINE_INDEX and 0 <= stop <= MAX_TIMELINE_INDEX):
        raise InvalidArgument(
            f"start and stop must be in [0, {MAX_TIMELINE_INDEX}], got {start} and {stop}"
        )
