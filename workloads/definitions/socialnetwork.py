"""The DeathStarBench social-network workloads, as its wrk2 Lua scripts build them.

Same users, same shapes, same bodies byte for byte (form bodies that are not url-encoded,
``Content-Type: application/x-www-form-urlencoded`` on every request, also on GETs): see
``socialnetwork-contract.md`` §3 and ``socialNetwork/wrk2/scripts/social-network/*.lua``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from socialbench.workloads.definitions.core import FORM_CONTENT_TYPE, Request, register

DEFAULT_USERS = 962  # socfb-Reed98, the original's default max_user_index
ALPHANUMERIC = "qwertyuiopasdfghjklzxcvbnmQWERTYUIOPASDFGHJKLZXCVBNM1234567890"
DIGITS = "1234567890"
FORM_HEADERS = (("Content-Type", FORM_CONTENT_TYPE),)

COMPOSE_PATH = "/wrk2-api/post/compose"
HOME_TIMELINE_PATH = "/wrk2-api/home-timeline/read"
USER_TIMELINE_PATH = "/wrk2-api/user-timeline/read"

TEXT_LENGTH = 256
URL_LENGTH = 64
MEDIA_ID_LENGTH = 18
MENTIONS = (1, 6)  # the Lua loops `for i = 0, math.random(0, 5)`: 1 to 6 inclusive
URLS = (1, 6)
MEDIA = (1, 5)
TIMELINE_START = (0, 100)
TIMELINE_PAGE = 10

MIX_HOME, MIX_USER = 0.60, 0.30  # the rest (0.10) composes


class _SocialNetworkWorkload:
    name: str
    fixed = False

    def __init__(self, users: int = DEFAULT_USERS) -> None:
        if users < 2:
            raise ValueError(f"users must be at least 2 (mentions need another user), got {users}")
        self.users = users


def _byte_table(alphabet: str) -> tuple[bytes, bytes]:
    """A ``bytes.translate`` table mapping a random byte to a letter, and the bytes to drop.

    Only the bytes below the largest multiple of the alphabet's size are kept, so every
    letter is exactly equally likely (as the Lua scripts' ``math.random(1, #charset)``).
    """
    keep = 256 - 256 % len(alphabet)
    table = bytes(ord(alphabet[b % len(alphabet)]) if b < keep else 0 for b in range(256))
    return table, bytes(range(keep, 256))


_TABLES = {alphabet: _byte_table(alphabet) for alphabet in (ALPHANUMERIC, DIGITS)}


def _random_string(rng: random.Random, alphabet: str, length: int) -> str:
    table, drop = _TABLES[alphabet]
    letters = b""
    while len(letters) < length:  # rarely more than once: few bytes are dropped
        letters += rng.randbytes(length + 8).translate(table, drop)
    return letters[:length].decode()


@dataclass(frozen=True)
class PostFields:
    """What ``/wrk2-api/post/compose`` is sent: a post to compose."""

    username: str
    user_id: int
    text: str
    media_ids: list[str]
    media_types: list[str]
    post_type: int = 0

    def form_body(self) -> str:
        """The form body, as the original's Lua script writes it (not url-encoded)."""
        media_ids = ",".join(f'"{media_id}"' for media_id in self.media_ids)
        media_types = ",".join(f'"{media_type}"' for media_type in self.media_types)
        return (
            f"username={self.username}&user_id={self.user_id}&text={self.text}"
            f"&media_ids=[{media_ids}]&media_types=[{media_types}]&post_type={self.post_type}"
        )


def draw_post(rng: random.Random, user_id: int, users: int) -> PostFields:
    """One post by ``user_id``, drawn as compose-post.lua draws it.

    256 random characters, then 1-6 `` @username_<j>`` (j != user_id), then 1-6
    `` http://`` + 64 random characters; 1-5 random 18-digit media ids, all ``"png"``.
    """
    parts = [_random_string(rng, ALPHANUMERIC, TEXT_LENGTH)]
    for _ in range(rng.randint(*MENTIONS)):
        mentioned = rng.randrange(users)
        while mentioned == user_id:
            mentioned = rng.randrange(users)
        parts.append(f" @username_{mentioned}")
    for _ in range(rng.randint(*URLS)):
        parts.append(" http://" + _random_string(rng, ALPHANUMERIC, URL_LENGTH))
    media = rng.randint(*MEDIA)
    media_ids = [_random_string(rng, DIGITS, MEDIA_ID_LENGTH) for _ in range(media)]
    return PostFields(f"username_{user_id}", user_id, "".join(parts), media_ids,
                      ["png"] * media)


def compose_post_body(rng: random.Random, user_id: int, users: int) -> str:
    """The form body of one post by ``user_id`` (:func:`draw_post`)."""
    return draw_post(rng, user_id, users).form_body()


@register("compose-post")
class ComposePost(_SocialNetworkWorkload):
    """``POST /wrk2-api/post/compose`` by a random user: see :func:`compose_post_body`."""

    name = "compose-post"

    def next_request(self, rng: random.Random) -> Request:
        body = compose_post_body(rng, rng.randrange(self.users), self.users)
        return Request("POST", COMPOSE_PATH, FORM_HEADERS, body.encode(), self.name)


def _timeline_read(workload: _SocialNetworkWorkload, path: str, rng: random.Random) -> Request:
    user = rng.randrange(workload.users)
    start = rng.randint(*TIMELINE_START)
    query = f"?user_id={user}&start={start}&stop={start + TIMELINE_PAGE}"
    return Request("GET", path + query, FORM_HEADERS, None, workload.name)


@register("read-home-timeline")
class ReadHomeTimeline(_SocialNetworkWorkload):
    """``GET /wrk2-api/home-timeline/read``: a random user's page of 10 from a start in [0, 100]."""

    name = "read-home-timeline"

    def next_request(self, rng: random.Random) -> Request:
        return _timeline_read(self, HOME_TIMELINE_PATH, rng)


@register("read-user-timeline")
class ReadUserTimeline(_SocialNetworkWorkload):
    """``GET /wrk2-api/user-timeline/read``: a random user's page of 10 from a start in [0, 100]."""

    name = "read-user-timeline"

    def next_request(self, rng: random.Random) -> Request:
        return _timeline_read(self, USER_TIMELINE_PATH, rng)


@register("mixed")
class Mixed(_SocialNetworkWorkload):
    """60% read home timeline, 30% read user timeline, 10% compose post (one coin per request)."""

    name = "mixed"

    def __init__(self, users: int = DEFAULT_USERS) -> None:
        super().__init__(users)
        self.home = ReadHomeTimeline(users)
        self.user = ReadUserTimeline(users)
        self.compose = ComposePost(users)

    def next_request(self, rng: random.Random) -> Request:
        coin = rng.random()
        if coin < MIX_HOME:
            return self.home.next_request(rng)
        if coin < MIX_HOME + MIX_USER:
            return self.user.next_request(rng)
        return self.compose.next_request(rng)
