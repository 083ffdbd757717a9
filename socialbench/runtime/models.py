"""The post model shared by the services that build, store and serve posts.

Every 64-bit id and the timestamp are strings in JSON, as the original's front end
sends them (JavaScript cannot hold a 64-bit integer exactly).
"""

from __future__ import annotations

from enum import IntEnum

from pydantic import BaseModel


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
