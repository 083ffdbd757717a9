"""The CPU of one service hop, against the floors: a bare ASGI app under the same server,
an HTTP protocol with no ASGI, and a process that answers without parsing at all.

    socialbench bench hop [--rate 300 --rate 1000] [--duration 15] [--server unique-id]
                          [--connection-requests 0 --connection-requests 100]

Servers on free ports, one process each: unique-id (the runtime's app around one id)
under the runtime's HTTP server; ``bare``, an ASGI app answering the same bytes under that
server; ``protocol``, an asyncio protocol on uvloop parsing each request with httptools
and answering those bytes (no ASGI, no server of ours); ``raw``, the same protocol
answering each read without parsing it (what waking a Python process on uvloop to answer
a message costs); and the bare app under uvicorn (what served the services before). Each
gets the same calls from this process through its typed RPC client (UniqueIdClient) at a
fixed rate, and its CPU over the run (every thread's, in ns from ``/proc/<pid>/schedstat``
where there is one, else the kernel's 10 ms ticks) is divided by the calls: unique-id
minus bare is the framework's cost a call, bare what any service pays here, raw the floor
under any Python service. ``--connection-requests N`` closes each connection after N
calls (how calls spread over a Service's replicas) and gives the server's and client's CPU
per call at each bound. Results go to ``results/bench-hop-<time>.json``; what was
measured: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httptools
import psutil
from starlette.types import Receive, Scope, Send

from socialbench.bench.results import write_results
from socialbench.runtime.http_server import ServerConfig, serve
from socialbench.runtime.interfaces import UniqueIdClient
from socialbench.runtime.rpc import Neighbour
from socialbench.runtime.settings import JWT_SECRET_ENV
from socialbench.stack.servers import ServerCommand, ServerProcess, free_port

SERVERS = ("unique-id", "bare", "protocol", "raw", "uvicorn")
# uvicorn as it served the services: uvloop, httptools, no access log or proxy headers.
UVICORN_OPTIONS: dict[str, Any] = {
    "loop": "uvloop", "http": "httptools", "access_log": False, "log_level": "warning",
    "timeout_keep_alive": 120, "backlog": 4096, "proxy_headers": False,
    "server_header": False,
}
BARE_ANSWER = b'{"post_id":"1"}'
RAW_ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
              % (len(BARE_ANSWER), BARE_ANSWER))
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class HopBench:
    """What to run: the rates, the time at each, the client's pool."""

    rates: tuple[float, ...] = (300.0, 1000.0)
    duration_s: float = 15.0
    warmup_calls: int = 200
    pool_size: int = 8
    servers: tuple[str, ...] = SERVERS
    connection_requests: tuple[int, ...] = (0,)  # 0: connections never closed by the client
    results_dir: Path = field(default=Path("results"))


@dataclass(frozen=True)
class HopRow:
    server: str
    rate: float
    calls: int
    server_cpu_ms_per_call: float
    connection_requests: int = 0
    client_cpu_ms_per_call: float = 0.0


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app with no framework: reads the request, answers ``BARE_ANSWER``."""
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(BARE_ANSWER))]})
    await send({"type": "http.response.body", "body": BARE_ANSWER})


class ProtocolAnswer(asyncio.Protocol):
    """Each request parsed by httptools, answered ``RAW_ANSWER`` when it is whole."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(RAW_ANSWER)


class RawAnswer(asyncio.Protocol):
    """Each read answered ``RAW_ANSWER``, unparsed: the client writes a request at a time."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(RAW_ANSWER)


def serve_protocol(protocol: type[asyncio.Protocol], port: int) -> None:
    """Serve ``protocol`` on ``port`` on uvloop until the process is stopped."""
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def serve_bare(server: str, port: int) -> None:
    """Serve the floor ``server`` on ``port``: :func:`bare_app` under uvicorn or as the
    services are served, or one of the protocols without ASGI."""
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(bare_app, host="127.0.0.1", port=port, **UVICORN_OPTIONS)
    elif server == "protocol":
        serve_protocol(ProtocolAnswer, port)
    elif server == "raw":
        serve_protocol(RawAnswer, port)
    else:
        serve(lambda: bare_app, ServerConfig(port=port))


def server_argv(server: str, port: int) -> list[str]:
    if server in ("bare", "protocol", "raw", "uvicorn"):
        return [sys.executable, "-m", "socialbench.bench.hop", server, str(port)]
    return [sys.executable, "-m", "socialbench.cli", "serve", server, "--port", str(port)]


@contextmanager
def running(server: str, log_dir: Path) -> Iterator[tuple[psutil.Process, str]]:
    """``server`` (one of :data:`SERVERS`) on a free port: (its process, its URL)."""
    port = free_port()
    command = ServerCommand(server, server_argv(server, port), "127.0.0.1", port,
                            env={JWT_SECRET_ENV: secrets.token_urlsafe(32)})
    process = ServerProcess(command, log_dir / f"{server}.log")
    try:
        process.wait_ready(START_TIMEOUT_S)
        yield psutil.Process(process.process.pid), f"http://{command.address}"
    finally:
        process.stop()


def cpu_seconds(process: psutil.Process) -> float:
    """The process's CPU so far: every thread's run time in ns where Linux gives it
    (``schedstat``), else user + system in the kernel's ticks."""
    try:
        tasks = os.listdir(f"/proc/{process.pid}/task")
        total_ns = 0
        for task in tasks:
            with open(f"/proc/{process.pid}/task/{task}/schedstat") as stat:
                total_ns += int(stat.read().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        times = process.cpu_times()
        return times.user + times.system


def cpu_clock() -> str:
    """How :func:`cpu_seconds` counts here: ``schedstat`` (ns) or ``ticks`` (10 ms)."""
    return "schedstat" if os.path.exists(f"/proc/{os.getpid()}/schedstat") else "ticks"


async def drive(server: str, url: str, process: psutil.Process, rate: float,
                config: HopBench, connection_requests: int = 0) -> HopRow:
    """``rate`` calls a second for ``duration_s`` after a warm-up; server, client CPU per call."""
    neighbour = Neighbour("unique-id", url, pool_size=config.pool_size, timeout_s=10.0,
                          connection_requests=connection_requests)
    unique_id = UniqueIdClient(neighbour)
    client = psutil.Process()
    try:
        for _ in range(config.warmup_calls):
            await unique_id.compose()
        before, client_before = cpu_seconds(process), cpu_seconds(client)
        calls: list[asyncio.Future[str]] = []
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < config.duration_s:
            for _ in range(int(elapsed * rate) - len(calls)):
                calls.append(asyncio.ensure_future(unique_id.compose()))
            await asyncio.sleep(0.001)
        await asyncio.gather(*calls)
        used, client_used = cpu_seconds(process) - before, cpu_seconds(client) - client_before
    finally:
        await neighbour.close()
    per_call = 1000 / max(len(calls), 1)
    return HopRow(server=server, rate=rate, calls=len(calls),
                  server_cpu_ms_per_call=round(used * per_call, 4),
                  connection_requests=connection_requests,
                  client_cpu_ms_per_call=round(client_used * per_call, 4))


def measure(config: HopBench) -> list[HopRow]:
    """Every server at every rate and connection bound, one server running at a time.

    The bounds alternate within each rate, so the machine's drift falls on all of them.
    """
    rows = []
    for server in config.servers:
        with tempfile.TemporaryDirectory() as logs, running(server, Path(logs)) as (process, url):
            for rate in config.rates:
                for bound in config.connection_requests:
                    row = asyncio.run(drive(server, url, process, rate, config, bound))
                    rows.append(row)
                    print(f"{server:10s} {rate:7.0f} calls/s  {row.calls:7d} calls  "
                          f"connection bound {bound or '-':>5}  server CPU "
                          f"{row.server_cpu_ms_per_call:.3f}, client "
                          f"{row.client_cpu_ms_per_call:.3f} ms per call", flush=True)
    return rows


def run(config: HopBench) -> Path:
    """Measure, print and write the rows; the file."""
    clock = cpu_clock()
    print(f"load average before: {os.getloadavg()[0]:.1f}; CPU counted by {clock}", flush=True)
    rows = measure(config)
    path = write_results(config.results_dir, "hop", {
        "duration_s": config.duration_s, "pool_size": config.pool_size, "cpu_clock": clock,
        "load_average_after": os.getloadavg(), "rows": [asdict(row) for row in rows],
    })
    print(f"written {path}")
    return path


if __name__ == "__main__":
    serve_bare(sys.argv[1], int(sys.argv[2]))
