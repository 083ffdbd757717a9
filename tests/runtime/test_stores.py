"""The store clients of the runtime, against the real servers."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from socialbench.registry import Store
from socialbench.runtime.memcached_client import check_key
from socialbench.runtime.pipelining import StoreConnectionError, StoreTimeout
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import STORE_ERRORS, Stores, memcached_key
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_port,
    memcached_command,
    mongodb_command,
    redis_command,
)

T = TypeVar("T")

ALL = (Store.REDIS, Store.MEMCACHED, Store.MONGODB)


def settings_for(redis: ServerCommand, memcached: ServerCommand, mongodb: ServerCommand,
                 pool_size: int) -> Settings:
    return Settings(
        redis_url=f"redis://{redis.address}/0", redis_pool_size=pool_size,
        memcached_address=memcached.address, memcached_pool_size=pool_size,
        mongodb_url=f"mongodb://{mongodb.address}", mongodb_pool_size=pool_size,
    )


async def test_a_burst_larger_than_the_pools_waits_instead_of_failing(
    redis_server: ServerCommand, memcached_server: ServerCommand, mongodb_server: ServerCommand
) -> None:
    stores = Stores.connect(settings_for(redis_server, memcached_server, mongodb_server, 4), ALL)
    redis, memcached = stores.require_redis(), stores.require_memcached()
    try:
        async def one(i: int) -> tuple[bool, bytes | None]:
            _, value = await redis.pipeline(("SET", f"burst:{i}", i), ("GET", f"burst:{i}"))
            await memcached.set(f"burst:{i}".encode(), str(i).encode())
            return value == str(i).encode(), await memcached.get(f"burst:{i}".encode())

        results = await asyncio.gather(*(one(i) for i in range(200)))
    finally:
        await stores.close()
    assert all(ok for ok, _ in results)
    assert [cached for _, cached in results] == [str(i).encode() for i in range(200)]


async def test_health_names_each_store_and_its_state(
    redis_server: ServerCommand, memcached_server: ServerCommand, mongodb_server: ServerCommand
) -> None:
    healthy = Stores.connect(settings_for(redis_server, memcached_server, mongodb_server, 2), ALL)
    dead_redis = ServerCommand("redis", [], "127.0.0.1", free_port())
    degraded = Stores.connect(
        settings_for(dead_redis, memcached_server, mongodb_server, 2), (Store.REDIS,)
    )
    try:
        assert await healthy.health() == {"mongodb": "ok", "redis": "ok", "memcached": "ok"}
        report = await degraded.health()
    finally:
        await healthy.close()
        await degraded.close()
    assert list(report) == ["redis"]
    assert report["redis"].startswith("error")


async def test_describe_says_which_client_and_topology_serve_each_store(
    redis_server: ServerCommand, memcached_server: ServerCommand, mongodb_server: ServerCommand
) -> None:
    one = settings_for(redis_server, memcached_server, mongodb_server, 2)
    pool = one.model_copy(update={"memcached_address": f"{memcached_server.address},"
                                                      f"127.0.0.1:{free_port()}"})
    stores, pooled = Stores.connect(one, ALL), Stores.connect(pool, (Store.MEMCACHED,))
    try:
        described = await stores.describe()
        pooled_described = await pooled.describe()
    finally:
        await stores.close()
        await pooled.close()
    assert list(described) == ["mongodb", "redis", "memcached"]
    assert described["mongodb"]["client"] == "socialbench"
    assert described["mongodb"]["topology"] != "unknown"  # what the server's hello said
    assert described["redis"] == described["memcached"] == {
        "client": "socialbench", "topology": "standalone"}
    assert pooled_described == {"memcached": {
        "client": "socialbench", "topology": "pool of 2 servers, consistent hashing"}}


async def test_a_dead_or_stuck_store_fails_within_its_bounds_not_the_drivers_defaults() -> None:
    # A MongoDB that is down (PyMongo looked for a server for 30 s), and a Redis that
    # accepts connections and never answers (redis-py waited forever).
    stuck = socket.create_server(("127.0.0.1", 0))
    stuck_port = stuck.getsockname()[1]
    settings = Settings(
        mongodb_url=f"mongodb://127.0.0.1:{free_port()}",
        redis_url=f"redis://127.0.0.1:{stuck_port}/0",
        store_connect_timeout_s=0.5, store_call_timeout_s=0.5,
    )
    stores = Stores.connect(settings, (Store.MONGODB, Store.REDIS))
    try:
        started = time.monotonic()
        with pytest.raises(StoreConnectionError):
            await stores.require_mongodb()["db"]["c"].find_one({"_id": 1})
        with pytest.raises(StoreTimeout):
            await stores.require_redis().get("k")
        waited = time.monotonic() - started
    finally:
        await stores.close()
        stuck.close()
    assert waited < 10, f"waited {waited:.1f} s for a dead MongoDB and a stuck Redis"


# ---------------------------------------------------------------- a store killed and restarted

BOUNDED = {"store_connect_timeout_s": 1.0, "store_call_timeout_s": 1.0}


def start(command: ServerCommand, log: Path) -> ServerProcess:
    server = ServerProcess(command, log)
    server.wait_ready()
    return server


def kill_9(server: ServerProcess) -> None:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    server.stop()  # closes its log


def in_own_thread(scenario: Callable[[], Coroutine[Any, Any, None]], timeout_s: float = 60
                  ) -> None:
    """Run ``scenario`` in an event loop of its own thread; fail if it never returns.

    A client spinning on a closed connection never yields to its loop, so no timeout in
    that loop could end it: only another thread can tell.
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"the memcached client did not return in {timeout_s:g} s"
    if errors:
        raise errors[0]


async def first_success(call: Callable[[], Awaitable[T]], attempts: int = 50) -> tuple[T, int]:
    """The first result of ``call`` that is not a store error, and how many failed before."""
    for failed in range(attempts):
        try:
            return await call(), failed
        except STORE_ERRORS:
            await asyncio.sleep(0.1)
    raise AssertionError(f"still failing after {attempts} attempts")


def test_a_killed_memcached_fails_fast_and_is_found_again_when_restarted(
    tmp_path: Path,
) -> None:
    in_own_thread(lambda: killed_memcached(tmp_path))


async def killed_memcached(tmp_path: Path) -> None:
    command = memcached_command(free_port(), memory_mb=16, threads=1)
    server = start(command, tmp_path / "memcached.log")
    stores = Stores.connect(Settings(memcached_address=command.address, memcached_pool_size=4,
                                     **BOUNDED), (Store.MEMCACHED,))
    memcached = stores.require_memcached()
    try:
        await memcached.set(b"k", b"before")
        kill_9(server)
        # Many requests at once, as under load: each one fails with a store error (503),
        # none waits forever (aiomcache spun on the closed connections).
        outcomes = await asyncio.wait_for(asyncio.gather(
            *(memcached.get(f"k{i}".encode()) for i in range(50)),
            *(memcached.set(f"k{i}".encode(), b"v") for i in range(50)),
            return_exceptions=True), timeout=30)
        assert all(isinstance(o, STORE_ERRORS) for o in outcomes), outcomes
        assert (await stores.health())["memcached"].startswith("error")

        server = start(command, tmp_path / "memcached-2.log")
        _, failed = await first_success(lambda: memcached.set(b"k", b"after"))
        assert failed == 0, "the first call after the restart should find the new memcached"
        assert await memcached.get(b"k") == b"after"
        assert await stores.health() == {"memcached": "ok"}
    finally:
        await stores.close()
        server.stop()


async def test_a_stuck_memcached_gives_a_timeout_not_a_wait_forever() -> None:
    stuck = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    settings = Settings(memcached_address=f"127.0.0.1:{stuck.getsockname()[1]}",
                        memcached_pool_size=2, **BOUNDED)
    stores = Stores.connect(settings, (Store.MEMCACHED,))
    try:
        with pytest.raises(StoreTimeout, match="did not answer"):
            await asyncio.wait_for(stores.require_memcached().get(b"k"), timeout=30)
    finally:
        await stores.close()
        stuck.close()


async def fake_memcached(answer: Callable[[bytes], Awaitable[bytes | None]]
                         ) -> asyncio.Server:
    """A server answering each command line with ``answer(line)``; None closes the connection."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            reply = await answer(line)
            if reply is None:
                break
            writer.write(reply)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_memcached_closing_mid_command_is_an_error_not_a_spin() -> None:
    in_own_thread(closing_mid_command)


async def closing_mid_command() -> None:
    async def close_after_set(line: bytes) -> bytes | None:
        return None  # read the command, close without answering

    server = await fake_memcached(close_after_set)
    port = server.sockets[0].getsockname()[1]
    stores = Stores.connect(Settings(memcached_address=f"127.0.0.1:{port}",
                                     memcached_pool_size=1, **BOUNDED), (Store.MEMCACHED,))
    try:
        with pytest.raises(StoreConnectionError, match="lost"):
            # The set's value line goes out with the command; the server closes instead
            # of answering STORED (and again on the second try). aiomcache looped on the
            # empty reads for ever.
            await asyncio.wait_for(stores.require_memcached().set(b"k", b"v"), timeout=30)
    finally:
        await stores.close()
        server.close()


async def test_a_command_cancelled_half_way_does_not_leave_its_answer_to_the_next() -> None:
    async def slow_for_a(line: bytes) -> bytes | None:
        key = line.split()[1]
        if key == b"a":
            await asyncio.sleep(0.5)
        return b"VALUE " + key + b" 0 1\r\n" + key.upper() + b"\r\nEND\r\n"

    server = await fake_memcached(slow_for_a)
    port = server.sockets[0].getsockname()[1]
    stores = Stores.connect(Settings(memcached_address=f"127.0.0.1:{port}",
                                     memcached_pool_size=1, **BOUNDED), (Store.MEMCACHED,))
    memcached = stores.require_memcached()
    try:
        get_a = asyncio.create_task(memcached.get(b"a"))
        await asyncio.sleep(0.1)
        get_a.cancel()  # e.g. the request's client went away
        with pytest.raises(asyncio.CancelledError):
            await get_a
        await asyncio.sleep(0.6)  # a's answer arrives meanwhile on the old connection
        assert await memcached.get(b"b") == b"B"
    finally:
        await stores.close()
        server.close()


async def test_a_killed_redis_fails_fast_and_is_found_again_when_restarted(
    tmp_path: Path,
) -> None:
    command = redis_command(free_port(), tmp_path / "redis")
    server = start(command, tmp_path / "redis.log")
    stores = Stores.connect(Settings(redis_url=f"redis://{command.address}/0",
                                     redis_pool_size=4, **BOUNDED), (Store.REDIS,))
    redis = stores.require_redis()
    try:
        await redis.set("k", "before")
        await asyncio.gather(*(redis.ping() for _ in range(4)))  # 4 connections in the pool
        kill_9(server)
        with pytest.raises(STORE_ERRORS):
            await asyncio.wait_for(redis.get("k"), timeout=30)  # one of them finds it dead

        server = start(command, tmp_path / "redis-2.log")
        # The others sat in the pool, closed by the kill: each is found closed on its
        # next command, which goes through on a new connection.
        values = await asyncio.gather(*(redis.get("k") for _ in range(4)))
        assert values == [b"before"] * 4  # the append-only file kept it
        assert await redis.set("k", "after")
        assert await stores.health() == {"redis": "ok"}
    finally:
        await stores.close()
        server.stop()


class OwnMongoDB:
    """A MongoDB server of the test's own (to kill and restart) and a collection of it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.command = mongodb_command(free_port(), tmp_path / "mongodb")
        self.starts = 0
        self.server = self.start()
        self.stores = Stores.connect(Settings(mongodb_url=f"mongodb://{self.command.address}",
                                              mongodb_pool_size=4, **BOUNDED), (Store.MONGODB,))
        self.collection = self.stores.require_mongodb()["drill"]["c"]

    def start(self) -> ServerProcess:
        self.starts += 1
        self.server = start(self.command, self.tmp_path / f"mongodb-{self.starts}.log")
        return self.server

    async def close(self) -> None:
        await self.stores.close()
        self.server.stop()


@pytest.fixture
async def own_mongodb(tmp_path: Path) -> AsyncIterator[OwnMongoDB]:
    mongodb = OwnMongoDB(tmp_path)
    try:
        yield mongodb
    finally:
        await mongodb.close()


async def test_a_killed_mongodb_fails_fast_and_is_found_again_when_restarted(
    own_mongodb: OwnMongoDB,
) -> None:
    collection = own_mongodb.collection
    await collection.insert_one({"_id": 1, "v": "before"})
    kill_9(own_mongodb.server)
    outcomes = await asyncio.wait_for(asyncio.gather(
        *(collection.find_one({"_id": i}) for i in range(20)), return_exceptions=True),
        timeout=60)
    assert all(isinstance(o, STORE_ERRORS) for o in outcomes), outcomes

    own_mongodb.start()
    document, _ = await first_success(lambda: collection.find_one({"_id": 1}))
    assert document == {"_id": 1, "v": "before"}
    await collection.insert_one({"_id": 2, "v": "after"})
    assert await own_mongodb.stores.health() == {"mongodb": "ok"}


async def test_a_write_after_a_mongodb_restart_is_not_lost_to_a_dropped_connection(
    own_mongodb: OwnMongoDB,
) -> None:
    collection = own_mongodb.collection
    # Four pooled connections, then the server restarted under them.
    await asyncio.gather(*(collection.find_one({"n": i}) for i in range(8)))
    kill_9(own_mongodb.server)
    own_mongodb.start()
    for n in range(4):  # each on a connection the old server had, or a new one
        if n % 2:
            await collection.insert_one({"n": n})
        else:
            await collection.insert_many([{"n": n}, {"n": n + 10}])
    await collection.delete_one({"n": 0})
    assert sorted([d["n"] async for d in collection.find({}, {"_id": 0})]) == [1, 2, 3, 10, 12]


async def test_a_write_whose_connection_is_lost_waits_for_the_store_to_come_back(
    own_mongodb: OwnMongoDB,
) -> None:
    stores = Stores.connect(Settings(mongodb_url=f"mongodb://{own_mongodb.command.address}",
                                     store_connect_timeout_s=10.0), (Store.MONGODB,))
    collection = stores.require_mongodb()["drill"]["c"]
    try:
        await collection.insert_one({"n": 0})  # a pooled connection
        kill_9(own_mongodb.server)
        # The insert finds its connection gone and the server refusing; it is stored once
        # the server is back (restarted while it waits), not failed at once.
        restarted = asyncio.create_task(asyncio.to_thread(own_mongodb.start))
        await collection.insert_one({"n": 1})
        await restarted
        assert sorted(d["n"] for d in await collection.find({}).to_list()) == [0, 1]
    finally:
        await stores.close()


# ---------------------------------------------------------------- memcached keys

@settings(max_examples=500, deadline=None)
@given(st.text(min_size=1, max_size=260))
def test_every_key_memcached_key_accepts_is_one_the_client_sends(text: str) -> None:
    key = memcached_key(text)
    if key is not None:
        assert check_key(key) == key  # a ValueError (a 500) otherwise


@pytest.mark.parametrize("name", ["a\x85b", "\x9f", "a b", "a\u2028b", "x" * 251, ""])
def test_a_name_memcached_cannot_key_is_refused_before_the_client(name: str) -> None:
    assert memcached_key(name) is None
