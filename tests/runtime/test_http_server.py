"""The services' HTTP server (socialbench.runtime.http_server) over real sockets.

Each test serves a small ASGI app in its own event loop on a free port and speaks raw
HTTP/1.1 to it, so what is checked is the bytes on the wire.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import requests
from starlette.types import Message, Scope

from socialbench.runtime.http_server import (
    HttpServer,
    LifespanFailed,
    ServerConfig,
    bind,
    bind_unix,
)
from socialbench.stack.servers import free_port


async def echo_app(scope: Scope, receive: Any, send: Any) -> None:
    """Answers ``<method> <path>?<query> <body>``; ``/slow`` waits 0.2 s, ``/stream`` answers
    in three bodies, ``/fail`` and ``/fail-late`` raise before and after answering."""
    if scope["type"] != "http":
        return
    message = await receive()
    body = message["body"]
    path = scope["path"]
    if path == "/slow":
        await asyncio.sleep(0.2)
    if path == "/fail":
        raise RuntimeError("failed before answering")
    answer = b"%s %s?%s %s" % (scope["method"].encode(), path.encode(), scope["query_string"],
                               body)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    if path == "/stream":
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/fail-late":
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("failed while answering")
    await send({"type": "http.response.body", "body": answer})


@asynccontextmanager
async def serving(app: Any = echo_app, **config: Any) -> AsyncIterator[HttpServer]:
    port = free_port()
    server = HttpServer(app, ServerConfig(port=port, **config), asyncio.get_running_loop())
    await server.start(bind(server.config))
    try:
        yield server
    finally:
        await server.shutdown()


async def connect(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.config.port)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One answer: status, headers (lower-case names), body (by length, chunks or close)."""
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line, "the connection closed before an answer"
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int((await reader.readline()).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
    else:
        body = await reader.read()
    return int(status_line.split()[1]), headers, body


def request(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


async def test_keep_alive_answers_with_length_and_date() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        for body in (b"first", b"second"):
            writer.write(request("POST", "/echo?x=1", body))
            status, headers, answer = await read_answer(reader)
            assert (status, answer) == (200, b"POST /echo?x=1 " + body)
            assert headers["content-length"] == str(len(answer))
            assert headers["date"].endswith("GMT")
            assert "connection" not in headers
        writer.close()


async def test_a_unix_socket_is_served_beside_the_port(tmp_path: Any) -> None:
    path = str(tmp_path / "s.sock")
    config = ServerConfig(port=free_port(), unix_path=path)
    server = HttpServer(echo_app, config, asyncio.get_running_loop())
    await server.start(bind(config), bind_unix(path))
    try:
        for reader, writer in (await asyncio.open_unix_connection(path), await connect(server)):
            writer.write(request("POST", "/echo", b"hi"))
            status, _, answer = await read_answer(reader)
            assert (status, answer) == (200, b"POST /echo? hi")
            writer.close()
    finally:
        await server.shutdown()


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("POST", "/slow", b"1") + request("POST", "/fast", b"2")
                     + request("GET", "/fast", b"3"))
        answers = [(await read_answer(reader))[2] for _ in range(3)]
        assert answers == [b"POST /slow? 1", b"POST /fast? 2", b"GET /fast? 3"]
        writer.close()


async def test_a_chunked_body_is_given_whole_after_100_continue() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"HTTP/1.1 100 Continue\r\n"
        assert await reader.readline() == b"\r\n"
        writer.write(b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
        assert (await read_answer(reader))[2] == b"POST /up? abcdefg"
        writer.close()


async def test_a_body_over_the_cap_is_refused_413_before_it_is_read() -> None:
    async with serving(max_body_bytes=1000) as server:
        reader, writer = await connect(server)
        writer.write(b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        status, headers, body = await read_answer(reader)
        assert status == 413 and headers["connection"] == "close"
        assert b"over 1000 bytes" in body
        assert await closed(reader)
        # Chunked, so only counted as it comes.
        reader, writer = await connect(server)
        writer.write(b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"200\r\n" + b"x" * 512 + b"\r\n" + b"200\r\n" + b"x" * 512 + b"\r\n")
        assert (await read_answer(reader))[0] == 413


async def test_a_head_over_the_cap_is_refused_431() -> None:
    async with serving(max_head_bytes=2000) as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/", extra=f"X-Big: {'y' * 3000}\r\n"))
        assert (await read_answer(reader))[0] == 431
        assert await closed(reader)


async def test_a_malformed_request_gets_400_after_the_good_ones_before_it() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("POST", "/slow", b"ok") + b"NOT HTTP AT ALL\r\n\r\n")
        assert (await read_answer(reader))[:1] == (200,)
        status, _, body = await read_answer(reader)
        assert status == 400 and b"invalid HTTP request" in body
        assert await closed(reader)


async def test_head_has_the_length_but_no_body() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("HEAD", "/x") + request("GET", "/x"))
        status_line = await reader.readline()
        head = b""
        while (line := await reader.readline()) != b"\r\n":
            head += line
        assert status_line.startswith(b"HTTP/1.1 200") and b"content-length: 9" in head
        # The next bytes are the GET's answer: the HEAD's had no body.
        assert (await read_answer(reader))[2] == b"GET /x? "
        writer.close()


async def test_an_answer_in_many_bodies_is_chunked_and_ends_an_http10_connection() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/stream"))
        _, headers, body = await read_answer(reader)
        assert headers["transfer-encoding"] == "chunked" and body == b"one,two,three"
        writer.close()
        reader, writer = await connect(server)
        writer.write(b"GET /stream HTTP/1.0\r\n\r\n")
        _, headers, body = await read_answer(reader)
        assert "transfer-encoding" not in headers and headers["connection"] == "close"
        assert body == b"one,two,three"


async def test_an_app_failing_before_its_answer_gets_500_after_it_a_closed_connection() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/fail"))
        status, headers, _ = await read_answer(reader)
        assert status == 500 and headers["connection"] == "close"
        assert await closed(reader)
        reader, writer = await connect(server)
        writer.write(request("GET", "/fail-late"))
        status_line = await reader.readline()
        assert status_line.startswith(b"HTTP/1.1 200")
        rest = await asyncio.wait_for(reader.read(), 5)
        assert b"partial" in rest and not rest.endswith(b"0\r\n\r\n")  # never terminated


async def test_connection_close_and_http10_without_keep_alive_close_after_the_answer() -> None:
    async with serving() as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/a", extra="Connection: close\r\n"))
        _, headers, _ = await read_answer(reader)
        assert headers["connection"] == "close" and await closed(reader)
        reader, writer = await connect(server)
        writer.write(b"GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
        for _ in range(2):
            _, headers, body = await read_answer(reader)
            assert headers["connection"] == "keep-alive" and body == b"GET /b? "
        writer.close()


async def test_the_app_hears_of_a_client_that_went() -> None:
    heard: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def waits_for_disconnect(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        heard.set_result(await receive())

    async with serving(waits_for_disconnect) as server:
        _, writer = await connect(server)
        writer.write(request("POST", "/", b"body"))
        await asyncio.sleep(0.05)
        writer.close()
        assert (await asyncio.wait_for(heard, 5))["type"] == "http.disconnect"


async def test_idle_connections_are_closed_after_the_keep_alive_time() -> None:
    async with serving(keep_alive_s=0.3) as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/"))
        await read_answer(reader)
        started = time.monotonic()
        assert await closed(reader)
        assert 0.2 < time.monotonic() - started < 3


async def test_a_large_answer_read_slowly_arrives_whole() -> None:
    chunk = b"z" * 65536

    async def big(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(128):  # 8 MiB: the transport's buffer fills and it waits to drain
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async with serving(big) as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/"))
        await asyncio.sleep(0.5)
        status, _, body = await read_answer(reader)
        assert status == 200 and len(body) == 128 * len(chunk)
        writer.close()


async def test_the_lifespan_runs_around_serving_and_a_failed_startup_raises() -> None:
    events: list[str] = []

    def lifespan_app(fail: bool) -> Any:
        async def app(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                while True:
                    message = await receive()
                    events.append(message["type"])
                    if message["type"] == "lifespan.startup":
                        if fail:
                            await send({"type": "lifespan.startup.failed", "message": "no db"})
                            return
                        scope["state"]["ready"] = "yes"
                        await send({"type": "lifespan.startup.complete"})
                    else:
                        await send({"type": "lifespan.shutdown.complete"})
                        return
            await receive()
            body = scope["state"]["ready"].encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
        return app

    async with serving(lifespan_app(fail=False)) as server:
        reader, writer = await connect(server)
        writer.write(request("GET", "/"))
        assert (await read_answer(reader))[2] == b"yes"
        writer.close()
    assert events == ["lifespan.startup", "lifespan.shutdown"]
    with pytest.raises(LifespanFailed, match="no db"):
        async with serving(lifespan_app(fail=True)):
            pass


async def test_shutdown_lets_a_request_in_flight_finish_and_closes_idle_connections() -> None:
    async with serving() as server:
        idle_reader, idle_writer = await connect(server)
        idle_writer.write(request("GET", "/"))
        await read_answer(idle_reader)
        reader, writer = await connect(server)
        writer.write(request("GET", "/slow"))
        await asyncio.sleep(0.05)
        stopping = asyncio.create_task(server.shutdown())
        assert await closed(idle_reader)
        status, headers, body = await read_answer(reader)
        assert (status, body, headers["connection"]) == (200, b"GET /slow? ", "close")
        await stopping
        with pytest.raises(OSError):
            await connect(server)


def test_workers_share_the_port_a_dead_one_is_replaced_and_sigterm_stops_all(
        tmp_path: Any) -> None:
    port = free_port()
    unix_path = tmp_path / "unique-id.sock"
    env = {**os.environ, "SOCIALBENCH_JWT_SECRET": "s" * 40}
    process = subprocess.Popen(
        [sys.executable, "-m", "socialbench.cli", "serve", "unique-id", "--port", str(port),
         "--workers", "2", "--unix", str(unix_path)], env=env, stderr=subprocess.PIPE,
        text=True)
    try:
        def worker_pids() -> set[int]:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                children = subprocess.run(["pgrep", "-P", str(process.pid)],
                                          capture_output=True, text=True).stdout.split()
                if len(children) == 2:
                    try:
                        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                        return {int(pid) for pid in children}
                    except requests.ConnectionError:
                        pass
                time.sleep(0.2)
            raise AssertionError("two workers did not start")

        first = worker_pids()
        os.kill(min(first), signal.SIGKILL)
        time.sleep(0.5)
        second = worker_pids()
        assert max(first) in second and min(first) not in second
        answer = requests.post(f"http://127.0.0.1:{port}/compose_unique_id",
                               json={}, timeout=5)
        assert answer.status_code == 200, answer.text
        # The same workers on the Unix domain socket.
        with socket.socket(socket.AF_UNIX) as over_unix:
            over_unix.settimeout(5)
            over_unix.connect(str(unix_path))
            over_unix.sendall(request("POST", "/compose_unique_id", b"{}",
                                      "content-type: application/json\r\n"))
            assert over_unix.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    assert not unix_path.exists()
