"""``socialbench probe``: the health check of containers without curl."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner, Result

from socialbench.cli import app
from socialbench.deploy import probe
from socialbench.stack.servers import free_port


def run_probe(*args: str) -> Result:
    return CliRunner().invoke(app, ["probe", *args], env={"COLUMNS": "300"})


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def test_healthy_only_on_200(server: str) -> None:
    assert run_probe(f"http://{server}/healthz").exit_code == 0
    down = run_probe(f"http://{server}/healthz", f"http://{server}/down")
    assert down.exit_code == 1
    assert f"not healthy: http://{server}/down" in down.output
    assert run_probe(f"http://127.0.0.1:{free_port()}/healthz").exit_code == 1
    assert run_probe().exit_code == 2  # no URL: a usage error


def test_tcp_probe_needs_a_listener(server: str) -> None:
    assert probe.healthy(f"tcp://{server}")
    assert not probe.healthy(f"tcp://127.0.0.1:{free_port()}")


def test_wait_returns_once_the_service_comes_up() -> None:
    port = free_port()
    listener = socket.socket()

    def come_up() -> None:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    timer = threading.Timer(0.3, come_up)
    timer.start()
    try:
        result = run_probe("--wait", "10", f"tcp://127.0.0.1:{port}")
        assert result.exit_code == 0, result.output
        assert f"healthy: tcp://127.0.0.1:{port}" in result.output
    finally:
        timer.join()
        listener.close()


def test_wait_gives_up_and_names_what_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    result = run_probe("--wait", "0.2", url)
    assert result.exit_code == 1
    assert f"not healthy: {url}" in result.output
