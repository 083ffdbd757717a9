"""A post by an author with thousands of followers reaches every one of them, through the
whole stack (home-timeline fans it out in batches of EACH_KEY_BATCH recipients)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from socialbench.workloads.seeding.seed import register_body
from tests.e2e.support import FORM, compose, timeline

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIRST = 9_400_000  # this module's users: the author, then the followers
FOLLOWERS = 2_500


async def _post_all(base_url: str, path: str, bodies: list[str]) -> None:
    limit = asyncio.Semaphore(16)
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:

        async def post(body: str) -> None:
            async with limit:
                response = await client.post(path, content=body, headers=FORM)
                assert response.status_code == 200, response.text

        await asyncio.gather(*(post(body) for body in bodies))


def test_a_post_reaches_every_one_of_thousands_of_followers(
    base_url: str, client: httpx.Client
) -> None:
    fans = range(FIRST + 1, FIRST + 1 + FOLLOWERS)
    asyncio.run(_post_all(base_url, "/wrk2-api/user/register",
                          [register_body(user) for user in (FIRST, *fans)]))
    asyncio.run(_post_all(base_url, "/wrk2-api/user/follow",
                          [f"user_id={fan}&followee_id={FIRST}" for fan in fans]))

    compose(client, FIRST, f"username_{FIRST}", "a post for everyone")
    [post] = timeline(client, "user", FIRST)
    missing = [fan for fan in fans
               if [p["post_id"] for p in timeline(client, "home", fan)] != [post["post_id"]]]
    assert not missing, f"{len(missing)} of {FOLLOWERS} followers lack the post: {missing[:5]}"
