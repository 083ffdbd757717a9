"""An HTTP server of known capacity for the ramp's tests, run as a separate process.

    python capacity_server.py PORT --concurrency C --service-ms S

Every request takes exactly S ms of one of C slots, first come first served: the server
handles C / S requests per second (C=10, S=50 ms: 200 req/s) and no more. Below that an
evenly spaced load sees S ms; above it the queue, and the latency, grow without bound.
Slots are booked on a virtual clock (a slot is next free at its last booking's end), so
timer jitter delays answers but never lowers the capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import time

import httptools
import uvloop


class Slots:
    """C servers of fixed service time: when the next request would finish."""

    def __init__(self, concurrency: int, service_s: float) -> None:
        self.service_s = service_s
        self.free_at = [0.0] * concurrency  # a heap of the times each slot is next free

    def book(self, now: float) -> float:
        start = max(now, heapq.heappop(self.free_at))
        finish = start + self.service_s
        heapq.heappush(self.free_at, finish)
        return finish


class CapacityProtocol(asyncio.Protocol):
    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        now = time.perf_counter()
        finish = self.slots.book(now)
        asyncio.get_running_loop().call_later(finish - now, self.answer)

    def answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, slots: Slots) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: CapacityProtocol(slots), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--service-ms", type=float, default=50.0)
    args = parser.parse_args()
    uvloop.run(serve(args.port, Slots(args.concurrency, args.service_ms / 1000)))


if __name__ == "__main__":
    main()
