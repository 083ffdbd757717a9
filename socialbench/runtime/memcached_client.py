"""The services' memcached client: the text protocol over pipelining connections.

Ours because post-storage reads a page of posts with one ``get`` of many keys on every
timeline read, and aiomcache spent nearly twice this client's CPU on it
(docs/performance.md, ``bench store-clients``); it also had no timeouts of its own, and
two of its faults made a killed memcached unrecoverable (docs/robustness.md). Here every
wait is bounded as :mod:`~socialbench.runtime.pipelining` says. The commands are those
the services use: ``get`` of one key or many, ``set``, ``add``, ``delete``, and
``version`` for health, each safe to send twice (a command lost with its connection is).
Values are stored with flags 0, as aiomcache stores bytes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from socialbench.runtime.pipelining import (
    INCOMPLETE,
    ConnectionLost,
    PipelinedClient,
    PipelinedConnection,
    StoreConnectionError,
    StoreReplyError,
)

_VALUE_LINE = re.compile(rb"VALUE (\S+) \d+ (\d+)(?: \d+)?\r\n")  # key, bytes

# A key memcached's text protocol can carry: 1-250 bytes, no whitespace or control byte.
_KEY = re.compile(rb"[^\x00-\x20\x7f]{1,250}")

_VALUES = "values"  # a get's reply: VALUE lines and their data, then END
_LINE = "line"  # any other command's reply: one line



def _error(line: bytes) -> StoreReplyError | None:
    """The error of an error reply; :class:`StoreConnectionError` for one after which the
    connection may be out of step (memcached may read a data block as a command)."""
    if line.startswith(b"SERVER_ERROR"):  # e.g. a value too large: still in step
        return StoreReplyError(f"memcached: {line.decode(errors='replace')[:200]}")
    if line.startswith((b"ERROR", b"CLIENT_ERROR")):
        raise StoreConnectionError(f"memcached refused a command: {line[:200]!r}")
    return None


def check_key(key: bytes) -> bytes:
    """``key``, if the protocol can carry it; else :class:`ValueError` (a caller's bug:
    the services refuse such keys from their clients first, ``stores.memcached_key``)."""
    if _KEY.fullmatch(key) is None:
        raise ValueError(f"not a memcached key: {key[:60]!r}")
    return key


class MemcachedConnection(PipelinedConnection):
    """A connection that reads memcached's text replies from its buffer."""

    store = "memcached"

    def __init__(self, client: PipelinedClient) -> None:
        super().__init__(client)
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def read_reply(self, expect: str) -> Any:
        if expect is _VALUES:
            return self._read_values()
        buffer = self._buffer
        end = buffer.find(b"\r\n")
        if end < 0:
            return INCOMPLETE
        line = bytes(buffer[:end])
        del buffer[:end + 2]
        return _error(line) or line

    def _read_values(self) -> Any:
        """A get's values, once its whole reply is here (until then, only its VALUE lines
        are looked at: a value arriving in many packets is not copied for each)."""
        buffer = self._buffer
        found: list[tuple[bytes, int, int]] = []  # key, start and stop of its data
        position = 0
        while (header := _VALUE_LINE.match(buffer, position)) is not None:
            start = header.end()
            stop = start + int(header[2])
            if len(buffer) < stop + 2:
                return INCOMPLETE
            found.append((header[1], start, stop))
            position = stop + 2
        end = buffer.find(b"\r\n", position)
        if end < 0:
            return INCOMPLETE
        data = bytes(buffer[:end])
        del buffer[:end + 2]
        line = data[position:]
        if line == b"END":
            return {key: data[start:stop] for key, start, stop in found}
        if (error := _error(line)) is not None:
            return error
        raise StoreConnectionError(f"memcached sent {line[:80]!r} where a get's reply belongs")

    def has_unread(self) -> bool:
        return bool(self._buffer)


class MemcachedClient(PipelinedClient):
    """Commands to one memcached over up to ``max_connections`` pipelining connections."""

    connection_class = MemcachedConnection

    async def _command(self, payload: bytes, expect: str) -> Any:
        reply = await self.send(payload, expect)
        if isinstance(reply, StoreReplyError):
            raise reply
        return reply

    async def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        values = await self._command(b"get %s\r\n" % check_key(key), _VALUES)
        return values.get(key)

    async def multi_get(self, *keys: bytes) -> tuple[bytes | None, ...]:
        """The value of each key (None where missing), in one ``get``."""
        if not keys:
            return ()
        for key in keys:
            check_key(key)
        values = await self._command(b"get %s\r\n" % b" ".join(keys), _VALUES)
        return tuple(values.get(key) for key in keys)

    def get_sent(self, keys: Sequence[bytes]) -> asyncio.Future[Any]:
        """A ``get`` of ``keys`` (checked by the caller) written now if a connection is free,
        else as soon as one is: a pool writes every server's part before it waits for any.
        The future is the reply: the values found, by key, or the :class:`StoreReplyError`
        memcached answered."""
        payload = b"get %s\r\n" % b" ".join(keys)
        connection = self._ready_connection()
        if connection is not None:
            try:
                return connection.send(payload, _VALUES)
            except ConnectionLost:
                pass
        return asyncio.ensure_future(self.send(payload, _VALUES))

    async def set(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        """Store ``value`` under ``key`` (for ``exptime`` seconds; 0: until evicted)."""
        payload = b"set %s 0 %d %d\r\n%s\r\n" % (check_key(key), exptime, len(value), value)
        return bool(await self._command(payload, _LINE) == b"STORED")

    async def add(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        """Store ``value`` under ``key`` unless ``key`` holds a value; True if stored."""
        payload = b"add %s 0 %d %d\r\n%s\r\n" % (check_key(key), exptime, len(value), value)
        return bool(await self._command(payload, _LINE) == b"STORED")

    async def delete(self, key: bytes) -> bool:
        """True if ``key`` was there."""
        return bool(await self._command(b"delete %s\r\n" % check_key(key), _LINE) == b"DELETED")

    def describe(self) -> dict[str, str]:
        """Which client and topology serve the commands (for a results manifest)."""
        return {"client": "socialbench", "topology": "standalone"}

    async def version(self) -> bytes:
        line: bytes = await self._command(b"version\r\n", _LINE)
        return line.removeprefix(b"VERSION ")
