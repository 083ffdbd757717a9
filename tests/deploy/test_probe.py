"""``python -m socialbench.deploy.probe``: the health check of containers without curl."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from socialbench.deploy import probe
from socialbench.stack.servers import free_port


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
    assert probe.main([f"http://{server}/healthz"]) == 0
    assert probe.main([f"http://{server}/healthz", f"http://{server}/down"]) == 1
    assert probe.main([f"http://127.0.0.1:{free_port()}/healthz"]) == 1


def test_tcp_probe_needs_a_listener(server: str) -> None:
    assert probe.healthy(f"tcp://{server}")
    assert not probe.healthy(f"tcp://127.0.0.1:{free_port()}")


def test_wait_returns_once_the_service_comes_up(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    listener = socket.socket()

    def come_up() -> None:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    timer = threading.Timer(0.3, come_up)
    timer.start()
    try:
        assert probe.main(["--wait", "10", f"tcp://127.0.0.1:{port}"]) == 0
        assert "healthy" in capsys.readouterr().out
    finally:
        timer.join()
        listener.close()


def test_wait_gives_up_and_names_what_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    assert probe.main(["--wait", "0.2", url]) == 1
    assert f"not healthy: {url}" in capsys.readouterr().err
