"""Helpers shared by the test packages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.stack.servers import ServerCommand, ServerProcess
from socialbench.workloads.driver.hostload import read_stat, usable_cpus

# CI (.ci/run) sets it: the heavy tests the README lists run their shorter variants, and
# tests another test covers on the same code are skipped.
SHORT = os.environ.get("SOCIALBENCH_TEST_SHORT") == "1"


def socialbench(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``socialbench ARGS`` as a user would, in a child process."""
    return subprocess.run([sys.executable, "-m", "socialbench.cli", *args],
                          capture_output=True, text=True, timeout=300)


def serving(command: ServerCommand, log_dir: Path) -> Iterator[ServerCommand]:
    """Start ``command``'s server (its log in ``log_dir``), yield it once ready, stop it after."""
    server = ServerProcess(command, log_dir / f"{command.name}.log")
    try:
        server.wait_ready()
        yield command
    finally:
        server.stop()


def host_now(seconds: float = 1.0) -> tuple[float, float]:
    """Busy and steal shares of every usable CPU over the next ``seconds``."""
    cpus = usable_cpus()
    before = read_stat(cpus)
    time.sleep(seconds)
    after = read_stat(cpus)
    assert before is not None and after is not None
    delta = after.cpus - before.cpus
    return delta.busy / delta.total, delta.steal / delta.total


def host_is_busy() -> str | None:
    """Why the host is too busy for a test that measures it (None: quiet enough)."""
    busy, steal = host_now()
    if busy >= 0.5 or steal >= 0.05:
        return f"the host is busy now ({busy:.0%} busy, {steal:.0%} steal)"
    return None


def skip_unless_quiet(what: str) -> None:
    """Skip, saying why, when other work keeps the host busy: ``what`` needs a quiet one."""
    busy = host_is_busy()
    if busy is not None:
        pytest.skip(f"{busy}: {what} cannot be reproduced")
