"""Fresh single-threaded memcached and Redis for the cache generator's tests (their own,
so the servers' counters count only what a test sent), and the fake RESP server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from socialbench.workloads.cache.servers import (
    Instance,
    ServerKind,
    free_port,
    start_instance,
    wait_port,
)

FAKE_SERVER = Path(__file__).with_name("fake_server.py")


@pytest.fixture(scope="module")
def memcached() -> Iterator[Instance]:
    instance = start_instance(ServerKind.MEMCACHED, memory_mb=64)
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def redis() -> Iterator[Instance]:
    instance = start_instance(ServerKind.REDIS)
    yield instance
    instance.stop()


def start_fake(*args: str) -> Instance:
    """The fake RESP server (fake_server.py) in its own process, on a free port."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(FAKE_SERVER), str(port), *args])

    def stop() -> None:
        process.terminate()
        process.wait(5)

    wait_port("127.0.0.1", port)
    return Instance("127.0.0.1", port, process.pid, None, stop)


@pytest.fixture
def fake_server() -> Iterator[Callable[..., Instance]]:
    started: list[Instance] = []

    def start(*args: str) -> Instance:
        started.append(start_fake(*args))
        return started[-1]

    yield start
    for instance in started:
        instance.stop()
