"""bench stack's cache warm-up, against a fake front end in-process."""

from __future__ import annotations

import socket

from aiohttp import web

from socialbench.bench.stack import WARM_STOP, _warm
from socialbench.workloads.definitions.socialnetwork import HOME_TIMELINE_PATH, USER_TIMELINE_PATH


async def test_the_warm_up_reads_every_page_of_every_users_timelines() -> None:
    asked: list[tuple[str, str, str, str]] = []

    async def timeline(request: web.Request) -> web.Response:
        query = request.query
        asked.append((request.path, query["user_id"], query["start"], query["stop"]))
        return web.json_response([])

    app = web.Application()
    app.router.add_get(HOME_TIMELINE_PATH, timeline)
    app.router.add_get(USER_TIMELINE_PATH, timeline)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        reads = await _warm(f"http://127.0.0.1:{port}", users=5)
    finally:
        await runner.cleanup()
    assert reads == 10
    assert sorted(asked) == sorted(
        (path, str(user), "0", str(WARM_STOP))
        for user in range(5) for path in (HOME_TIMELINE_PATH, USER_TIMELINE_PATH))
