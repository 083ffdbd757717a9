"""Helpers shared by the test packages."""

from __future__ import annotations

import subprocess
import sys


def socialbench(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``socialbench ARGS`` as a user would, in a child process."""
    return subprocess.run([sys.executable, "-m", "socialbench.cli", *args],
                          capture_output=True, text=True, timeout=300)
