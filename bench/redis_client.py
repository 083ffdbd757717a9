"""The CPU per command of the services' Redis client against redis-py, on one real Redis.

    socialbench bench redis-client [--commands 20000] [--callers 1 --callers 8]

A redis-server is started on a free port and given a sorted set of 100 members. Each
client, configured as the services configure theirs (redis-py: its asyncio client with a
blocking pool, the hiredis parser and the same bounds), sends the same commands: a
timeline read, ``ZREVRANGE key 0 9``, from 1 caller and from 8 concurrent callers, under
uvloop. The CPU seconds of this process (user + system) over the run are divided by the
commands; Redis's CPU is not counted. Results go to ``results/bench-redis-client-<time>
.json``. Not a test: the numbers depend on the machine (the load average is printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import uvloop

from socialbench.runtime.redis_client import RedisClient
from socialbench.stack.servers import ServerProcess, free_port, redis_command

KEY = "bench:timeline"
MEMBERS = 100
TIMEOUT_S = 10.0
POOL_SIZE = 64


@dataclass(frozen=True)
class RedisClientBench:
    """What to run: commands per measurement, the caller counts, warm-up commands."""

    commands: int = 20_000
    callers: tuple[int, ...] = (1, 8)
    warmup_commands: int = 1_000
    results_dir: Path = field(default=Path("results"))


@dataclass(frozen=True)
class ClientRow:
    client: str
    callers: int
    commands: int
    cpu_us_per_command: float
    commands_per_s: float


ZRevRange = Callable[[], Awaitable[object]]


async def measure_one(client: str, read: ZRevRange, callers: int,
                      config: RedisClientBench) -> ClientRow:
    """``config.commands`` reads split over ``callers`` concurrent loops."""
    for _ in range(config.warmup_commands):
        await read()
    per_caller = config.commands // callers

    async def caller() -> None:
        for _ in range(per_caller):
            await read()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sent = per_caller * callers
    return ClientRow(client, callers, sent, round(cpu / sent * 1e6, 2), round(sent / wall))


async def measure_all(address: tuple[str, int], config: RedisClientBench) -> list[ClientRow]:
    import redis.asyncio as aioredis

    host, port = address
    ours = RedisClient(host, port, max_connections=POOL_SIZE, connect_timeout_s=TIMEOUT_S,
                       call_timeout_s=TIMEOUT_S)
    pool = aioredis.BlockingConnectionPool(
        host=host, port=port, max_connections=POOL_SIZE, timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)
    redis_py = aioredis.Redis.from_pool(pool)
    clients: dict[str, ZRevRange] = {
        "redis-py (blocking pool)": lambda: redis_py.zrevrange(KEY, 0, 9),
        "socialbench RedisClient": lambda: ours.zrevrange(KEY, 0, 9),
    }
    try:
        await ours.delete(KEY)
        await ours.zadd(KEY, {f"{member}": member for member in range(MEMBERS)})
        rows = []
        for callers in config.callers:
            for client, read in clients.items():
                row = await measure_one(client, read, callers, config)
                rows.append(row)
                print(f"{client:26s} {callers:2d} callers  {row.cpu_us_per_command:7.1f} µs CPU "
                      f"per command  {row.commands_per_s:8.0f} commands/s", flush=True)
        return rows
    finally:
        await ours.close()
        await redis_py.aclose()


def run(config: RedisClientBench) -> Path:
    """Start Redis, measure, print and write the rows; the file."""
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as data:
        command = redis_command(free_port(), Path(data) / "redis")
        server = ServerProcess(command, Path(data) / "redis.log")
        try:
            server.wait_ready()
            rows = uvloop.run(measure_all((command.host, command.port), config))
        finally:
            server.stop()
    config.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = config.results_dir / f"bench-redis-client-{stamp}.json"
    path.write_text(json.dumps({
        "command": f"ZREVRANGE of 10 of {MEMBERS} members", "pool_size": POOL_SIZE,
        "load_average_after": os.getloadavg(), "rows": [asdict(row) for row in rows],
    }, indent=1))
    print(f"written {path}")
    return path
