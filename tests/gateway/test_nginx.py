"""The rendered nginx configuration, checked by a real nginx in front of a fake upstream."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from socialbench import registry
from socialbench.gateway import nginx
from socialbench.stack.servers import ServerCommand, ServerProcess, find_binary, free_port


class EchoHandler(BaseHTTPRequestHandler):
    """Answers with the request line, Connection header and body it received."""

    protocol_version = "HTTP/1.1"

    def _echo(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length) if length else b""
        answer = b"%s %s\n%s\n%s" % (
            self.command.encode(), self.path.encode(),
            (self.headers.get("Connection") or "-").encode(), body,
        )
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = _echo

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def echo_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, echo_upstream: str) -> Iterator[int]:
    """A real nginx with every service pointed at the echo upstream."""
    root = tmp_path_factory.mktemp("nginx")
    port = free_port()
    config = nginx.GatewayConfig(
        service_addresses={spec.name: [echo_upstream] for spec in registry.SERVICES},
        port=port, media_port=None, foreground=True, worker_processes="1",
        pid_path=root / "nginx.pid", error_log=str(root / "error.log"), temp_dir=root,
    )
    conf = root / "nginx.conf"
    conf.write_text(nginx.render(config))
    argv = [find_binary("nginx"), "-c", str(conf), "-p", str(root), "-e", str(root / "error.log")]
    server = ServerProcess(ServerCommand("nginx", argv, "127.0.0.1", port), root / "nginx.log")
    server.wait_ready()
    yield port
    server.stop()


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_rendered_config_passes_nginx_t(tmp_path: Path) -> None:
    config = nginx.GatewayConfig(service_addresses=nginx.local_addresses(), temp_dir=tmp_path,
                                 pid_path=tmp_path / "pid", error_log=str(tmp_path / "err"))
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx.render(config))
    argv = [find_binary("nginx"), "-t", "-c", str(conf), "-p", str(tmp_path),
            "-e", str(tmp_path / "e")]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_registry_route_is_proxied_to_its_service() -> None:
    config = nginx.GatewayConfig(service_addresses=nginx.local_addresses())
    text = nginx.render(config)
    for spec in registry.SERVICES:
        for path in spec.gateway_routes:
            assert f"location = {path} {{\n      proxy_pass http://{spec.name};" in text
        if spec.gateway_routes:
            assert f"server 127.0.0.1:{spec.port};" in text


def test_a_service_with_routes_but_no_address_is_refused() -> None:
    with pytest.raises(ValueError, match="compose-post"):
        nginx.render(nginx.GatewayConfig(service_addresses={"user": ["127.0.0.1:1"]}))


def test_wrk2_absolute_form_with_raw_body_reaches_the_service_unchanged(gateway: int) -> None:
    body = (b'username=username_1&user_id=1&text=Hello @username_2 http://x.y/z?a=b "q" [1]'
            b'&media_ids=["123","456"]&media_types=["png","png"]&post_type=0')
    request = (
        b"POST http://localhost:8080/wrk2-api/post/compose HTTP/1.1\r\nHost: localhost:8080\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    answer = raw_request(gateway, request)
    head, _, echoed = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    line, connection, received = echoed.split(b"\n", 2)
    assert line == b"POST /wrk2-api/post/compose"
    assert connection == b"-"  # keep-alive to the upstream: nginx sends no "Connection: close"
    assert received == body


def test_query_strings_pass_and_pages_are_served(gateway: int) -> None:
    answer = raw_request(gateway, b"GET /wrk2-api/home-timeline/read?user_id=1&start=0&stop=10 "
                                  b"HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b"GET /wrk2-api/home-timeline/read?user_id=1&start=0&stop=10" in answer
    page = raw_request(gateway, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert page.startswith(b"HTTP/1.1 200") and b"/api/user/login" in page
    missing = raw_request(gateway, b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 404")


def body_of(answer: bytes) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


@pytest.mark.parametrize("route", nginx.routes(), ids=lambda route: route.path)
def test_a_route_with_a_trailing_slash_is_the_same_route(gateway: int, route: nginx.Route) -> None:
    """The original's pages load ``/get-media/?filename=…``; every route takes both forms."""
    answers = [raw_request(gateway, b"GET %s?filename=12.png&x=%%20y HTTP/1.1\r\nHost: x\r\n"
                                    b"Connection: close\r\n\r\n" % path.encode())
               for path in (route.path, route.path + "/")]
    assert body_of(answers[0]) == body_of(answers[1])
    assert body_of(answers[1]).startswith(b"GET %s?filename=12.png&x=%%20y\n"
                                          % route.path.encode())


def test_media_in_both_forms_gets_the_same_bytes(gateway: int) -> None:
    """GET /get-media/?filename= as the original's timeline pages; POST /upload-media/ too."""
    get = [body_of(raw_request(gateway, b"GET %s?filename=546626863406298496.jpg HTTP/1.1\r\n"
                                        b"Host: x\r\nConnection: close\r\n\r\n" % path))
           for path in (b"/get-media", b"/get-media/")]
    assert get[0] == get[1] == b"GET /get-media?filename=546626863406298496.jpg\n-\n"
    form = (b"--b\r\nContent-Disposition: form-data; name=\"media\"; filename=\"a.png\"\r\n"
            b"Content-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n\x00\xff\r\n--b--\r\n")
    posts = [body_of(raw_request(gateway, b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                          b"Content-Type: multipart/form-data; boundary=b\r\n"
                                          b"Content-Length: %d\r\n\r\n%s"
                                          % (path, len(form), form)))
             for path in (b"/upload-media", b"/upload-media/")]
    assert posts[0] == posts[1] == b"POST /upload-media\n-\n" + form
