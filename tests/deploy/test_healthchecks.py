"""The containers' health-check commands, run here against real servers."""

from __future__ import annotations

import shlex
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from socialbench import registry
from socialbench.deploy import compose
from socialbench.deploy import stack_spec as stack
from socialbench.registry import Store
from socialbench.stack.servers import ServerCommand, free_port


def run(command: list[str] | tuple[str, ...]) -> int:
    return subprocess.run(command, capture_output=True, timeout=10, check=False).returncode


def on_port(command: tuple[str, ...], default: int, port: int) -> list[str]:
    return [part.replace(str(default), str(port)) for part in command]


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_port
    httpd.shutdown()
    httpd.server_close()


def test_service_healthcheck_wants_a_200(http_port: int) -> None:
    assert run(stack.http_healthcheck(http_port)) == 0
    assert run(stack.http_healthcheck(http_port, "/down")) != 0
    assert run(stack.http_healthcheck(free_port())) != 0


def test_memcached_healthcheck(memcached_server: ServerCommand) -> None:
    store = stack.STORE_BY_NAME[Store.MEMCACHED.value]
    assert run(on_port(store.healthcheck, store.port, memcached_server.port)) == 0
    assert run(on_port(store.healthcheck, store.port, free_port())) != 0


def test_mongodb_healthcheck(mongodb_server: ServerCommand) -> None:
    store = stack.STORE_BY_NAME[Store.MONGODB.value]
    assert run(on_port(store.healthcheck, store.port, mongodb_server.port)) == 0
    assert run(on_port(store.healthcheck, store.port, free_port())) != 0


def test_redis_healthcheck(redis_server: ServerCommand) -> None:
    store = stack.STORE_BY_NAME[Store.REDIS.value]
    cli, *command = store.healthcheck
    assert run([cli, "-p", str(redis_server.port), *command]) == 0
    assert run([cli, "-p", str(free_port()), *command]) != 0


def compose_healthchecks() -> dict[str, str]:
    """Each compose service's healthcheck line (CMD-SHELL), from the generated files."""
    checks = {}
    for file in compose.COMPOSE_FILES.values():
        services = yaml.safe_load((stack.COMPOSE_DIR / file).read_text())["services"]
        for name, service in services.items():
            if "healthcheck" in service:
                kind, line = service["healthcheck"]["test"]
                assert kind == "CMD-SHELL", (file, name)  # no list for an engine to split
                checks[name] = line
    return checks


def test_compose_runs_each_healthcheck_as_one_quoted_shell_line(
        http_port: int, memcached_server: ServerCommand, mongodb_server: ServerCommand) -> None:
    # Podman's Docker API split a CMD list's items at spaces: `bash -c SCRIPT` became
    # `bash -c exec ...`, which passed with nothing listening. The line, through
    # /bin/sh as the engine runs it, must fail on a port where nothing listens.
    checks = compose_healthchecks()
    service = registry.get("user")
    ports = {service.name: (service.port, http_port),
             "mongodb": (27017, mongodb_server.port),
             "memcached": (11211, memcached_server.port)}
    for name, (port, serving) in ports.items():
        line = checks[name]
        assert shlex.split(line) == list(
            stack.http_healthcheck(port) if name == service.name
            else stack.STORE_BY_NAME[name].healthcheck)
        assert run(["/bin/sh", "-c", line.replace(str(port), str(serving))]) == 0, name
        assert run(["/bin/sh", "-c", line.replace(str(port), str(free_port()))]) != 0, name
    assert all(line.startswith(("bash -c ", "redis-cli ", "wget ")) for line in checks.values())
