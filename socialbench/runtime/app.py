"""The app factory every service is made with.

A service module provides a router and a logic class; :func:`create_service_app` gives
it settings, store clients and RPC pools (one set per worker process, made at start-up),
``/healthz`` (its stores), ``/stats`` (requests and errors), tracing when an endpoint is
set, and one mapping of errors to HTTP answers. At start-up each store is tried once
(:mod:`~socialbench.runtime.store_check`): refused credentials stop the start; a store
not up yet does not, and ``/healthz`` answers 503 ``starting`` until the logic's setup
succeeds. Every exception becomes an answer (:class:`AnswerEveryError`: anything
unexpected a 500 :class:`InternalError`, never re-raised to the server, which would
close nginx's keep-alive connection). :class:`ServiceApp` runs the runtime's own layers
(tracing, faults, the light dispatch of :mod:`socialbench.runtime.dispatch`) before
FastAPI's middleware; what the dispatch hands on goes through FastAPI.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.telemetry import TelemetryConfig
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from socialbench import registry
from socialbench.registry import ServiceSpec
from socialbench.runtime.dispatch import InternalRoutes
from socialbench.runtime.errors import (
    ClientClosedRequest,
    ClientError,
    InternalError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    StoreError,
)
from socialbench.runtime.faults import fault_middleware
from socialbench.runtime.http_server import ServerConfig, serve
from socialbench.runtime.jsonio import JSONResponse
from socialbench.runtime.models import TOO_LARGE_ERRORS
from socialbench.runtime.pipelining import StoreConnectionError
from socialbench.runtime.rpc import RPCClient
from socialbench.runtime.settings import Settings, get_settings
from socialbench.runtime.store_check import check_stores_at_start
from socialbench.runtime.stores import STORE_ERRORS, Stores
from socialbench.runtime.tracing import Tracing, TracingMiddleware
from socialbench.runtime.web import IncompleteArguments, text

log = logging.getLogger("socialbench")

def serve_service(name: str, *, host: str, port: int | None, workers: int,
                  unix_path: str | None = None) -> None:
    """Serve service ``name`` with the runtime's HTTP server, in ``workers`` processes (on a
    Unix domain socket at ``unix_path`` too, if given)."""
    spec = registry.get(name)
    create_app = importlib.import_module(spec.module).create_app
    config = ServerConfig(
        host=host, port=port or spec.port, workers=workers, unix_path=unix_path,
        # Longer than the clients keep an idle connection (nginx's upstream keep-alive:
        # 120 s; the RPC client's IDLE_TIMEOUT_S), so the client closes it first.
        keep_alive_s=130.0,
        # Twice the upload cap: media refuses a large upload itself, with its own 413.
        max_body_bytes=2 * get_settings().upload_max_bytes,
    )
    serve(create_app, config)


@dataclass
class ServiceContext:
    """What a service's logic is built from: its spec, settings, stores and neighbours."""

    spec: ServiceSpec
    settings: Settings
    stores: Stores
    rpc: RPCClient
    errors: Counter[str] = field(default_factory=Counter)
    # Why the logic's setup is not done yet (a store not up at start), or None once done.
    setup_pending: str | None = None


SETUP_RETRY_S = 1.0  # between tries of a setup whose store was not up


async def _set_up(logic: ServiceLogic, context: ServiceContext) -> asyncio.Task[None] | None:
    """The logic's setup (indexes); if a store is not up yet, tried again in the background
    every ``SETUP_RETRY_S`` (its task returned) while ``/healthz`` answers 503.

    Pods start in any order: a service whose store is not up yet starts, and is ready when
    the store is. Any other failure of the setup stops the start, as before.
    """
    try:
        await logic.setup()
        return None
    except StoreConnectionError as exc:
        context.setup_pending = f"{type(exc).__name__}: {str(exc)[:200]}"
    log.warning("%s: setup waits for a store (%s); /healthz answers 503 until it is done",
                context.spec.name, context.setup_pending)
    return asyncio.ensure_future(_set_up_later(logic, context))


async def _set_up_later(logic: ServiceLogic, context: ServiceContext) -> None:
    while True:
        await asyncio.sleep(SETUP_RETRY_S)
        try:
            await logic.setup()
        except StoreConnectionError as exc:
            context.setup_pending = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        except Exception as exc:
            log.exception("%s: setup failed", context.spec.name)
            context.setup_pending = f"setup failed: {type(exc).__name__}: {str(exc)[:200]}"
            return
        context.setup_pending = None
        log.warning("%s: setup done; the service is ready", context.spec.name)
        return


class ServiceLogic(Protocol):
    async def setup(self) -> None:
        """Prepare the stores (indexes); called once per worker at start-up."""


async def service_logic(request: Request) -> Any:
    """FastAPI dependency: the service's logic object (typed by each service's alias).

    ``async``: a plain ``def`` dependency runs in the thread pool, a hop per request.
    """
    return request.app.state.logic


# The services' tracing is the runtime's (TracingMiddleware, its own tracer provider).
# FastAPI's own would otherwise look up the global providers on every request.
NO_FASTAPI_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


class ServiceApp(FastAPI):
    """A service's FastAPI app, the runtime's own layers run before FastAPI's middleware.

    ``runtime_middleware``, outermost first (tracing, faults, the light dispatch), wraps
    the stack FastAPI builds (its error, telemetry and body-limit middleware, then
    :class:`AnswerEveryError` and the router): a request the light dispatch answers does
    not pass through FastAPI's layers.
    """

    runtime_middleware: list[Middleware]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runtime_middleware = []
        # Requests this worker process was asked (``/stats``): how replicas share a load.
        self.requests_received = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.requests_received += 1
        await super().__call__(scope, receive, send)

    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        for cls, args, kwargs in reversed(self.runtime_middleware):
            app = cls(app, *args, **kwargs)
        return app


def create_service_app(
    name: str,
    router: APIRouter,
    logic_factory: Callable[[ServiceContext], ServiceLogic],
    *,
    settings: Settings | None = None,
) -> ServiceApp:
    """The FastAPI app of service ``name`` with ``router`` and the logic ``logic_factory`` makes."""
    spec = registry.get(name)
    settings = settings or get_settings()
    tracing = Tracing.from_settings(name, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if tracing is not None:
            tracing.start()
        tracer = tracing.tracer if tracing else None
        stores = Stores.connect(settings, spec.stores, tracer=tracer)
        rpc = RPCClient(settings, spec.neighbours, tracer=tracer)
        context = ServiceContext(spec, settings, stores, rpc)
        app.state.context = context
        app.state.logic = logic_factory(context)
        setting_up: asyncio.Task[None] | None = None
        try:
            await check_stores_at_start(stores, settings, service=name)
            setting_up = await _set_up(app.state.logic, context)
            yield
        finally:
            if setting_up is not None:
                setting_up.cancel()
            await rpc.close()
            await stores.close()
            if tracing is not None:
                # Off the loop: the flush is a blocking export.
                await asyncio.to_thread(tracing.shutdown)

    app = ServiceApp(
        title=f"socialbench {name}",
        lifespan=lifespan,
        default_response_class=JSONResponse,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(strict_json_body)],
        telemetry=NO_FASTAPI_TELEMETRY,
    )
    app.include_router(router)
    app.add_middleware(AnswerEveryError)
    state = app.state
    app.runtime_middleware = [
        *([Middleware(TracingMiddleware, tracing=tracing)] if tracing is not None else []),
        *fault_middleware(name, settings),  # none unless a fault is set
        Middleware(
            InternalRoutes, service_app=app, public=registry.get(name).gateway_routes,
            logic_dependency=service_logic, ignored_dependencies=(strict_json_body,),
            logic=lambda: state.logic,
            error_answer=lambda scope, exc: _answer_exception(state, scope, exc),
        ),
    ]
    _add_operational_routes(app)
    _add_error_handlers(app)
    return app


def _add_operational_routes(app: FastAPI) -> None:
    @app.get("/healthz")
    async def healthz(request: Request) -> Response:
        """200 when the stores this service needs answer (memcached, a cache, may not:
        then ``degraded``), else 503; 503 ``starting`` until the setup is done."""
        context: ServiceContext = request.app.state.context
        stores = await context.stores.health()
        if context.setup_pending is not None:
            body = {"service": context.spec.name, "status": "starting",
                    "setup": context.setup_pending, "stores": stores}
            return JSONResponse(body, status_code=503)
        every = all(state == "ok" for state in stores.values())
        body = {"service": context.spec.name, "status": "ok" if every else "degraded",
                "stores": stores}
        return JSONResponse(body, status_code=200 if context.stores.can_serve(stores) else 503)

    @app.get("/stats")
    async def stats(request: Request) -> dict[str, Any]:
        """Requests received and errors by kind since start (this worker process), the
        store clients' own counts (a replicated or clustered Redis: docs/stores.md), and
        which client and topology serve each store."""
        context: ServiceContext = request.app.state.context
        return {"service": context.spec.name, "requests": request.app.requests_received,
                "errors": dict(context.errors), "stores": context.stores.counters(),
                "clients": await context.stores.describe()}


def _error_response(request: Request, error: ServiceError) -> Response:
    return _error_answer(request.app.state, request.scope, error)


def _error_answer(state: Any, scope: Scope, error: ServiceError) -> Response:
    """The answer to ``error`` (counted in ``/stats``) of the request ``scope``."""
    context: ServiceContext | None = getattr(state, "context", None)
    if context is not None:
        context.errors[error.kind] += 1
    if error.status_code >= 500:
        log.warning("%s %s: %s: %s", scope.get("method"), scope.get("path"), error.kind,
                    error.message)
    prefix = getattr(scope.get("endpoint"), "failure_prefix", None)
    if prefix is None:
        body = {"error": error.kind, "message": error.message}
        return JSONResponse(body, status_code=error.status_code)
    # A front-end route: the original's plain-text bodies and status codes.
    if isinstance(error, IncompleteArguments):
        return text("Incomplete arguments", 400)
    status = error.status_code if error.status_code < 500 else 500
    return text(f"{prefix}: {error.message}", status)


async def strict_json_body(request: Request) -> None:
    """A 400 for a JSON body that is not UTF-8 though ``json.loads`` took it.

    FastAPI decodes JSON with ``surrogatepass``: a surrogate, raw (``ED A0 80``) or
    escaped alone (``"\\ud800"``), would pass, then fail (500) where the text is encoded
    for a store. orjson refuses both; it only looks at bodies that could hold one.
    """
    if "json" not in request.headers.get("content-type", ""):
        return  # never read other bodies here: uploads are streamed
    body = await request.body()
    if b"\\u" in body or b"\xed" in body:
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"the JSON body is not valid UTF-8 JSON: {exc}") from None


class AnswerEveryError:
    """Answer an exception no handler took with a 500 :class:`InternalError`, logged.

    Starlette's outermost middleware answers such an exception too, but then re-raises
    it, and the server closes the connection on one raised after the answer started.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        except ClientDisconnect:  # read by a route or a dependency of ours; counted, no log
            if not started:
                await _error_response(Request(scope), _client_gone())(scope, receive, send)
        except Exception as exc:
            if started:  # too late to answer: the server closes the connection
                raise
            log.exception("%s %s: unexpected error", scope.get("method"), scope.get("path"))
            error = InternalError(f"{type(exc).__name__}: {str(exc)[:200]}")
            response = _error_response(Request(scope), error)
            await response(scope, receive, send)


def _answer_exception(state: Any, scope: Scope, exc: Exception) -> Response:
    """The answer to an exception an endpoint raised, as the exception handlers give it."""
    if isinstance(exc, ServiceError):
        return _error_answer(state, scope, exc)
    if isinstance(exc, ClientDisconnect):
        return _error_answer(state, scope, _client_gone())
    if isinstance(exc, HTTPException):  # e.g. Starlette's, reading a form
        response = _error_answer(state, scope, _http_error(exc))
        response.headers.update(exc.headers or {})
        return response
    if isinstance(exc, STORE_ERRORS):
        return _error_answer(state, scope, StoreError(f"{type(exc).__name__}: {exc}"))
    log.error("%s %s: unexpected error", scope.get("method"), scope.get("path"), exc_info=exc)
    return _error_answer(state, scope, InternalError(f"{type(exc).__name__}: {str(exc)[:200]}"))


def _invalid_request(exc: RequestValidationError) -> ClientError:
    """400 naming each problem; 413 if every problem is a value over its cap."""
    errors = exc.errors()
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors
    )
    if errors and all(e["type"] in TOO_LARGE_ERRORS for e in errors):
        return PayloadTooLarge(problems)
    return InvalidArgument(problems or "invalid request")


def _client_gone() -> ClientClosedRequest:
    return ClientClosedRequest("the client closed the connection before sending the whole body")


def _http_error(exc: HTTPException) -> ClientError | InternalError:
    """Starlette's and FastAPI's own errors (no route 404, 405, an unreadable body 400)."""
    if isinstance(exc.__cause__, ClientDisconnect):  # FastAPI's "error parsing the body"
        return _client_gone()
    if exc.status_code >= 500:
        return InternalError(str(exc.detail))
    kind = {400: InvalidArgument, 404: NotFound, 413: PayloadTooLarge}.get(exc.status_code)
    error = (kind or ClientError)(str(exc.detail))
    error.status_code = exc.status_code
    return error


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def on_error(request: Request, exc: ServiceError) -> Response:
        return _error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
        return _error_response(request, _invalid_request(exc))

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, exc: HTTPException) -> Response:
        response = _error_response(request, _http_error(exc))
        response.headers.update(exc.headers or {})  # e.g. Allow on a 405
        return response

    for store_error in STORE_ERRORS:

        @app.exception_handler(store_error)
        async def on_store_error(request: Request, exc: Exception) -> Response:
            return _error_response(request, StoreError(f"{type(exc).__name__}: {exc}"))
