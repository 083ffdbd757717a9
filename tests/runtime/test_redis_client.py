"""The services' Redis client, against a real redis-server (and two sockets that misbehave)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from socialbench.runtime.pipelining import StoreConnectionError, StoreReplyError, StoreTimeout
from socialbench.runtime.redis_client import RedisClient, encode_command
from socialbench.stack.servers import ServerCommand, free_port

BOUNDS = {"connect_timeout_s": 1.0, "call_timeout_s": 1.0}


@pytest.fixture
async def redis(redis_server: ServerCommand) -> AsyncIterator[RedisClient]:
    client = client_of(redis_server, 4)
    yield client
    await client.close()


def client_of(server: ServerCommand, max_connections: int, db: int = 0) -> RedisClient:
    return RedisClient.from_url(f"redis://{server.address}/{db}",
                                max_connections=max_connections, **BOUNDS)


def unique(name: str) -> str:
    return f"{name}:{uuid.uuid4().hex}"


async def test_commands_answer_as_redis_does(redis: RedisClient) -> None:
    key, zset = unique("k"), unique("z")
    assert await redis.ping()
    assert await redis.set(key, "v")
    assert not await redis.set(key, "other", nx=True)
    assert await redis.get(key) == b"v"
    assert await redis.zadd(zset, {b"~marker": float("-inf"), "a": 1, "b": 2}) == 3
    assert await redis.zadd(zset, {"a": 5}, nx=True) == 0  # nx keeps a's score
    assert await redis.zrevrange(zset, 0, -1) == [b"b", b"a", b"~marker"]
    assert await redis.zrange(zset, 0, 0) == [b"~marker"]
    assert await redis.zscore(zset, "a") == 1.0
    assert await redis.zscore(zset, "~marker") == float("-inf")
    assert await redis.zscore(zset, "missing") is None
    assert await redis.zcard(zset) == 3
    assert await redis.zrem(zset, "a", "missing") == 1
    assert await redis.exists(key, zset, unique("none")) == 2
    assert await redis.delete(key, zset) == 2
    assert await redis.get(key) is None


async def test_a_pipeline_answers_each_command_in_order(redis: RedisClient) -> None:
    zset = unique("z")
    replies = await redis.pipeline(
        ("ZADD", zset, 1, "a", 2, "b"), ("ZREVRANGE", zset, 0, -1), ("ZSCORE", zset, "c"),
        ("EXISTS", zset),
    )
    assert replies == [2, [b"b", b"a"], None, 1]
    assert await redis.pipeline() == []


async def test_a_refusal_raises_and_leaves_the_connection_in_step(redis: RedisClient) -> None:
    key = unique("k")
    await redis.set(key, "a string")
    with pytest.raises(StoreReplyError, match="WRONGTYPE"):
        await redis.zadd(key, {"a": 1})
    with pytest.raises(StoreReplyError, match="WRONGTYPE"):
        await redis.pipeline(("GET", key), ("ZCARD", key), ("SET", key, "after"))
    assert await redis.get(key) == b"after"  # the pipeline's other commands were run


async def test_the_database_of_the_url_is_used(redis_server: ServerCommand,
                                                redis: RedisClient) -> None:
    other = client_of(redis_server, 1, db=3)
    key = unique("k")
    try:
        await other.set(key, "in db 3")
        assert await redis.get(key) is None
        assert await other.get(key) == b"in db 3"
    finally:
        await other.delete(key)
        await other.close()


async def test_a_script_is_sent_whole_once_redis_lacks_it(redis: RedisClient) -> None:
    fan_out = redis.script("for _, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1]) end "
                           "return #KEYS")
    keys = [unique("k") for _ in range(3)]
    await redis.execute_command("SCRIPT", "FLUSH")
    assert await fan_out(keys, ["x"]) == 3  # NOSCRIPT, then EVAL
    assert await redis.execute_command("SCRIPT", "EXISTS", fan_out.sha) == [1]
    assert await fan_out(keys, ["y"]) == 3  # EVALSHA
    assert [await redis.get(key) for key in keys] == [b"y"] * 3


async def test_a_burst_beyond_the_connections_is_pipelined_on_them(
    redis_server: ServerCommand,
) -> None:
    client = client_of(redis_server, 2)
    key = unique("counter")
    try:
        replies = await asyncio.gather(*(client.execute_command("INCR", key)
                                         for _ in range(300)))
        opened = client.open_connections
        assert await client.get(key) == b"300"
    finally:
        await client.delete(key)
        await client.close()
    assert sorted(replies) == list(range(1, 301))
    assert 1 <= opened <= 2


async def test_a_cancelled_caller_leaves_the_next_reply_to_the_next_command(
    redis_server: ServerCommand,
) -> None:
    client = client_of(redis_server, 1)
    key = unique("k")
    try:
        await client.set(key, "value")
        # BLPOP of an empty list answers nil after 0.3 s; its caller gives up before.
        blocked = asyncio.create_task(client.execute_command("BLPOP", unique("empty"), 0.3))
        await asyncio.sleep(0.05)
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert await client.get(key) == b"value"  # not BLPOP's nil
    finally:
        await client.delete(key)
        await client.close()


async def test_a_closed_connection_is_replaced_on_the_next_command(
    redis_server: ServerCommand, redis: RedisClient
) -> None:
    key = unique("k")
    await redis.set(key, "kept")
    killer = client_of(redis_server, 1)
    try:
        killed = await killer.execute_command("CLIENT", "KILL", "TYPE", "normal",
                                              "SKIPME", "yes")
    finally:
        await killer.close()
    assert killed >= 1
    assert await redis.get(key) == b"kept"


async def test_a_command_whose_connection_is_lost_is_sent_once_more() -> None:
    connections = 0

    async def close_the_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.read(100)
        if connections > 1:
            writer.write(b"$5\r\nvalue\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(close_the_first, "127.0.0.1", 0)
    client = RedisClient("127.0.0.1", server.sockets[0].getsockname()[1], max_connections=1,
                         **BOUNDS)
    try:
        assert await client.get("k") == b"value"
    finally:
        await client.close()
        server.close()
    assert connections == 2


async def test_a_stuck_redis_fails_every_command_in_flight_within_the_bound() -> None:
    stuck = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    client = RedisClient("127.0.0.1", stuck.getsockname()[1], max_connections=2,
                         connect_timeout_s=0.5, call_timeout_s=0.5)
    try:
        started = time.monotonic()
        results = await asyncio.gather(*(client.get(f"k{i}") for i in range(5)),
                                       return_exceptions=True)
        waited = time.monotonic() - started
    finally:
        await client.close()
        stuck.close()
    assert all(isinstance(result, StoreTimeout) for result in results), results
    assert waited < 3, f"waited {waited:.1f} s for a Redis that never answers"


async def test_no_redis_is_a_connection_error() -> None:
    client = RedisClient("127.0.0.1", free_port(), max_connections=1, **BOUNDS)
    try:
        with pytest.raises(StoreConnectionError, match="could not connect"):
            await client.ping()
    finally:
        await client.close()


async def test_a_server_that_speaks_no_resp_fails_its_command() -> None:
    async def answer_garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(answer_garbage, "127.0.0.1", 0)
    client = RedisClient("127.0.0.1", server.sockets[0].getsockname()[1], max_connections=1,
                         **BOUNDS)
    try:
        with pytest.raises(StoreConnectionError, match="unreadable reply"):
            await client.get("k")
    finally:
        await client.close()
        server.close()


def test_arguments_are_encoded_as_redis_reads_them() -> None:
    assert encode_command(("ZADD", b"k", 3, float("-inf"), "é")) == (
        b"*5\r\n$4\r\nZADD\r\n$1\r\nk\r\n$1\r\n3\r\n$4\r\n-inf\r\n$2\r\n\xc3\xa9\r\n"
    )
    for wrong in (True, None, ["a"]):
        with pytest.raises(TypeError, match="must be bytes, str, int or float"):
            encode_command(("SET", "k", wrong))  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["http://host:6379", "redis://", "redis://host/db1"])
def test_a_url_that_is_no_redis_address_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="redis"):
        RedisClient.from_url(url, max_connections=1, **BOUNDS)
