"""Health checks for containers without curl: ``socialbench probe URL...``.

Exits 0 when every URL answers 200 (``tcp://host:port``: accepts a connection). With
``--wait SECONDS`` it retries until they all do (an init container waiting for the
stack), else it tries once (a compose healthcheck).
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from urllib.parse import urlsplit


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url`` answers 200 within ``timeout_s`` (``tcp://``: accepts a connection)."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "tcp":
            with socket.create_connection((parts.hostname or "", parts.port or 0), timeout_s):
                return True
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(urls: Sequence[str], wait_s: float, interval_s: float = 0.5) -> list[str]:
    """Retry until every URL is healthy or ``wait_s`` has passed; the ones still down."""
    deadline = time.monotonic() + wait_s
    pending = list(urls)
    while True:
        pending = [url for url in pending if not healthy(url)]
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def probe(urls: Sequence[str], wait_s: float = 0.0) -> int:
    """0 when every URL is healthy (within ``wait_s``), else 1 naming the ones down."""
    down = wait_healthy(urls, wait_s)
    if down:
        print(f"not healthy: {', '.join(down)}", file=sys.stderr)
        return 1
    if wait_s:
        print(f"healthy: {', '.join(urls)}")
    return 0
