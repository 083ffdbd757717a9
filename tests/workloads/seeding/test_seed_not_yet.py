"""Seeding a front end that is not serving yet: a real nginx whose upstream starts
seconds late (nginx answers 502 meanwhile), a front end that refuses connections at
first, and (`socialbench seed`) one that stays down. The upstream is a stand-in for the
services, in this process: it records every item it is sent."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

from rich.console import Console

from socialbench import registry
from socialbench.gateway import nginx
from socialbench.stack.servers import ServerCommand, ServerProcess, find_binary, free_port
from socialbench.workloads.seeding import graph
from socialbench.workloads.seeding.seed import SeedReport, SeedState, posts_of, seed

GRAPH = "synthetic:20:2"
POSTS_PER_USER = 1
LATE_S = 2.0  # what starts late starts this long after the seeding


@dataclass
class Received:
    """What the stand-in services were sent, by route."""

    users: Counter[int] = field(default_factory=Counter)
    follows: Counter[tuple[int, int]] = field(default_factory=Counter)
    posts: list[tuple[int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def stand_in(received: Received) -> type[BaseHTTPRequestHandler]:
    class Services(BaseHTTPRequestHandler):
        """user register (409 when registered), follow and compose, as the services answer."""

        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            form = {k: v[0] for k, v in parse_qs(body).items()}
            status = 200
            with received.lock:
                if self.path == "/wrk2-api/user/register":
                    user = int(form["user_id"])
                    status = 409 if received.users[user] else 200
                    received.users[user] += 1
                elif self.path == "/wrk2-api/user/follow":
                    received.follows[int(form["user_id"]), int(form["followee_id"])] += 1
                elif self.path == "/wrk2-api/post/compose":
                    received.posts.append((int(form["user_id"]), form["text"]))
                else:
                    status = 404
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Services


def start_nginx(root: Path, upstream_port: int, port: int | None = None) -> ServerProcess:
    """A real nginx on ``port`` with every service at 127.0.0.1:``upstream_port``."""
    port = port or free_port()
    config = nginx.GatewayConfig(
        service_addresses={spec.name: [f"127.0.0.1:{upstream_port}"]
                           for spec in registry.SERVICES},
        port=port, media_port=None, foreground=True, worker_processes="1",
        pid_path=root / "nginx.pid", error_log=str(root / "error.log"), temp_dir=root)
    conf = root / "nginx.conf"
    conf.write_text(nginx.render(config))
    argv = [find_binary("nginx"), "-c", str(conf), "-p", str(root), "-e",
            str(root / "error.log")]
    server = ServerProcess(ServerCommand("nginx", argv, "127.0.0.1", port), root / "nginx.log")
    server.wait_ready()
    return server


@contextmanager
def stand_in_server(port: int, received: Received) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", port), stand_in(received))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def seed_here(url: str, state: Path, late: Callable[[], object]) -> tuple[SeedReport, str]:
    """The seeding of GRAPH into ``url`` in this process, its report and notes; ``late``
    is called LATE_S after it started."""
    notes = io.StringIO()
    timer = threading.Timer(LATE_S, late)
    timer.start()
    try:
        report = asyncio.run(seed(url, graph.load(GRAPH, seed=1), posts_per_user=POSTS_PER_USER,
                                  retry_for_s=60, show_progress=False, state_path=state,
                                  console=Console(file=notes, width=200)))
    finally:
        timer.join()
    return report, " ".join(notes.getvalue().split())


def seed_command(url: str, state: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                              float]:
    """`socialbench seed` of GRAPH into ``url``: its output, and its time from its first
    line (printed as it starts sending)."""
    argv = [sys.executable, "-m", "socialbench.cli", "seed", "--url", url, "--graph", GRAPH,
            "--posts-per-user", str(POSTS_PER_USER), "--state", str(state), *extra]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**os.environ, "COLUMNS": "200"})
    assert child.stdout is not None
    try:
        lines = [child.stdout.readline()]
        started = time.monotonic()
        lines += child.stdout.readlines()
        child.wait(timeout=300)
    finally:
        child.kill()
    return (subprocess.CompletedProcess(argv, child.returncode, "".join(lines), None),
            time.monotonic() - started)


def assert_every_item_once(received: Received) -> None:
    expected = graph.load(GRAPH, seed=1)
    users = expected.node_count
    assert received.users == Counter(range(users))  # each registered once
    assert received.follows == Counter(pair for a, b in expected.edges
                                       for pair in ((a, b), (b, a)))  # each followed once
    planned = [(p.user_id, p.text) for u in range(users)
               for p in posts_of(1, u, users, POSTS_PER_USER)]
    assert planned and sorted(received.posts) == sorted(planned)  # each composed once


def test_nginx_answering_502_until_its_upstream_starts_is_waited_out(tmp_path: Path) -> None:
    received, upstream = Received(), free_port()
    with contextlib.ExitStack() as stack:
        front = start_nginx(tmp_path, upstream)
        stack.callback(front.stop)
        started = time.monotonic()
        report, notes = seed_here(
            f"http://127.0.0.1:{front.command.port}", tmp_path / "state.json",
            late=lambda: stack.enter_context(stand_in_server(upstream, received)))
        took = time.monotonic() - started
    assert report.failures == 0 and report.unavailable is None, report.counts
    assert "the front end is not serving yet (http 502" in notes
    assert "each item is sent again for up to 1 min (--retry-for)" in notes
    assert "the front end answers again after" in notes
    assert took >= LATE_S and report.retried["users"]["http 502"] >= 1
    assert_every_item_once(received)
    record = SeedState.read(tmp_path / "state.json")
    assert record is not None and record.complete and record.retry_for_s == 60
    assert record.phases["users"].retried == dict(report.retried["users"])


def test_a_front_end_refusing_connections_at_first_is_waited_out(tmp_path: Path) -> None:
    received, upstream, port = Received(), free_port(), free_port()
    fronts: list[ServerProcess] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(stand_in_server(upstream, received))
        stack.callback(lambda: [front.stop() for front in fronts])
        report, notes = seed_here(
            f"http://127.0.0.1:{port}", tmp_path / "state.json",
            late=lambda: fronts.append(start_nginx(tmp_path, upstream, port)))
    assert report.failures == 0 and report.unavailable is None, report.counts
    assert "the front end is not serving yet (ClientConnectorError" in notes
    assert report.retried["users"]["ClientConnectorError"] >= 1
    assert_every_item_once(received)


def test_a_front_end_that_stays_down_fails_clearly_after_the_limit(tmp_path: Path) -> None:
    front = start_nginx(tmp_path, free_port())  # its upstream never starts
    url = f"http://127.0.0.1:{front.command.port}"
    try:
        # One request at a time: were each item to wait the limit out, 20 users would
        # take 20 times 3 s.
        done, took = seed_command(url, tmp_path / "state.json", "--retry-for", "3s",
                          "--concurrency", "1")
    finally:
        front.stop()
    text = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout
    assert (f"error: the front end {url} answered nothing but http 502 (" in text
            and "(--retry-for 3 s). Is the stack up and healthy?" in text), text
    assert took < 30, text
    assert "http 502, the first answered: <html> <head><title>502 Bad Gateway" in text, text
    record = SeedState.read(tmp_path / "state.json")
    assert record is not None and not record.complete
    assert record.phases["users"].done == [] and record.phases["follows"].done == []
