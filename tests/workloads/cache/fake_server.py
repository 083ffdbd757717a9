"""A tiny RESP server for the cache tests: ``python fake_server.py PORT [--delay-ms D]
[--hold N] [--log FILE]``.

It answers GET with nil and SET with +OK, each read's replies ``D`` ms late. With
``--hold N`` it answers nothing until N requests have arrived on a connection (or 0.3 s
passed) and logs how many requests were waiting each time it answered: what a client
with N requests in flight must show.
"""

from __future__ import annotations

import argparse
import asyncio


class Fake(asyncio.Protocol):
    def __init__(self, delay_s: float, hold: int, log: list[int]) -> None:
        self.delay_s = delay_s
        self.hold = hold
        self.log = log
        self.buffer = b""
        self.waiting: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        replies = []
        while True:  # whole commands only: *N then N bulk strings
            parsed = _command(self.buffer)
            if parsed is None:
                break
            name, used = parsed
            self.buffer = self.buffer[used:]
            replies.append(b"+OK\r\n" if name == b"SET" else b"$-1\r\n")
        self.waiting.extend(replies)
        loop = asyncio.get_running_loop()
        if self.hold:
            if len(self.waiting) >= self.hold:
                self._answer()
            elif self.waiting and self.timer is None:
                self.timer = loop.call_later(0.3, self._answer)
        elif self.waiting:
            if self.delay_s:
                loop.call_later(self.delay_s, self._send, self.waiting)
                self.waiting = []
            else:
                self._answer()

    def _answer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.hold and self.waiting:
            self.log.append(len(self.waiting))
        self._send(self.waiting)
        self.waiting = []

    def _send(self, replies: list[bytes]) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"".join(replies))


def _command(buffer: bytes) -> tuple[bytes, int] | None:
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    count = int(buffer[1:end])
    pos, name = end + 2, b""
    for index in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None
        size = int(buffer[pos + 1:end])
        if len(buffer) < end + 2 + size + 2:
            return None
        if index == 0:
            name = buffer[end + 2:end + 2 + size].upper()
        pos = end + 2 + size + 2
    return name, pos


def _append(path: str, text: str) -> None:
    with open(path, "a") as file:
        file.write(text)


async def serve(port: int, delay_s: float, hold: int, log_path: str | None) -> None:
    log: list[int] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Fake(delay_s, hold, log), "127.0.0.1", port)
    async with server:
        while True:
            await asyncio.sleep(0.1)
            if log_path and log:
                _append(log_path, "".join(f"{n}\n" for n in log))
                log.clear()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--hold", type=int, default=0)
    parser.add_argument("--log")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay_ms / 1000, args.hold, args.log))
