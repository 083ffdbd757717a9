"""The memcached pool on three real memcached processes: each key on its server, one
server killed costs its keys only, and is used again once restarted."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from socialbench.registry import Store
from socialbench.runtime.cache_aside import CACHE_REFUSED, CACHE_UNAVAILABLE, Cache
from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.memcached_pool import MemcachedPool, ServerDown, SomeServersFailed
from socialbench.runtime.pipelining import StoreTimeout
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import ServerCommand, ServerProcess, free_ports, memcached_command

BOUNDS = {"max_connections": 2, "connect_timeout_s": 1.0, "call_timeout_s": 1.0,
          "reconnect_for_s": 0.0}
BACKOFF_S = 0.2


class Servers:
    """Three memcached processes on free ports; one can be killed and started again."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.commands = [memcached_command(port, memory_mb=16, threads=1)
                         for port in free_ports(3)]
        self.processes = [self._start(command) for command in self.commands]

    def _start(self, command: ServerCommand) -> ServerProcess:
        process = ServerProcess(command, self.tmp_path / f"memcached-{command.port}.log")
        process.wait_ready()
        return process

    def kill(self, index: int) -> None:
        process = self.processes[index]
        process.process.send_signal(signal.SIGKILL)
        process.process.wait()
        process.stop()  # closes its log

    def restart(self, index: int) -> None:
        self.processes[index] = self._start(self.commands[index])

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    servers = Servers(tmp_path)
    yield servers
    servers.stop()


def pool_of(commands: list[ServerCommand]) -> MemcachedPool:
    return MemcachedPool([MemcachedClient(c.host, c.port, **BOUNDS) for c in commands],
                         first_backoff_s=BACKOFF_S)


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[MemcachedPool]:
    pool = pool_of(servers.commands)
    yield pool
    await pool.close()


def keys_by_server(pool: MemcachedPool, count: int = 300) -> dict[str, list[bytes]]:
    keys: dict[str, list[bytes]] = {name: [] for name in pool.servers}
    for _ in range(count):
        key = f"post:{uuid.uuid4().hex}".encode()
        keys[pool.server_of(key)].append(key)
    return keys


async def test_every_key_is_readable_and_held_by_its_server_only(
    servers: Servers, pool: MemcachedPool,
) -> None:
    keys = keys_by_server(pool)
    every = [key for held in keys.values() for key in held]
    for key in every:
        assert await pool.set(key, b"v:" + key)
    assert [await pool.get(key) for key in every] == [b"v:" + key for key in every]
    assert await pool.multi_get(*every) == tuple(b"v:" + key for key in every)
    for command in servers.commands:
        own = MemcachedClient(command.host, command.port, **BOUNDS)
        try:
            for name, held in keys.items():
                found = await own.multi_get(*held)
                expected = [b"v:" + key for key in held] if name == command.address else []
                assert [value for value in found if value is not None] == expected
        finally:
            await own.close()
    assert all(held for held in keys.values())  # 300 keys reach each of the 3


async def test_a_get_across_servers_answers_in_the_order_asked(pool: MemcachedPool) -> None:
    a, b, c = (held[0] for held in keys_by_server(pool).values())
    await pool.set(a, b"A")
    await pool.set(c, b"")
    assert await pool.multi_get(c, b, a, c, a) == (b"", None, b"A", b"", b"A")
    assert await pool.multi_get() == ()


async def test_add_and_delete_go_to_the_keys_server(pool: MemcachedPool) -> None:
    key = keys_by_server(pool)[pool.servers[1]][0]
    assert await pool.add(key, b"first")
    assert not await pool.add(key, b"second")
    assert await pool.get(key) == b"first"
    assert await pool.delete(key)
    assert await pool.get(key) is None
    assert (await pool.version()).count(b" ") == 2


async def test_a_killed_server_costs_its_keys_as_misses_and_no_errors(
    servers: Servers, pool: MemcachedPool,
) -> None:
    cache = Cache(pool, Counter())
    keys = keys_by_server(pool)
    every = [key for held in keys.values() for key in held]
    for key in every:
        await cache.fill(key, b"v:" + key)
    dead = pool.servers[2]

    servers.kill(2)
    values = [await cache.get(key) for key in every]
    many = await cache.multi_get(*every)
    for key in every:
        await cache.fill(key, b"again")  # skipped on the dead server, no error

    expected = tuple(None if pool.server_of(key) == dead else b"v:" + key for key in every)
    assert tuple(values) == expected
    assert many == expected
    assert 0 < expected.count(None) < len(every) / 2  # its ~1/3 of the keys, no more
    assert cache.errors[CACHE_UNAVAILABLE] > 0
    assert cache.errors[CACHE_REFUSED] == 0
    assert pool.is_down(dead)
    assert "error" in (await Stores(memcached=pool).health())["memcached"]


async def test_a_restarted_server_is_used_again_after_the_backoff(
    servers: Servers, pool: MemcachedPool,
) -> None:
    cache = Cache(pool, Counter())
    dead = pool.servers[0]
    key = keys_by_server(pool)[dead][0]
    servers.kill(0)
    await cache.fill(key, b"lost")
    assert await cache.get(key) is None
    assert pool.is_down(dead)

    servers.restart(0)
    async with asyncio.timeout(10 + 10 * BACKOFF_S):  # fails the test if it never comes back
        while await cache.get(key) is None:
            await cache.fill(key, b"back")
            await asyncio.sleep(BACKOFF_S / 4)
    assert await cache.get(key) == b"back"
    assert not pool.is_down(dead)
    own = MemcachedClient(servers.commands[0].host, servers.commands[0].port, **BOUNDS)
    try:
        assert await own.get(key) == b"back"  # on the restarted server, not another
    finally:
        await own.close()


async def test_a_server_that_never_answers_does_not_hold_up_the_others(
    servers: Servers,
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    silent_port = silent.sockets[0].getsockname()[1]
    live = servers.commands[0]
    pool = MemcachedPool([MemcachedClient(live.host, live.port, **BOUNDS),
                          MemcachedClient("127.0.0.1", silent_port, **BOUNDS)],
                         first_backoff_s=60.0)
    try:
        keys = keys_by_server(pool, 50)
        on_live, on_silent = keys[live.address], keys[f"127.0.0.1:{silent_port}"]
        await pool.set(on_live[0], b"live")

        waiting = asyncio.create_task(pool.get(on_silent[0]))
        assert await pool.multi_get(on_live[0], on_live[1]) == (b"live", None)
        assert not waiting.done()  # the live server answered while the silent one was waited for
        with pytest.raises(StoreTimeout):
            await waiting

        with pytest.raises(SomeServersFailed) as failed:
            await pool.multi_get(on_silent[0], on_live[0])
        assert failed.value.values == (None, b"live")
        assert [type(error) for error in failed.value.errors] == [ServerDown]  # not sent
        with pytest.raises(ServerDown):
            await pool.get(on_silent[1])
        assert len(accepted) == 1  # no connection tried while it waits for its back-off
    finally:
        await pool.close()
        for writer in accepted:
            writer.close()
        silent.close()


def test_a_list_of_addresses_makes_a_pool_and_one_address_the_plain_client(
    servers: Servers,
) -> None:
    addresses = ",".join(command.address for command in servers.commands)
    pooled = Stores.connect(Settings(memcached_address=addresses), (Store.MEMCACHED,))
    single = Stores.connect(Settings(memcached_address=servers.commands[0].address),
                            (Store.MEMCACHED,))
    assert isinstance(pooled.memcached, MemcachedPool)
    assert pooled.memcached.servers == tuple(c.address for c in servers.commands)
    assert type(single.memcached) is MemcachedClient
    assert single.memcached.reconnect_for_s == single.memcached.connect_timeout_s


async def test_a_traced_get_across_servers_is_a_span_per_server(servers: Servers) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    addresses = ",".join(command.address for command in servers.commands)
    stores = Stores.connect(Settings(memcached_address=addresses), (Store.MEMCACHED,),
                            tracer=tracer)
    pool = stores.require_memcached()
    assert isinstance(pool, MemcachedPool)
    try:
        keys = [held[0] for held in keys_by_server(pool).values()]
        await pool.set(keys[0], b"A")
        assert await pool.multi_get(*keys) == (b"A", None, None)  # untraced: no span
        exporter.clear()
        with tracer.start_as_current_span("request") as request:
            assert await pool.multi_get(*keys, keys[0]) == (b"A", None, None, b"A")
    finally:
        await stores.close()
    spans = [span for span in exporter.get_finished_spans() if span.name != "request"]
    assert [span.name for span in spans] == ["memcached multi_get"] * 3
    assert sorted(dict(span.attributes or {})["db.operation.batch.size"] for span in spans) == [
        1, 1, 2]
    request_id = request.get_span_context().span_id
    assert all(span.parent is not None and span.parent.span_id == request_id for span in spans)
