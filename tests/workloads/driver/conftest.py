"""A real HTTP target for the driver's tests: ``target_server.py`` in its own process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.stack.servers import ServerCommand, ServerProcess, free_port

SERVER = Path(__file__).with_name("target_server.py")


def _start(log_dir: Path, *options: str) -> ServerProcess:
    port = free_port()
    command = ServerCommand("target", [sys.executable, str(SERVER), str(port), *options],
                            "127.0.0.1", port)
    server = ServerProcess(command, log_dir / "target.log")
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def _serve(log_dir: Path, *options: str) -> Iterator[str]:
    server = _start(log_dir, *options)
    try:
        yield f"http://{server.command.address}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a target server (``/ok``, ``/status/<code>``, ``/close``, ``/hang``)."""
    yield from _serve(tmp_path_factory.mktemp("target"))


@pytest.fixture
def stalling_target(tmp_path: Path) -> Iterator[str]:
    """A target whose ``/stall`` stops answering for 1 s, 2 s after its first request."""
    yield from _serve(tmp_path, "--stall-after", "2", "--stall-for", "1")


@pytest.fixture
def own_target(tmp_path: Path) -> Iterator[ServerProcess]:
    """A target of the test's own, which the test may stop."""
    server = _start(tmp_path)
    try:
        yield server
    finally:
        server.stop()
