"""Requests of the original's clients (wrk2 scripts, web pages), for end-to-end tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from socialbench.stack import launcher
from socialbench.stack.servers import free_ports
from tests.support import socialbench

# Debian's chromium, driven by Playwright (which cannot download a browser here).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install -y chromium "
    "(scripts/setup.sh --test)")

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
# Ids of users made by the tests, one sequence per session: above every graph the session
# stack is seeded with (users 0..N-1).
user_ids = itertools.count(8_500_000)


def new_user(client: httpx.Client) -> tuple[int, str]:
    user_id = next(user_ids)
    name = f"username_{user_id}"
    body = (f"first_name=first_name_{user_id}&last_name=last_name_{user_id}&username={name}"
            f"&password=password_{user_id}&user_id={user_id}")
    response = client.post("/wrk2-api/user/register", content=body, headers=FORM)
    assert response.status_code == 200, response.text
    assert response.text == "Success!\n"
    return user_id, name


def follow(client: httpx.Client, follower: int, followee: int) -> None:
    response = client.post("/wrk2-api/user/follow", headers=FORM,
                           content=f"user_id={follower}&followee_id={followee}")
    assert response.status_code == 200, response.text


def compose(client: httpx.Client, user_id: int, username: str, text: str, **extra: str) -> None:
    fields = {"username": username, "user_id": str(user_id), "text": text,
              "post_type": "0", **extra}
    body = "&".join(f"{k}={v}" for k, v in fields.items())  # raw, as wrk2 sends it
    response = client.post("/wrk2-api/post/compose", content=body.encode(), headers=FORM)
    assert response.status_code == 200, response.text
    assert response.text == "Successfully upload post\n"


def timeline(client: httpx.Client, kind: str, user_id: int, start: int = 0, stop: int = 10
             ) -> list[dict[str, Any]]:
    response = client.get(f"/wrk2-api/{kind}-timeline/read",
                          params={"user_id": user_id, "start": start, "stop": stop}, headers=FORM)
    assert response.status_code == 200, response.text
    posts: list[dict[str, Any]] = response.json()
    return posts


def up_on_free_ports(data_dir: Path) -> tuple[list[str], str]:
    """``socialbench up`` arguments for a stack of its own beside any other (its data dir,
    free ports for the front end and every store, a free service port offset, one nginx
    worker), and the URL of its front end."""
    port, media, redis, memcached, mongodb = free_ports(5)
    return [
        "up", "--data-dir", str(data_dir), "--port", str(port), "--media-port", str(media),
        "--redis-port", str(redis), "--memcached-port", str(memcached),
        "--mongodb-port", str(mongodb),
        "--service-port-offset", str(launcher.free_service_offset()),
        "--nginx-workers", "1", "--timeout", "600",
    ], f"http://127.0.0.1:{port}"


@contextmanager
def stack_on_free_ports(data_dir: Path) -> Iterator[tuple[list[str], str]]:
    """A stack of its own in ``data_dir`` (``up_on_free_ports``), stopped after: its ``up``
    arguments and front-end URL."""
    args, url = up_on_free_ports(data_dir)
    up = socialbench(*args)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield args, url
    finally:
        socialbench("down", "--data-dir", str(data_dir))
