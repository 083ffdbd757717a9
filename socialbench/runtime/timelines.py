"""What the two timeline services share: pages of post ids, answered as posts.

user-timeline and home-timeline each keep, per user, post ids ordered newest first; a
read asks for the page ``[start, stop)`` and answers the posts, read from post-storage.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from socialbench.runtime.errors import InvalidArgument
from socialbench.runtime.rpc import Neighbour

MAX_TIMELINE_INDEX = 1 << 31


# The request of both services' ``read_*_timeline`` (no docstring: it would become a
# description in their OpenAPI).
class ReadRequest(BaseModel):
    user_id: int
    start: int
    stop: int


def check_timeline_page(start: int, stop: int) -> None:
    """A clear 400 unless ``start`` and ``stop`` of a timeline page are in ``[0, 2**31]``."""
    if not (0 <= start <= MAX_TIMELINE_INDEX and 0 <= stop <= MAX_TIMELINE_INDEX):
        raise InvalidArgument(
            f"start and stop must be in [0, {MAX_TIMELINE_INDEX}], got {start} and {stop}"
        )


async def read_posts(post_storage: Neighbour, post_ids: list[int]) -> list[Any]:
    """The posts of ``post_ids`` from post-storage, in that order; no call for none."""
    if not post_ids:
        return []
    answer = await post_storage.call("read_posts", {"post_ids": post_ids})
    posts: list[Any] = answer["posts"]
    return posts
