"""Real store servers for the tests: started once per session on free ports, torn down after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_port,
    memcached_command,
    mongodb_command,
    redis_command,
)


def _run(command: ServerCommand, log_dir: Path) -> Iterator[ServerCommand]:
    server = ServerProcess(command, log_dir / f"{command.name}.log")
    try:
        server.wait_ready()
        yield command
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real redis-server; yields its command (``.host``, ``.port``, ``.address``)."""
    data = tmp_path_factory.mktemp("redis")
    yield from _run(redis_command(free_port(), data), data)


@pytest.fixture(scope="session")
def memcached_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real memcached."""
    data = tmp_path_factory.mktemp("memcached")
    yield from _run(memcached_command(free_port(), memory_mb=64, threads=2), data)


@pytest.fixture(scope="session")
def mongodb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A real MongoDB-wire server: mongod if on PATH, else FerretDB (SQLite)."""
    data = tmp_path_factory.mktemp("mongodb")
    yield from _run(mongodb_command(free_port(), data / "db"), data)


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
