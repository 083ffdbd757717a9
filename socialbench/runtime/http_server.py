"""The services' HTTP/1.1 server: an ASGI app (a service's FastAPI app) over asyncio and httptools.

Ours because uvicorn spent more CPU a call (``bench hop``: docs/performance.md). One task
per request, no per-request event, timer or header regexes. :func:`serve` runs an app,
forking ``workers`` processes on one socket and restarting one that dies. It speaks
HTTP/1.1 and 1.0 with keep-alive, in-order pipelining, ``Content-Length`` or chunked
bodies, ``Expect: 100-continue`` and ``HEAD``; calls the app once the body is whole
(capped: ``max_body_bytes``, 413 beyond); writes a one-body answer in one write; runs
ASGI 3 ``http`` and ``lifespan`` (no WebSocket: 400); closes idle connections with one
timer per server; freezes start-up's objects (``gc.freeze``); and on SIGTERM or SIGINT
lets requests in flight finish (``shutdown_timeout_s``) before the lifespan's shutdown.
It listens on TCP and, when ``unix_path`` is set, on a Unix domain socket too (the
callers on the same box). A request the parser refuses gets 400 and a closed connection;
an app that raises before answering, 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools
from starlette.types import ASGIApp, Message, Scope

log = logging.getLogger("socialbench.server")


_ASGI = {"version": "3.0", "spec_version": "2.3"}
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_NO_BODY_STATUSES = frozenset({204, 304})
_NO_LIFESPAN = "socialbench.lifespan.returned"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# Pipelined requests parsed ahead of their turn; beyond, the connection stops reading.
_MAX_PIPELINED = 16


@dataclass(frozen=True)
class ServerConfig:
    """Where and how to serve."""

    host: str = "127.0.0.1"
    port: int = 8000
    backlog: int = 4096
    keep_alive_s: float = 120.0
    max_body_bytes: int = 32 * 1024 * 1024
    max_head_bytes: int = 64 * 1024
    shutdown_timeout_s: float = 30.0
    workers: int = 1
    lifespan: bool = True  # off for an app whose lifespan its caller runs
    # Also listen on this Unix domain socket (neighbours and nginx on the same box call it:
    # cheaper than loopback TCP, docs/performance.md); None: TCP only.
    unix_path: str | None = None


class LifespanFailed(Exception):
    """The app's lifespan startup or shutdown failed: the process exits 3."""


LIFESPAN_FAILED_EXIT = 3


class _Clock:
    """The ``Date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._header = b""

    def date_header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._header = b"date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._header


def _simple_answer(status: int, message: str, *, close: bool) -> bytes:
    body = ('{{"error":"{}","message":"{}"}}'.format(
        _REASONS[status].decode().lower().replace(" ", "_"), message)).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status, _REASONS[status], len(body), b"connection: close\r\n" if close else b"",
               body))


class _Exchange:
    """One request and its answer: the ASGI ``receive`` and ``send`` of one app call."""

    __slots__ = (
        "_http10",
        "body",
        "body_given",
        "chunked",
        "complete",
        "connection",
        "head_request",
        "head_written",
        "headers",
        "keep_alive",
        "scope",
        "started",
        "status",
    )

    def __init__(self, connection: HttpConnection, scope: Scope, body: bytes,
                 keep_alive: bool) -> None:
        self.connection = connection
        self.scope = scope
        self.body = body
        self.keep_alive = keep_alive
        self.head_request = scope["method"] == "HEAD"
        self._http10 = scope["http_version"] == "1.0"
        self.body_given = False
        self.status = 200
        self.headers: list[tuple[bytes, bytes]] = []
        self.started = False
        self.head_written = False
        self.chunked = False
        self.complete = False

    async def run(self, app: ASGIApp) -> None:
        connection = self.connection
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            log.exception("%s %s: the app raised", self.scope["method"], self.scope["path"])
            if self.complete:
                return  # after its answer: the connection may be serving the next request
            if not self.started and not connection.closed:
                connection.write(_simple_answer(500, "the service failed", close=True))
            connection.close()
        else:
            if not self.complete and not connection.closed:
                if not self.started:
                    log.error("%s %s: the app returned without answering",
                              self.scope["method"], self.scope["path"])
                    connection.write(_simple_answer(500, "no answer", close=True))
                connection.close()

    async def receive(self) -> Message:
        if not self.body_given:
            self.body_given = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.connection.wait_done(self)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            self.status = message["status"]
            self.headers = message.get("headers", [])
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.started:
            raise RuntimeError("http.response.body sent before http.response.start")
        if self.complete:
            raise RuntimeError("http.response.body sent after the last body")
        connection = self.connection
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if not more:
            self.complete = True
        if connection.closed:
            return
        if not self.head_written:
            self.head_written = True
            data = self._head(len(body), more)
            if body and not self.head_request:
                data += b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body
            connection.write(data)
        elif body and not self.head_request:
            connection.write(b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body)
        if not more:
            if self.chunked and not self.head_request:
                connection.write(b"0\r\n\r\n")
            connection.response_done(self)
        elif connection.write_paused:
            await connection.drain()

    def _head(self, first_length: int, more: bool) -> bytes:
        """The status line and headers, adding what the app left out."""
        status = self.status
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
        length_given = False
        for name, value in self.headers:
            if b"\n" in value or b"\r" in value or b"\n" in name or b"\r" in name:
                raise RuntimeError(f"a line break in the response header {name!r}")
            lowered = name.lower()
            if lowered == b"content-length":
                length_given = True
            elif lowered == b"connection":
                if value.lower() == b"close":
                    self.keep_alive = False
                continue
            elif lowered == b"transfer-encoding":
                continue
            lines.append(b"%s: %s\r\n" % (name, value))
        if not length_given and status not in _NO_BODY_STATUSES:
            if not more:
                lines.append(b"content-length: %d\r\n" % first_length)
            elif self._http10:
                self.keep_alive = False  # the end of the body is the end of the connection
            else:
                self.chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
        lines.append(self.connection.server.clock.date_header())
        if not self.keep_alive or self.connection.server.stopping:
            self.keep_alive = False
            lines.append(b"connection: close\r\n")
        elif self._http10:
            lines.append(b"connection: keep-alive\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests, runs the app on each in turn."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.write_paused = False
        self.last_active = time.monotonic()
        self.current: _Exchange | None = None
        self.waiting: deque[_Exchange] = deque()
        self._drained: asyncio.Future[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._client: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None
        # The request being parsed.
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._refused = False
        self._final_answer = b""

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: no subclass
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self._client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self._local = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.forget(self)
        for future in (self._drained, self._done):
            if future is not None and not future.done():
                future.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not served")
        except httptools.HttpParserError as exc:
            if not self._refused:
                self._refuse(400, f"invalid HTTP request: {str(exc)[:100]}")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._head_bytes = 0
        self._body = []
        self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))
        self._count_head(len(name) + len(value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        length = None
        expects_continue = False
        for name, value in self._headers:
            if name == b"content-length" and value.isdigit():
                length = int(value)
            elif name == b"expect" and value.lower() == b"100-continue":
                expects_continue = True
        if length is not None and length > self.server.config.max_body_bytes:
            self._refuse(413, f"the body is over {self.server.config.max_body_bytes} bytes")
        elif expects_continue:
            self.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)
        if self._body_bytes > self.server.config.max_body_bytes:
            self._refuse(413, f"the body is over {self.server.config.max_body_bytes} bytes")
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        parser = self.parser
        raw_path, query = self._split_url(self._url)
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        scope: Scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": parser.get_http_version(),
            "server": self._local,
            "client": self._client,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": self._headers,
            "state": self.server.lifespan_state.copy(),
        }
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        exchange = _Exchange(self, scope, body, parser.should_keep_alive())
        if self.current is None:
            self._start(exchange)
        else:
            self.waiting.append(exchange)
            if len(self.waiting) >= _MAX_PIPELINED and not self._reading_paused:
                self._reading_paused = True
                self._transport().pause_reading()

    # the exchanges' side

    def write(self, data: bytes) -> None:
        if not self.closed:
            self._transport().write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._transport().close()

    async def drain(self) -> None:
        if self.write_paused and not self.closed:
            if self._drained is None or self._drained.done():
                self._drained = self.loop.create_future()
            await self._drained

    async def wait_done(self, exchange: _Exchange) -> None:
        """Until the answer to ``exchange`` is sent or the client goes."""
        if self.closed or exchange.complete:
            return
        if self._done is None or self._done.done():
            self._done = self.loop.create_future()
        await self._done

    def response_done(self, exchange: _Exchange) -> None:
        """The answer to ``exchange`` is sent: the next request's turn (the app may still run)."""
        self.last_active = time.monotonic()
        self.current = None
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        if not exchange.keep_alive:
            self.close()
        if self.closed:
            return
        if self.waiting:
            self._start(self.waiting.popleft())
        elif self._final_answer:
            self.write(self._final_answer)
            self.close()
        elif self.server.stopping:
            self.close()
        if self._reading_paused and len(self.waiting) < _MAX_PIPELINED and not self._refused:
            self._reading_paused = False
            self._transport().resume_reading()

    @property
    def idle(self) -> bool:
        return self.current is None and not self.waiting

    # internals

    def _start(self, exchange: _Exchange) -> None:
        self.current = exchange
        # The loop keeps only a weak reference to a task: the server holds it till done.
        task = self.loop.create_task(exchange.run(self.server.app))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` after the requests before this one, then close."""
        self._refused = True
        self._transport().pause_reading()
        answer = _simple_answer(status, message, close=True)
        if self.current is None:
            self.write(answer)
            self.close()
        else:
            self._final_answer = answer

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.server.config.max_head_bytes and not self._refused:
            self._refuse(431, f"the request line and headers are over "
                              f"{self.server.config.max_head_bytes} bytes")

    def _transport(self) -> asyncio.Transport:
        assert self.transport is not None
        return self.transport

    @staticmethod
    def _split_url(url: bytes) -> tuple[bytes, bytes]:
        if url.startswith(b"/"):
            path, _, query = url.partition(b"?")
            return path.partition(b"#")[0], query.partition(b"#")[0]
        parsed = httptools.parse_url(url)  # absolute form: http://host/path?query
        return parsed.path or b"/", parsed.query or b""


class HttpServer:
    """One process's server: the app's lifespan, the listening socket, the connections."""

    def __init__(self, app: ASGIApp, config: ServerConfig,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.config = config
        self.loop = loop
        self.clock = _Clock()
        self.connections: set[HttpConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.lifespan_state: dict[str, Any] = {}
        self.stopping = False
        self._stopped = asyncio.Event()
        self._no_connections = asyncio.Event()
        self._lifespan_queue: asyncio.Queue[Message] = asyncio.Queue()
        self._lifespan_answers: asyncio.Queue[Message] = asyncio.Queue()
        self._lifespan_task: asyncio.Task[None] | None = None
        self._listeners: list[asyncio.Server] = []
        self._sweeper: asyncio.Task[None] | None = None

    async def run(self, sock: socket.socket, *more: socket.socket) -> None:
        """Start, serve on ``sock`` (and ``more``) until SIGTERM or SIGINT, shut down."""
        await self.start(sock, *more)
        # What start-up made (modules, the app, its clients: ~110,000 objects in a
        # service) lives as long as the process: out of the collector's sight, a full
        # collection under load took 1-11 ms instead of 110-180 ms, which every request
        # in flight waited for.
        gc.freeze()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, self.stop)
        try:
            await self._stopped.wait()
        finally:
            await self.shutdown()

    async def start(self, sock: socket.socket, *more: socket.socket) -> None:
        """The app's lifespan startup, then accept connections on ``sock`` (and ``more``)."""
        if self.config.lifespan:
            await self._lifespan("startup")
        for listening in (sock, *more):
            if listening.family == socket.AF_UNIX:
                listener = await self.loop.create_unix_server(
                    lambda: HttpConnection(self), sock=listening, backlog=self.config.backlog)
            else:
                listener = await self.loop.create_server(
                    lambda: HttpConnection(self), sock=listening, backlog=self.config.backlog)
            self._listeners.append(listener)
        self._sweeper = self.loop.create_task(self._close_idle_connections())

    def forget(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)
        if self.stopping and not self.connections:
            self._no_connections.set()

    def stop(self) -> None:
        """Have :meth:`run` shut down."""
        self.stopping = True
        self._stopped.set()

    async def shutdown(self) -> None:
        """Stop accepting, let the requests in flight finish, then the lifespan's shutdown."""
        self.stopping = True
        for listener in self._listeners:
            listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self._drain()
        if self.config.lifespan:
            await self._lifespan("shutdown")

    async def _drain(self) -> None:
        for connection in list(self.connections):
            if connection.idle:
                connection.close()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._no_connections.wait(),
                                       self.config.shutdown_timeout_s)
        for connection in list(self.connections):
            connection.close()

    async def _close_idle_connections(self) -> None:
        interval = min(1.0, self.config.keep_alive_s / 2)
        while True:
            await asyncio.sleep(interval)
            oldest = time.monotonic() - self.config.keep_alive_s
            for connection in list(self.connections):
                if connection.idle and connection.last_active < oldest:
                    connection.close()

    async def _lifespan(self, phase: str) -> None:
        """Run the app's lifespan ``phase``; :class:`LifespanFailed` if it fails."""
        if phase == "startup":
            scope = {"type": "lifespan", "asgi": _ASGI, "state": self.lifespan_state}
            self._lifespan_task = self.loop.create_task(self._run_lifespan(scope))
        elif self._lifespan_task is None or self._lifespan_task.done():
            return  # the app returned at startup: it has no lifespan
        await self._lifespan_queue.put({"type": f"lifespan.{phase}"})
        answer = await self._lifespan_answers.get()
        if answer["type"] == _NO_LIFESPAN:
            return
        if answer["type"] != f"lifespan.{phase}.complete":
            # Starlette's message is the whole traceback (logged already): its last line
            # is the error.
            lines = str(answer.get("message") or "").strip().splitlines()
            raise LifespanFailed(f"the app's {phase} failed: {lines[-1] if lines else '?'}")

    async def _run_lifespan(self, scope: Scope) -> None:
        async def send(message: Message) -> None:
            await self._lifespan_answers.put(message)

        try:
            await self.app(scope, self._lifespan_queue.get, send)
        except Exception as exc:
            log.exception("the app's lifespan raised")
            await self._lifespan_answers.put({"type": "lifespan.failed", "message": repr(exc)})
        else:
            await self._lifespan_answers.put({"type": _NO_LIFESPAN})


def bind(config: ServerConfig) -> socket.socket:
    """The listening socket of ``config`` (shared by its workers)."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(config.backlog)
    sock.setblocking(False)
    sock.set_inheritable(True)
    return sock


def bind_unix(path: str, backlog: int = 4096) -> socket.socket:
    """A listening Unix domain socket at ``path`` (a stale one there is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(backlog)
    sock.setblocking(False)
    sock.set_inheritable(True)
    return sock


def serve(app_factory: Callable[[], ASGIApp], config: ServerConfig) -> None:
    """Serve the app ``app_factory`` makes, in ``config.workers`` processes; until a signal."""
    socks = [bind(config)]
    if config.unix_path:
        socks.append(bind_unix(config.unix_path, config.backlog))
    try:
        if config.workers == 1:
            _run_worker(app_factory, socks, config)
        else:
            _supervise(app_factory, socks, config)
    finally:
        if config.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(config.unix_path)


def _run_worker(app_factory: Callable[[], ASGIApp], socks: list[socket.socket],
                config: ServerConfig) -> None:
    import uvloop

    async def main() -> None:
        server = HttpServer(app_factory(), config, asyncio.get_running_loop())
        await server.run(*socks)

    try:
        uvloop.run(main())
    except LifespanFailed as exc:
        print(f"socialbench serve: {exc}", file=sys.stderr)
        sys.exit(LIFESPAN_FAILED_EXIT)


def _supervise(app_factory: Callable[[], ASGIApp], socks: list[socket.socket],
               config: ServerConfig) -> None:
    """Fork the workers; start again one that dies; pass SIGTERM and SIGINT on to all."""
    stopping = False

    def fork() -> int:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = 1
            try:
                _run_worker(app_factory, socks, config)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("a worker failed")
            finally:
                os._exit(code)
        return pid

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    workers: set[int] = set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    workers.update(fork() for _ in range(config.workers))
    exit_code = 0
    while workers:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        workers.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            exit_code = max(exit_code, code if code > 0 else 0)
            continue
        if code == LIFESPAN_FAILED_EXIT:  # starting again would fail the same way
            stopping = True
            exit_code = LIFESPAN_FAILED_EXIT
            on_signal(signal.SIGTERM, None)
            continue
        log.error("worker %d exited (%d); starting another", pid, code)
        time.sleep(1.0)  # a worker that dies at once must not make the supervisor spin
        if not stopping:
            workers.add(fork())
    sys.exit(exit_code)
