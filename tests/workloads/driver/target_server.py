"""A small HTTP/1.1 server for the driver's tests, run as a separate process.

    python target_server.py PORT [--stall-after S] [--stall-for S]

Paths: ``/ok`` answers 200; ``/status/<code>`` answers that code; ``/close`` closes the
connection without an answer; ``/hang`` never answers; ``/stall`` answers 200, except that
once, ``--stall-after`` seconds after its first request, it stops answering for
``--stall-for`` seconds and then answers everything it held back.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httptools
import uvloop


class Stall:
    """The one stall of ``/stall``: when it starts and ends (perf_counter seconds)."""

    def __init__(self, after_s: float, for_s: float) -> None:
        self.after_s = after_s
        self.for_s = for_s
        self.start: float | None = None

    def release_time(self, now: float) -> float:
        """When a request arriving ``now`` may be answered."""
        if self.start is None:
            self.start = now + self.after_s
        if self.start <= now < self.start + self.for_s:
            return self.start + self.for_s
        return now


class TargetProtocol(asyncio.Protocol):
    def __init__(self, stall: Stall) -> None:
        self.stall = stall
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.ready_at = 0.0  # answers go out in order, never before the previous one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()  # type: ignore[union-attr]

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        path = httptools.parse_url(self.url).path.decode()
        self.url = b""
        transport = self.transport
        assert transport is not None
        if path == "/close":
            transport.close()
        elif path == "/hang":
            pass
        elif path.startswith("/status/"):
            transport.write(response(int(path.rsplit("/", 1)[1])))
        elif path == "/stall":
            now = time.perf_counter()
            self.ready_at = max(self.stall.release_time(now), self.ready_at)
            delay = self.ready_at - now
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self.answer)
            else:
                transport.write(response(200))
        else:
            transport.write(response(200))

    def answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(response(200))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def response(status: int) -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok".encode()


async def serve(port: int, stall: Stall) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: TargetProtocol(stall), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--stall-after", type=float, default=2.0)
    parser.add_argument("--stall-for", type=float, default=1.0)
    args = parser.parse_args()
    uvloop.run(serve(args.port, Stall(args.stall_after, args.stall_for)))


if __name__ == "__main__":
    main()
