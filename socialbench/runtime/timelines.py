"""What the two timeline services share: pages of post ids, answered as posts.

user-timeline and home-timeline each keep, per user, post ids ordered newest first; a
read asks for the page ``[start, stop)`` and answers the posts, read from post-storage.
post-storage's JSON passes through as bytes: a timeline neither decodes nor re-encodes it.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
from pydantic import BaseModel, Field

from socialbench.runtime.errors import InvalidArgument
from socialbench.runtime.interfaces import PostStorageClient
from socialbench.runtime.models import MAX_READ_IDS, Id
from socialbench.runtime.web import parse_int

MAX_TIMELINE_INDEX = 1 << 31

StrictInt = Annotated[int, Field(strict=True)]


# The request of both services' ``read_*_timeline`` (no docstring: it would become a
# description in their OpenAPI).
class ReadRequest(BaseModel):
    user_id: Id
    start: StrictInt
    stop: StrictInt


def check_timeline_page(start: int, stop: int) -> None:
    """A clear 400 unless ``start`` and ``stop`` of a timeline page are in ``[0, 2**31]``.

    ``stop <= start`` is an empty page (200, ``[]``), as the original's handlers answer.
    """
    if not (0 <= start <= MAX_TIMELINE_INDEX and 0 <= stop <= MAX_TIMELINE_INDEX):
        raise InvalidArgument(
            f"start and stop must be in [0, {MAX_TIMELINE_INDEX}], got {start} and {stop}"
        )


def parse_page(start: str, stop: str) -> tuple[int, int]:
    """``start`` and ``stop`` of a front-end request: ASCII digits in ``[0, 2**31]``, else 400.

    A non-number is refused as :func:`parse_int` refuses it; a number out of the range
    (negative, or past ``2**31``) as :func:`check_timeline_page` does.
    """
    indexes = (_page_index(start, "start"), _page_index(stop, "stop"))
    if indexes[0] is None or indexes[1] is None:
        raise InvalidArgument(
            f"start and stop must be in [0, {MAX_TIMELINE_INDEX}], "
            f"got {start[:40]} and {stop[:40]}"
        )
    return indexes[0], indexes[1]


def _page_index(value: str, name: str) -> int | None:
    """``value`` as an int in ``[0, 2**31]``; None for a number out of it."""
    if value[:1] == "-" and value[1:].isascii() and value[1:].isdigit():
        return None
    index = parse_int(value, name)
    return index if index <= MAX_TIMELINE_INDEX else None


_POSTS_ANSWER = b'{"posts":'


def posts_array(answer: bytes) -> bytes:
    """The JSON array of post-storage's ``read_posts`` answer, ``{"posts":[...]}``, as bytes.

    post-storage writes that answer as exactly those bytes around the array, which is
    sliced out without parsing; any other spelling of it (a neighbour's, a fake's) is
    decoded and encoded again.
    """
    if answer.startswith(_POSTS_ANSWER) and answer.endswith(b"]}"):
        return answer[len(_POSTS_ANSWER):-1]
    return orjson.dumps(orjson.loads(answer)["posts"])


async def read_posts(post_storage: PostStorageClient, post_ids: list[int]) -> bytes:
    """The JSON array of the posts of ``post_ids`` from post-storage, in that order.

    No call for none; a long page is asked in concurrent calls of at most
    ``MAX_READ_IDS`` ids each.
    """
    if not post_ids:
        return b"[]"
    if len(post_ids) <= MAX_READ_IDS:
        return posts_array(await post_storage.read_posts_json(post_ids))
    answers = await asyncio.gather(*(
        post_storage.read_posts_json(post_ids[i:i + MAX_READ_IDS])
        for i in range(0, len(post_ids), MAX_READ_IDS)
    ))
    items = (posts_array(answer)[1:-1] for answer in answers)
    return b"[" + b",".join(item for item in items if item.strip()) + b"]"


def posts_answer(posts: bytes) -> bytes:
    """The answer of an internal ``read_*_timeline``: ``{"posts": <posts>}``."""
    return _POSTS_ANSWER + posts + b"}"
