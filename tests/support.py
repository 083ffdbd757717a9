"""Helpers shared by the test packages."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from socialbench.stack.servers import ServerCommand, ServerProcess


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
