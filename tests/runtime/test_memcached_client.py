"""The services' memcached client, against a real memcached (and fakes that misbehave)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import aiomcache
import pytest

from socialbench.runtime.memcached_client import MemcachedClient, check_key
from socialbench.runtime.pipelining import StoreConnectionError, StoreReplyError
from socialbench.stack.servers import ServerCommand

BOUNDS = {"connect_timeout_s": 1.0, "call_timeout_s": 1.0}


@pytest.fixture
async def memcached(memcached_server: ServerCommand) -> AsyncIterator[MemcachedClient]:
    client = MemcachedClient(memcached_server.host, memcached_server.port, max_connections=2,
                             **BOUNDS)
    yield client
    await client.close()


def unique(name: str) -> bytes:
    return f"{name}:{uuid.uuid4().hex}".encode()


async def test_set_get_and_delete(memcached: MemcachedClient) -> None:
    key, value = unique("k"), b"a value with \r\nEND\r\n and \x00 in it"
    assert await memcached.get(key) is None
    assert await memcached.set(key, value)
    assert await memcached.get(key) == value
    assert await memcached.delete(key)
    assert not await memcached.delete(key)
    assert await memcached.get(key) is None
    assert (await memcached.version()).count(b".") == 2


async def test_add_stores_only_a_missing_key(memcached: MemcachedClient) -> None:
    key = unique("k")
    assert await memcached.add(key, b"first")
    assert not await memcached.add(key, b"second")
    assert await memcached.get(key) == b"first"


async def test_a_get_of_many_keys_answers_each_in_the_order_asked(
    memcached: MemcachedClient,
) -> None:
    a, b, missing = unique("a"), unique("b"), unique("missing")
    await memcached.set(a, b"A")
    await memcached.set(b, b"")
    assert await memcached.multi_get(b, missing, a, b) == (b"", None, b"A", b"")
    assert await memcached.multi_get() == ()


async def test_what_it_stores_another_client_reads_and_the_other_way(
    memcached_server: ServerCommand, memcached: MemcachedClient,
) -> None:
    other = aiomcache.Client(memcached_server.host, memcached_server.port)
    ours, theirs = unique("ours"), unique("theirs")
    try:
        await memcached.set(ours, b"from us")
        await other.set(theirs, b"from aiomcache")
        assert await other.get(ours) == b"from us"
        assert await memcached.get(theirs) == b"from aiomcache"
    finally:
        await other.close()


async def test_a_value_in_many_packets_is_read_whole(memcached: MemcachedClient) -> None:
    key, value = unique("big"), bytes(range(256)) * 2000  # 512 kB
    await memcached.set(key, value)
    assert await memcached.multi_get(key, unique("missing")) == (value, None)


async def test_a_refused_value_raises_and_the_connection_stays_in_step(
    memcached: MemcachedClient,
) -> None:
    key = unique("k")
    with pytest.raises(StoreReplyError, match="SERVER_ERROR"):
        await memcached.set(key, b"x" * (2 << 20))  # over memcached's 1 MB item limit
    assert await memcached.set(key, b"small")
    assert await memcached.get(key) == b"small"
    assert memcached.open_connections == 1


async def test_a_burst_beyond_the_connections_is_pipelined_on_them(
    memcached: MemcachedClient,
) -> None:
    keys = [unique(f"burst{i}") for i in range(200)]
    await asyncio.gather(*(memcached.set(key, key.upper()) for key in keys))
    values = await asyncio.gather(*(memcached.multi_get(key, keys[0]) for key in keys))
    assert values == [(key.upper(), keys[0].upper()) for key in keys]
    assert 1 <= memcached.open_connections <= 2


@pytest.mark.parametrize("key", [b"", b"a b", b"a\r\nb", b"a\x00", b"a\x7f", b"x" * 251])
async def test_a_key_the_protocol_cannot_carry_is_refused_before_sending(
    memcached: MemcachedClient, key: bytes,
) -> None:
    with pytest.raises(ValueError, match="not a memcached key"):
        check_key(key)
    with pytest.raises(ValueError, match="not a memcached key"):
        await memcached.multi_get(b"fine", key)
    assert memcached.open_connections == 0  # nothing was sent


async def fake_memcached(reply: bytes) -> tuple[asyncio.Server, MemcachedClient]:
    """A server answering every command with ``reply``, and a client of it."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readline():
            writer.write(reply)
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, MemcachedClient("127.0.0.1", port, max_connections=1, **BOUNDS)


@pytest.mark.parametrize(("reply", "error"), [
    (b"CLIENT_ERROR bad command line format\r\n", "refused a command"),
    (b"VALUE k 0 x\r\n", "where a get.s reply belongs"),
    (b"STORED\r\n", "where a get.s reply belongs"),
])
async def test_a_reply_that_may_leave_the_connection_out_of_step_closes_it(
    reply: bytes, error: str
) -> None:
    server, client = await fake_memcached(reply)
    try:
        with pytest.raises(StoreConnectionError, match=error):
            await client.get(b"k")
        assert client.open_connections == 0
    finally:
        await client.close()
        server.close()


async def test_a_whole_reply_is_answered_while_the_next_one_is_still_arriving() -> None:
    release = asyncio.Event()

    async def split_second_reply(reader: asyncio.StreamReader,
                                 writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        await reader.readline()
        writer.write(b"VALUE a 0 1\r\nA\r\nEND\r\nVALUE b 0 1\r\nB")  # a whole, b half
        await writer.drain()
        await release.wait()
        writer.write(b"\r\nEND\r\n")
        await writer.drain()

    server = await asyncio.start_server(split_second_reply, "127.0.0.1", 0)
    client = MemcachedClient("127.0.0.1", server.sockets[0].getsockname()[1],
                             max_connections=1, **BOUNDS)
    try:
        get_a = asyncio.ensure_future(client.get(b"a"))
        get_b = asyncio.ensure_future(client.get(b"b"))  # pipelined on the same connection
        assert await asyncio.wait_for(get_a, timeout=5) == b"A"
        assert not get_b.done()
        release.set()
        assert await asyncio.wait_for(get_b, timeout=5) == b"B"
    finally:
        await client.close()
        server.close()
