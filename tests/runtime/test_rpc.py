"""The service-to-service HTTP client: answers, errors, keep-alive, bounds, a dead neighbour."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from socialbench.runtime.errors import (
    Conflict,
    NeighbourError,
    NeighbourTimeout,
    NeighbourUnavailable,
)
from socialbench.runtime.rpc import Neighbour
from socialbench.stack.servers import free_port

# What the fake neighbour does with a request: (status, body) to answer, None to hang up.
Handler = Callable[[str, bytes], Awaitable[tuple[int, bytes] | None]]
HANG_GUARD_S = 10.0  # a test that would hang fails instead


class RawNeighbour:
    """A keep-alive HTTP/1.1 server on a free port that answers as ``handler`` says."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                request_line, *lines = head.strip().split("\r\n")
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    headers[name.lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                path = request_line.split(" ")[1]
                self.requests.append((path, headers, body))
                answer = await self.handler(path, body)
                if answer is None:
                    return
                status, payload = answer
                writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (status, len(payload), payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def hang_up_all(self) -> None:
        """Close every connection, as a neighbour that restarts does."""
        for writer in self.writers:
            writer.close()


@contextlib.asynccontextmanager
async def neighbour(handler: Handler, **options: float) -> AsyncIterator[tuple[RawNeighbour,
                                                                                Neighbour]]:
    fake = RawNeighbour(handler)
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = Neighbour("fake", f"http://127.0.0.1:{port}",
                       pool_size=int(options.get("pool_size", 8)),
                       timeout_s=options.get("timeout_s", 5.0),
                       connection_requests=int(options.get("connection_requests", 0)))
    try:
        async with asyncio.timeout(HANG_GUARD_S):
            yield fake, client
    finally:
        await client.close()
        fake.hang_up_all()
        server.close()


async def echo(path: str, body: bytes) -> tuple[int, bytes]:
    return 200, orjson.dumps({"path": path, "got": orjson.loads(body)})


async def test_a_call_posts_json_and_decodes_the_answer_over_one_connection() -> None:
    async with neighbour(echo) as (fake, client):
        for n in range(3):
            assert await client.call("do_it", {"n": n}) == {"path": "/do_it", "got": {"n": n}}
        assert await client.call_raw("raw", [1]) == b'{"path":"/raw","got":[1]}'
    assert fake.connections == 1
    _, headers, _ = fake.requests[0]
    assert headers["content-type"] == "application/json"
    assert "traceparent" not in headers


async def test_error_answers_become_the_runtime_errors() -> None:
    async def failing(path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/taken":
            return 409, b'{"error": "Conflict", "message": "the name is taken"}'
        if path == "/again":
            return 200, b'{"ok": true}'
        return 503, b'{"error": "StoreError", "message": "redis is down"}'

    async with neighbour(failing) as (fake, client):
        with pytest.raises(Conflict, match="the name is taken"):
            await client.call("taken", {})
        with pytest.raises(NeighbourError, match="redis is down") as raised:
            await client.call("down", {})
        assert (raised.value.status_code, raised.value.remote_kind) == (503, "StoreError")
        assert await client.call("again", None) == {"ok": True}  # the connection is kept
    assert fake.connections == 1


async def test_a_neighbour_that_is_not_there_is_unavailable_at_once() -> None:
    client = Neighbour("gone", f"http://127.0.0.1:{free_port()}", pool_size=4, timeout_s=5.0)
    async with asyncio.timeout(HANG_GUARD_S):
        with pytest.raises(NeighbourUnavailable, match="gone: do_it: cannot connect"):
            await client.call("do_it", {})


async def test_a_connection_dropped_mid_request_is_a_503_not_a_hang() -> None:
    async def hang_up(path: str, body: bytes) -> None:
        return None

    async with neighbour(hang_up) as (_, client):
        with pytest.raises(NeighbourUnavailable, match="fake: do_it: connection closed"):
            await client.call("do_it", {})
        with pytest.raises(NeighbourUnavailable):  # and again, on a new connection
            await client.call("do_it", {})


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_not_reused() -> None:
    slow = asyncio.Event()

    async def answer(path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/slow":
            await slow.wait()
            return 200, b'{"late": true}'
        return 200, b'{"fast": true}'

    async with neighbour(answer, timeout_s=0.2) as (fake, client):
        with pytest.raises(NeighbourTimeout, match="fake: no answer to slow in time"):
            await client.call("slow", {})
        slow.set()
        assert await client.call("fast", {}) == {"fast": True}  # not the late answer
    assert fake.connections == 2


async def test_connections_the_neighbour_closed_while_idle_are_not_used() -> None:
    async with neighbour(echo) as (fake, client):
        assert (await client.call("a", 1))["got"] == 1
        fake.hang_up_all()  # a restart: every kept connection is closed
        await asyncio.sleep(0.05)  # the client's loop hears of it
        assert (await client.call("b", 2))["got"] == 2
    assert fake.connections == 2


async def test_a_connection_is_closed_after_its_bound_of_requests_and_none_fails() -> None:
    async with neighbour(echo, connection_requests=3) as (fake, client):
        for n in range(7):
            assert (await client.call("n", n))["got"] == n
        await asyncio.sleep(0.05)  # the client's loop hears of the closes
        assert client._open == 1  # the retired ones counted out
    assert fake.connections == 3  # 3 + 3 + 1 requests


async def test_a_bound_on_a_full_pool_hands_waiting_calls_a_new_connection() -> None:
    async def slow(path: str, body: bytes) -> tuple[int, bytes]:
        await asyncio.sleep(0.005)
        return 200, body

    async with neighbour(slow, pool_size=2, connection_requests=2) as (fake, client):
        answers = await asyncio.gather(*(client.call("n", n) for n in range(12)))
    assert answers == list(range(12))
    assert fake.connections == 6


async def test_the_pool_is_bounded_and_every_waiting_call_is_served() -> None:
    in_flight = 0
    most = 0

    async def busy(path: str, body: bytes) -> tuple[int, bytes]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return 200, body

    async with neighbour(busy, pool_size=2) as (fake, client):
        answers = await asyncio.gather(*(client.call("n", n) for n in range(10)))
    assert answers == list(range(10))
    assert fake.connections == 2
    assert most == 2


async def test_a_cancelled_call_leaves_the_pool_usable() -> None:
    release = asyncio.Event()

    async def answer(path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/wait":
            await release.wait()
        return 200, body

    async with neighbour(answer, pool_size=1) as (_, client):
        call = asyncio.create_task(client.call("wait", 1))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        assert await client.call("next", 2) == 2


async def test_a_neighbour_on_a_unix_socket_is_called_over_it(tmp_path: Path) -> None:
    fake = RawNeighbour(echo)
    path = str(tmp_path / "fake.sock")
    server = await asyncio.start_unix_server(fake.serve, path)
    client = Neighbour("fake", f"unix:{path}", pool_size=4, timeout_s=5.0)
    try:
        async with asyncio.timeout(HANG_GUARD_S):
            for n in range(3):
                assert await client.call("do_it", {"n": n}) == {"path": "/do_it",
                                                                "got": {"n": n}}
    finally:
        await client.close()
        fake.hang_up_all()
        server.close()
    assert fake.connections == 1
    assert fake.requests[0][1]["host"] == "localhost"


async def test_a_unix_socket_that_is_not_there_is_unavailable_at_once(tmp_path: Path) -> None:
    path = tmp_path / "gone.sock"
    client = Neighbour("gone", f"unix:{path}", pool_size=4, timeout_s=5.0)
    async with asyncio.timeout(HANG_GUARD_S):
        with pytest.raises(NeighbourUnavailable, match=f"cannot connect to {path}"):
            await client.call("do_it", {})


@pytest.mark.parametrize("url", ["unix:relative.sock", "ftp://host:1", "127.0.0.1:9001"])
def test_an_address_that_is_neither_http_nor_a_unix_path_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="expected an http:// URL or unix:/path"):
        Neighbour("bad", url, pool_size=1, timeout_s=1.0)
