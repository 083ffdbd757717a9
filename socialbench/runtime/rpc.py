"""HTTP/JSON calls between services over pooled keep-alive connections.

One :class:`RPCClient` per process holds one :class:`Neighbour` per neighbour service,
created at start-up: our own small HTTP/1.1 client (a quarter of aiohttp's CPU a call:
docs/performance.md), a pool of keep-alive connections opened on demand up to
``pool_size``, idle ones reused newest first and closed after :data:`IDLE_TIMEOUT_S`,
each request one ``write``, its answer parsed by httptools. A neighbour's address is an
``http://host:port`` URL, or ``unix:/path`` for a Unix domain socket on the same box
(cheaper than loopback TCP: docs/performance.md). Every call is bounded
(``connect_timeout_s``, then ``timeout_s`` to the end of the answer:
:class:`NeighbourTimeout`, 504); a neighbour that refuses or drops the connection is
:class:`NeighbourUnavailable` (503) at once. A connection that drops after the request
was written is not retried (the neighbour may have acted on it). In a traced request,
each call is a client span and carries the trace on (``traceparent``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson
from opentelemetry.trace import SpanKind, Tracer
from pydantic import BaseModel

from socialbench.runtime.errors import (
    CLIENT_ERRORS_BY_KIND,
    NeighbourError,
    NeighbourTimeout,
    NeighbourUnavailable,
)
from socialbench.runtime.settings import Settings
from socialbench.runtime.tracing import in_traced_request, inject_context

IDLE_TIMEOUT_S = 60.0  # under the server's keep-alive (130 s): we close first, never race it
CONNECT_TIMEOUT_S = 2.0
UNIX_SCHEME = "unix:"  # a neighbour's address on the same box: unix:/path/to/socket


class _Dropped(Exception):
    """The connection closed before the whole answer arrived."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection to a neighbour: one request at a time."""

    def __init__(self, neighbour: Neighbour) -> None:
        self.neighbour = neighbour
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        self.requests = 0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(_Dropped(f"unreadable answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.neighbour._forget(self)
        self._fail(_Dropped(f"connection closed ({exc or 'by the neighbour'})"))

    # httptools callbacks

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body = []
        self.keep_alive = self.parser.should_keep_alive()
        if answer is not None and not answer.done():
            answer.set_result((self.parser.get_status_code(), body))

    # ours

    def _fail(self, error: Exception) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()

    def send(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        """Write ``request``; the future of its (status, body)."""
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.requests += 1
        self.transport.write(request)
        return self.answer

    def close(self) -> None:
        self._fail(_Dropped("connection closed by the client"))

    def retire(self) -> None:
        """Close it, idle, in good order (FIN, not RST); ``connection_lost`` counts it out."""
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()


class Neighbour:
    """Calls to one neighbour service through its own keep-alive pool."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        pool_size: int,
        timeout_s: float,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        connection_requests: int = 0,
        tracer: Tracer | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.unix_path: str | None = None
        if self.base_url.startswith(UNIX_SCHEME):
            self.unix_path = self.base_url.removeprefix(UNIX_SCHEME)
            if not self.unix_path.startswith("/"):
                raise ValueError(
                    f"{name}: expected an http:// URL or unix:/path (absolute), got {base_url!r}")
            self.host, self.port = "localhost", 0
            path, netloc = "", "localhost"
        else:
            parts = urlsplit(self.base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(
                    f"{name}: expected an http:// URL or unix:/path, got {base_url!r}")
            self.host, self.port = parts.hostname, parts.port or 80
            path, netloc = parts.path, parts.netloc
        self.pool_size = pool_size
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.connection_requests = connection_requests
        self._tracer = tracer
        self._head = f"POST {path}/{{}} HTTP/1.1\r\nHost: {netloc}\r\n"
        self._heads: dict[str, bytes] = {}
        self._idle: list[_Connection] = []  # newest last
        self._open = 0
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._closing = False

    @property
    def address(self) -> str:
        """Where it connects, for messages: ``host:port`` or the socket's path."""
        return self.unix_path if self.unix_path is not None else f"{self.host}:{self.port}"

    async def call(self, method: str, payload: Any = None) -> Any:
        """POST ``payload`` as JSON to ``/<method>`` and return the decoded JSON answer."""
        body = await self.call_raw(method, payload)
        return orjson.loads(body) if body else None

    async def call_raw(self, method: str, payload: Any = None) -> bytes:
        """POST ``payload`` (a pydantic model, or what orjson encodes) as JSON to
        ``/<method>``; the answer's JSON as bytes, undecoded."""
        data = encode(payload)
        if self._tracer is None or not in_traced_request():
            return await self._post(method, data, b"")
        with self._tracer.start_as_current_span(
            f"{self.name} {method}", kind=SpanKind.CLIENT, attributes={"rpc.service": self.name}
        ):
            trace = "".join(f"{k}: {v}\r\n" for k, v in inject_context({}).items())
            return await self._post(method, data, trace.encode("latin-1"))

    def _request(self, method: str, data: bytes, extra_headers: bytes) -> bytes:
        head = self._heads.get(method)
        if head is None:
            if len(self._heads) < 256:  # the routes of a neighbour: a few
                head = self._heads[method] = self._head.format(method).encode()
            else:
                head = self._head.format(method).encode()
        return b"%sContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
            head, len(data), extra_headers, data)

    async def _post(self, method: str, data: bytes, extra_headers: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        connection = await self._acquire(method, deadline)
        answer = connection.send(self._request(method, data, extra_headers))
        timer = loop.call_at(deadline, _time_out, answer)
        try:
            status, body = await answer
        except _Dropped as exc:
            raise NeighbourUnavailable(f"{self.name}: {method}: {exc}") from None
        except NeighbourTimeout:
            connection.close()  # a late answer would be read as the next request's
            raise NeighbourTimeout(f"{self.name}: no answer to {method} in time") from None
        except BaseException:
            connection.close()  # cancelled mid-request: the connection is out of step
            raise
        finally:
            timer.cancel()
            self._release(connection)
        if status >= 400:
            raise _error_from_answer(self.name, method, status, body)
        return body

    async def _acquire(self, method: str, deadline: float) -> _Connection:
        """An open idle connection, a new one, or the next one released (pool full)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_TIMEOUT_S:
                return connection
            connection.close()  # stale: _forget() counts it out
        if self._open >= self.pool_size:
            waiter: asyncio.Future[_Connection | None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    handed = await waiter
            except BaseException as exc:
                if not waiter.done():
                    waiter.cancel()
                    self._waiters.remove(waiter)
                elif not waiter.cancelled():  # handed over as this call gave up: pass it on
                    given = waiter.result()
                    if given is not None:
                        self._release(given)
                    else:
                        self._wake_one()
                if isinstance(exc, TimeoutError):
                    raise NeighbourTimeout(
                        f"{self.name}: no free connection for {method} in time "
                        f"({self.pool_size} busy)") from None
                raise
            if handed is not None:
                return handed
        return await self._connect(method, deadline)

    async def _connect(self, method: str, deadline: float) -> _Connection:
        if self._closing:
            raise NeighbourUnavailable(f"{self.name}: {method}: the client is closed")
        loop = asyncio.get_running_loop()
        self._open += 1
        try:
            timeout = min(self.connect_timeout_s, max(0.0, deadline - loop.time()))
            async with asyncio.timeout(timeout):
                if self.unix_path is not None:
                    _, connection = await loop.create_unix_connection(
                        lambda: _Connection(self), self.unix_path)
                else:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(self), self.host, self.port)
        except TimeoutError:
            self._open -= 1
            self._wake_one()
            raise NeighbourTimeout(
                f"{self.name}: {method}: no connection to {self.address} in time"
            ) from None
        except OSError as exc:
            self._open -= 1
            self._wake_one()
            raise NeighbourUnavailable(
                f"{self.name}: {method}: cannot connect to {self.address}: {exc}"
            ) from None
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        return connection

    def _release(self, connection: _Connection) -> None:
        if connection.closed:
            return  # _forget() counted it out
        if not connection.keep_alive:
            connection.close()
            return
        if self.connection_requests and connection.requests >= self.connection_requests:
            connection.retire()  # the next connection may reach another replica
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        connection.idle_since = asyncio.get_running_loop().time()
        self._idle.append(connection)

    def _forget(self, connection: _Connection) -> None:
        """A connection closed: count it out; a waiter may open a new one."""
        self._open -= 1
        if connection in self._idle:
            self._idle.remove(connection)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # None: open a connection of your own
                return

    async def close(self) -> None:
        self._closing = True
        for connection in list(self._idle):
            connection.close()
        self._idle.clear()


def encode(payload: Any) -> bytes:
    """``payload`` as JSON, by orjson; a pydantic model in it as its fields (the JSON of
    its ``model_dump_json()`` for a model without aliases or serializers, as all of the
    runtime's are: tests/runtime/test_interfaces.py)."""
    return orjson.dumps(payload, default=_model_fields)


def _model_fields(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"{type(value).__name__} is not JSON")


def _time_out(answer: asyncio.Future[tuple[int, bytes]]) -> None:
    if not answer.done():
        answer.set_exception(NeighbourTimeout("no answer in time"))


def _error_from_answer(name: str, method: str, status: int, body: bytes) -> Exception:
    try:
        detail = orjson.loads(body)
        kind, message = str(detail["error"]), str(detail["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        kind, message = "HTTPError", body.decode(errors="replace")[:200]
    client_error = CLIENT_ERRORS_BY_KIND.get(kind)
    if client_error is not None and 400 <= status < 500:
        # The caller's input was bad at the neighbour: still the caller's fault.
        return client_error(message)
    return NeighbourError(f"{name}: {method}: {message}", status_code=status, remote_kind=kind)


class RPCClient:
    """One :class:`Neighbour` per neighbour service of this process (the registry's list).

    Services call a neighbour through its typed client
    (:mod:`socialbench.runtime.interfaces`), which calls its :class:`Neighbour`.
    """

    def __init__(
        self, settings: Settings, neighbours: Iterable[str], *, tracer: Tracer | None = None
    ) -> None:
        self._neighbours = {
            name: Neighbour(
                name,
                settings.url_of(name),
                pool_size=settings.rpc_pool_size,
                timeout_s=settings.rpc_timeout_s,
                connection_requests=settings.rpc_connection_requests,
                tracer=tracer,
            )
            for name in neighbours
        }

    def __getitem__(self, name: str) -> Neighbour:
        """The pool of neighbour ``name``; a service keeps it, e.g. ``self.user = rpc["user"]``."""
        try:
            return self._neighbours[name]
        except KeyError:
            known = ", ".join(self._neighbours) or "none"
            raise KeyError(
                f"{name!r} is not a neighbour in the registry; the neighbours are: {known}"
            ) from None

    async def close(self) -> None:
        await asyncio.gather(*(n.close() for n in self._neighbours.values()))
