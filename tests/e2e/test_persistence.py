"""What `socialbench down` and `up` (no --fresh) keep: home timelines (Redis's append-only
file), posts (MongoDB), and logins (the data dir's secret). A stack of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from socialbench import registry
from socialbench.stack import launcher
from socialbench.stack.servers import free_ports, port_open
from tests.e2e.support import FORM, compose, follow, new_user, timeline
from tests.support import socialbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def free_service_offset() -> int:
    """An offset (as the session stack's) at which no registry port is taken."""
    # Below the ephemeral range (32768-): no outgoing connection holds one of its ports.
    for offset in range(12000, 20000, 100):
        if not any(port_open("127.0.0.1", s.port + offset) for s in registry.SERVICES):
            return offset
    raise RuntimeError("no free range of service ports")


class OwnStack:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        port, media, redis, memcached, mongodb = free_ports(5)
        self.args = ["--data-dir", str(data_dir), "--port", str(port),
                     "--media-port", str(media), "--redis-port", str(redis),
                     "--memcached-port", str(memcached), "--mongodb-port", str(mongodb),
                     "--service-port-offset", str(free_service_offset()),
                     "--nginx-workers", "1"]
        self.url = f"http://127.0.0.1:{port}"

    def up(self) -> None:
        result = socialbench("up", *self.args)
        if result.returncode != 0:
            logs = "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}"
                             for p in sorted((self.data_dir / "logs").glob("*.log")))
            pytest.fail(f"socialbench up failed:\n{result.stdout}\n{result.stderr}\n{logs}")

    def down(self) -> None:
        state = launcher.StackState.read(self.data_dir)
        result = socialbench("down", "--data-dir", str(self.data_dir))
        assert result.returncode == 0, result.stderr
        if state is not None:
            left = [c.name for c in state.components if launcher.pid_alive(c.pid)]
            assert not left, f"processes left running after down: {left}"


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[OwnStack]:
    stack = OwnStack(tmp_path / "stack")
    try:
        yield stack
    finally:
        socialbench("down", "--data-dir", str(stack.data_dir))


def test_down_and_up_keep_home_timelines_posts_and_logins(own_stack: OwnStack) -> None:
    own_stack.up()
    with httpx.Client(base_url=own_stack.url, timeout=30) as client:
        author, author_name = new_user(client)
        reader, reader_name = new_user(client)
        follow(client, reader, author)
        compose(client, author, author_name, "written before the restart")
        [before] = timeline(client, "home", reader)
        login = client.post("/api/user/login", headers=FORM,
                            content=f"username={reader_name}&password=password_{reader}")
        cookie = login.cookies.get("login_token")
        assert cookie
    secret = (own_stack.data_dir / launcher.SECRET_FILE).read_text()

    own_stack.down()
    aof = own_stack.data_dir / "redis" / "appendonlydir"
    assert any(aof.iterdir()), "Redis wrote no append-only file"
    own_stack.up()

    assert (own_stack.data_dir / launcher.SECRET_FILE).read_text() == secret
    with httpx.Client(base_url=own_stack.url, timeout=30) as client:
        [after] = timeline(client, "home", reader)
        assert after == before
        assert after["text"] == "written before the restart"
    # The session from before the restart is still good.
    with httpx.Client(base_url=own_stack.url, timeout=30,
                      cookies={"login_token": cookie}) as logged_in:
        response = logged_in.get("/api/home-timeline/read", params={"start": 0, "stop": 10})
        assert response.status_code == 200, response.text
        assert [p["post_id"] for p in response.json()] == [before["post_id"]]
    own_stack.down()
