"""bench hot-users against a fake front end in-process: who is registered, who follows
whom, and that composes and reads are sent at their rates and timed."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from starlette.responses import PlainTextResponse

from socialbench.bench.hot_users import FIRST_ID, PLAIN, HotUsersBench, measure
from socialbench.workloads.definitions.socialnetwork import HOME_TIMELINE_PATH
from tests.services.support import serve_fake


async def test_the_celebrity_gets_every_follower_and_each_author_is_timed() -> None:
    registered: list[int] = []
    follows: list[tuple[int, int]] = []
    composed: list[int] = []
    reads = 0
    app = FastAPI()

    @app.post("/wrk2-api/user/register")
    async def register(request: Request) -> PlainTextResponse:
        registered.append(int(parse_qs((await request.body()).decode())["user_id"][0]))
        return PlainTextResponse("Success!\n")

    @app.post("/wrk2-api/user/follow")
    async def follow(request: Request) -> PlainTextResponse:
        form = parse_qs((await request.body()).decode())
        follows.append((int(form["user_id"][0]), int(form["followee_id"][0])))
        return PlainTextResponse("Success!\n")

    @app.post("/wrk2-api/post/compose")
    async def compose(request: Request) -> PlainTextResponse:
        body = (await request.body()).decode()
        composed.append(int(body.split("&user_id=")[1].split("&")[0]))
        return PlainTextResponse("Successfully upload post\n")

    @app.get(HOME_TIMELINE_PATH)
    async def read() -> list[str]:
        nonlocal reads
        reads += 1
        return []

    async with serve_fake(app) as url:
        phases = await measure(HotUsersBench(url=url, followers=30, rate=5, duration_s=1,
                                             read_rate=20, users=10))

    celebrity, plain = FIRST_ID, FIRST_ID + 1
    assert sorted(registered) == list(range(FIRST_ID, FIRST_ID + 32))
    assert sum(1 for _, followee in follows if followee == celebrity) == 30
    assert sum(1 for _, followee in follows if followee == plain) == PLAIN
    assert composed == [plain] * 5 + [celebrity] * 5
    assert reads == 40
    assert [(p.author, p.composes.get_total_count(), p.reads.get_total_count(), p.errors)
            for p in phases] == [("plain", 5, 20, 0), ("celebrity", 5, 20, 0)]
