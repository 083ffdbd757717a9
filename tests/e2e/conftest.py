"""The whole stack, started by ``socialbench up`` on free ports, stopped by ``socialbench down``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from socialbench import registry
from socialbench.stack import launcher
from socialbench.stack.servers import free_port, port_open


def _free_service_offset() -> int:
    for offset in range(20000, 40000, 100):
        if not any(port_open("127.0.0.1", s.port + offset) for s in registry.SERVICES):
            return offset
    raise RuntimeError("no free range of service ports")


def socialbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "socialbench.cli", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Data directory of a running stack; everything it started is gone after the session."""
    data_dir = tmp_path_factory.mktemp("stack")
    port = free_port()
    up = socialbench(
        "up", "--data-dir", str(data_dir), "--port", str(port),
        "--media-port", str(free_port()), "--redis-port", str(free_port()),
        "--memcached-port", str(free_port()), "--mongodb-port", str(free_port()),
        "--service-port-offset", str(_free_service_offset()), "--nginx-workers", "1",
    )
    if up.returncode != 0:
        logs = "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}"
                         for p in sorted((data_dir / "logs").glob("*.log")))
        socialbench("down", "--data-dir", str(data_dir))
        pytest.fail(f"socialbench up failed:\n{up.stdout}\n{up.stderr}\n{logs}")
    yield data_dir
    state = json.loads((data_dir / launcher.STATE_FILE).read_text())
    down = socialbench("down", "--data-dir", str(data_dir))
    assert down.returncode == 0, down.stderr
    left = [c["name"] for c in state["components"] if launcher.pid_alive(c["pid"])]
    assert not left, f"processes left running after down: {left}"


@pytest.fixture(scope="session")
def base_url(stack_dir: Path) -> str:
    state = json.loads((stack_dir / launcher.STATE_FILE).read_text())
    return str(state["url"])


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, follow_redirects=False) as http:
        yield http
