"""bench stack's cache warm-up, against a fake front end in-process."""

from __future__ import annotations

from fastapi import FastAPI, Request

from socialbench.bench.stack_cpu import WARM_STOP, _warm
from socialbench.workloads.definitions.socialnetwork import HOME_TIMELINE_PATH, USER_TIMELINE_PATH
from tests.services.support import serve_fake


async def test_the_warm_up_reads_every_page_of_every_users_timelines() -> None:
    asked: list[tuple[str, str, str, str]] = []
    app = FastAPI()

    @app.get(HOME_TIMELINE_PATH)
    @app.get(USER_TIMELINE_PATH)
    async def timeline(request: Request) -> list[str]:
        query = request.query_params
        asked.append((request.url.path, query["user_id"], query["start"], query["stop"]))
        return []

    async with serve_fake(app) as url:
        reads = await _warm(url, users=5)
    assert reads == 10
    assert sorted(asked) == sorted(
        (path, str(user), "0", str(WARM_STOP))
        for user in range(5) for path in (HOME_TIMELINE_PATH, USER_TIMELINE_PATH))
