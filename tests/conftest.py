"""Real servers for the tests, on free ports, torn down after: the stores, and the whole stack
(started by ``socialbench up``, stopped by ``socialbench down``) shared by every test needing it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from socialbench.stack import launcher
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    form_redis_cluster,
    free_port,
    free_port_block,
    free_ports,
    memcached_command,
    mongodb_command,
    redis_cluster_commands,
    redis_command,
    redis_replica_command,
    wait_replicas_linked,
)
from tests.support import serving, socialbench


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real redis-server; yields its command (``.host``, ``.port``, ``.address``)."""
    data = tmp_path_factory.mktemp("redis")
    yield from serving(redis_command(free_port(), data), data)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerCommand]]:
    """A real Redis Cluster of 3 masters (the first three) and a replica of each (the
    others, in the masters' order), failed over 1 s after a master is lost."""
    data = tmp_path_factory.mktemp("redis-cluster")
    with redis_cluster_running(data, masters=3, replicas_per_master=1) as servers:
        yield [server.command for server in servers]


@contextmanager
def redis_cluster_running(data: Path, *, masters: int, replicas_per_master: int,
                          password: str | None = None) -> Iterator[list[ServerProcess]]:
    """A Redis Cluster started on free ports and formed, for the block: its nodes'
    processes, masters first; a master lost is failed over after 1 s."""
    nodes = masters * (1 + replicas_per_master)
    ports = free_ports(2 * nodes)
    commands = redis_cluster_commands(ports[:nodes], data, bus_ports=ports[nodes:],
                                      node_timeout_ms=1000, password=password)
    with ExitStack() as stops:
        servers = []
        for command in commands:
            server = ServerProcess(command, data / f"{command.name}.log")
            stops.callback(server.stop)
            servers.append(server)
        for server in servers:
            server.wait_ready()
        form_redis_cluster([command.address for command in commands], replicas_per_master,
                           password=password)
        yield servers


@pytest.fixture(scope="session")
def redis_primary_and_replica(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerCommand, ServerCommand]]:
    """A real redis-server and a replica of it, synced."""
    data = tmp_path_factory.mktemp("redis-replicated")
    primary_port, replica_port = free_ports(2)
    primary = redis_command(primary_port, data / "primary")
    replica = redis_replica_command(replica_port, data / "replica", primary.address)
    with ExitStack() as servers:
        for command in (primary, replica):
            server = ServerProcess(command, data / f"{command.name}.log")
            servers.callback(server.stop)
            server.wait_ready()
        wait_replicas_linked([replica.address])
        yield primary, replica


@pytest.fixture(scope="session")
def memcached_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real memcached."""
    data = tmp_path_factory.mktemp("memcached")
    yield from serving(memcached_command(free_port(), memory_mb=64, threads=2), data)


@pytest.fixture(scope="session")
def mongodb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real MongoDB-wire server: mongod if on PATH, else FerretDB (SQLite)."""
    data = tmp_path_factory.mktemp("mongodb")
    yield from serving(mongodb_command(free_port(), data / "db"), data)


@pytest.fixture
def store_env(
    monkeypatch: pytest.MonkeyPatch,
    redis_server: ServerCommand,
    memcached_server: ServerCommand,
    mongodb_server: ServerCommand,
) -> dict[str, str]:
    """``SOCIALBENCH_*`` variables pointing a service at the test's real stores."""
    from socialbench.runtime.settings import get_settings

    env = {
        "SOCIALBENCH_REDIS_URL": f"redis://{redis_server.address}/0",
        "SOCIALBENCH_MEMCACHED_ADDRESS": memcached_server.address,
        "SOCIALBENCH_MONGODB_URL": f"mongodb://{mongodb_server.address}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield env
    get_settings.cache_clear()


# ---------------------------------------------------------------- the whole stack


# The store layout of the session's stack: SOCIALBENCH_TEST_STORES=per-service runs the
# end-to-end tests on the original's layout (CI runs shared, and the per-service layout in
# tests/e2e/test_store_layouts.py).
TEST_STORES_ENV = "SOCIALBENCH_TEST_STORES"


def store_options(layout: str | None = None) -> list[str]:
    """``up`` options of a stack's stores: ``layout`` (default: SOCIALBENCH_TEST_STORES, else
    shared), on a block of free consecutive ports."""
    first = free_port_block(40)  # MongoDB 6 at most, Redis 20 (clusters), memcached 12
    return ["--stores", layout or os.environ.get(TEST_STORES_ENV) or "shared",
            "--mongodb-port", str(first), "--redis-port", str(first + 8),
            "--memcached-port", str(first + 28)]


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Data directory of a running stack; everything it started is gone after the session."""
    data_dir = tmp_path_factory.mktemp("stack")
    port, media, jaeger, jaeger_otlp = free_ports(4)
    up = socialbench(
        "up", "--data-dir", str(data_dir), "--port", str(port),
        "--media-port", str(media), *store_options(),
        "--service-port-offset", str(launcher.free_service_offset()), "--nginx-workers", "1",
        # Ratio 0: only a request that arrives with a sampled trace context is traced.
        "--tracing", "--trace-ratio", "0", "--jaeger-port", str(jaeger),
        "--jaeger-otlp-port", str(jaeger_otlp),
    )
    if up.returncode != 0:
        logs = "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}"
                         for p in sorted((data_dir / "logs").glob("*.log")))
        socialbench("down", "--data-dir", str(data_dir))
        pytest.fail(f"socialbench up failed:\n{up.stdout}\n{up.stderr}\n{logs}")
    yield data_dir
    state = launcher.StackState.read(data_dir)
    assert state is not None
    down = socialbench("down", "--data-dir", str(data_dir))
    assert down.returncode == 0, down.stderr
    left = [c.name for c in state.components if launcher.pid_alive(c.pid)]
    assert not left, f"processes left running after down: {left}"


@pytest.fixture(scope="session")
def base_url(stack_dir: Path) -> str:
    state = launcher.StackState.read(stack_dir)
    assert state is not None
    return state.url


@pytest.fixture(scope="session")
def jaeger_url(stack_dir: Path) -> str:
    """Jaeger's API, which the stack's services send their spans to."""
    config = launcher.StackConfig.from_json((stack_dir / launcher.CONFIG_FILE).read_text())
    return config.jaeger_url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, follow_redirects=False) as http:
        yield http
