"""The lighter dispatch: service-to-service calls, and the original's front-end routes,
without FastAPI's machinery.

Every route of a service is a FastAPI route (its OpenAPI complete, its tests run through
FastAPI). :class:`InternalRoutes`, the innermost of the runtime's own layers (inside
tracing and the faults), answers an *internal* route (a ``POST`` other services call,
whose endpoint takes only a pydantic body and ``service_logic``) without FastAPI's
middleware, matching, ``solve_dependencies`` and serialization (docs/performance.md, "The
light dispatch"): the route found by its exact path, the body validated by the same
model, the same endpoint awaited. The registry's front-end routes whose endpoint takes
only the request and the logic are called the same way with a Starlette ``Request``.
Wherever the answers could differ (a body the model refuses or that could hold a lone
surrogate, a non-JSON content type) the request goes on to FastAPI, which answers it as
any route; errors are answered by the runtime's one mapping (``error_answer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

import pydantic_core
from fastapi import FastAPI, routing
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ErrorAnswer = Callable[[Scope, Exception], Response]

_JSON = b"application/json"
_JSON_HEADERS = [(b"content-type", _JSON)]


@dataclass(frozen=True, slots=True)
class InternalRoute:
    """An endpoint called with its body model and the service's logic, by keyword."""

    endpoint: Callable[..., Awaitable[Any]]
    model: type[BaseModel] | None
    body_name: str | None
    logic_name: str | None
    status_code: int


@dataclass(frozen=True, slots=True)
class FrontEndRoute:
    """An endpoint called with the request and the service's logic, by keyword."""

    endpoint: Callable[..., Awaitable[Response]]
    methods: frozenset[str]
    request_name: str
    logic_name: str


def find_front_end_routes(
    app: FastAPI, public: Collection[str], logic_dependency: Callable[..., Any],
    ignored_dependencies: Collection[Callable[..., Any]] = (),
) -> dict[str, FrontEndRoute]:
    """The ``public`` routes of ``app`` by path whose endpoint takes the request and the
    logic only, and answers a ``Response`` of its own."""
    found: dict[str, FrontEndRoute] = {}
    for route in _api_routes(app):
        if route.path not in public or route.response_model is not None:
            continue
        dependant = route.dependant
        if (not dependant.request_param_name or dependant.body_params
                or _other_params(route, request_allowed=True)):
            continue
        logic_name = _logic_name(dependant, logic_dependency, ignored_dependencies)
        if logic_name is not None and logic_name is not _OTHER:
            found[route.path] = FrontEndRoute(route.endpoint, frozenset(route.methods),
                                              dependant.request_param_name, logic_name)
    return found


def find_internal_routes(
    app: FastAPI, public: Collection[str], logic_dependency: Callable[..., Any],
    ignored_dependencies: Collection[Callable[..., Any]] = (),
) -> dict[str, InternalRoute]:
    """The internal routes of ``app`` by path: POST-only, not ``public``, body and logic only."""
    found: dict[str, InternalRoute] = {}
    for route in _api_routes(app):
        if route.methods != {"POST"} or route.path in public:
            continue
        internal = _internal(route, logic_dependency, ignored_dependencies)
        if internal is not None:
            found[route.path] = internal
    return found


def _api_routes(app: FastAPI) -> list[Any]:
    """The app's API routes as served: prefixes and the app's dependencies applied."""
    contexts = getattr(routing, "iter_route_contexts", None)
    if contexts is None:  # FastAPI before 0.16x: included routes are copied into app.routes
        return [route for route in app.routes if isinstance(route, APIRoute)]
    return [context for context in contexts(app.routes)
            if isinstance(context.original_route, APIRoute)]


def _other_params(route: Any, *, request_allowed: bool) -> bool:
    """Whether the endpoint takes anything FastAPI would have to find for it (path,
    query, header or cookie parameters, the connection, ...), the request aside if
    ``request_allowed``."""
    dependant = route.dependant
    return bool(
        dependant.path_params or dependant.query_params or dependant.header_params
        or dependant.cookie_params or (dependant.request_param_name and not request_allowed)
        or dependant.websocket_param_name or dependant.http_connection_param_name
        or dependant.response_param_name or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name or route.path_format != route.path)


_OTHER = "another dependency"


def _logic_name(dependant: Any, logic_dependency: Callable[..., Any],
                ignored: Collection[Callable[..., Any]]) -> str | None:
    """The name of the endpoint's logic parameter (None: it takes none), or ``_OTHER``
    when it depends on anything else."""
    logic_name = None
    for sub in dependant.dependencies:
        if sub.call in ignored and sub.name is None:
            continue
        if sub.call is not logic_dependency or sub.dependencies or sub.name is None:
            return _OTHER
        logic_name = sub.name
    return logic_name


def _internal(
    route: Any, logic_dependency: Callable[..., Any], ignored: Collection[Callable[..., Any]],
) -> InternalRoute | None:
    dependant = route.dependant
    logic_name = _logic_name(dependant, logic_dependency, ignored)
    if _other_params(route, request_allowed=False) or logic_name is _OTHER:
        return None
    model: type[BaseModel] | None = None
    body_name = None
    if dependant.body_params:
        if len(dependant.body_params) != 1:
            return None
        field = dependant.body_params[0]
        annotation = field.field_info.annotation
        if (getattr(field.field_info, "embed", False) or not isinstance(annotation, type)
                or not issubclass(annotation, BaseModel)):
            return None
        model, body_name = annotation, field.name
    return InternalRoute(route.endpoint, model, body_name, logic_name, route.status_code or 200)


async def read_body(receive: Receive) -> bytes:
    """The whole body of the request (``http.request`` messages until ``more_body`` ends);
    :class:`ClientDisconnect` when the client hangs up first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnect
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        parts.append(message.get("body", b""))
    return b"".join(parts)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once again, then what ``receive`` gives."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class InternalRoutes:
    """Middleware: answers the internal routes of ``service_app``, hands the rest to ``app``.

    Made when the app builds its middleware (its first request), so every route is in.
    ``logic`` gives the service's logic object (set at start-up by the lifespan);
    ``error_answer`` answers an exception an endpoint raised.
    """

    def __init__(
        self, app: ASGIApp, *, service_app: FastAPI, public: Collection[str],
        logic_dependency: Callable[..., Any], ignored_dependencies: Collection[Callable[..., Any]],
        logic: Callable[[], Any], error_answer: ErrorAnswer,
    ) -> None:
        self.app = app
        self.routes = find_internal_routes(service_app, public, logic_dependency,
                                           ignored_dependencies)
        self.front_end = find_front_end_routes(service_app, public, logic_dependency,
                                               ignored_dependencies)
        self.logic = logic
        self.error_answer = error_answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.routes.get(scope["path"])
        json_body = _json_request(scope)
        if route is None or scope["method"] != "POST" or not json_body:
            front_end = self.front_end.get(scope["path"])
            if front_end is not None and scope["method"] in front_end.methods and not json_body:
                await self._front_end(front_end, scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive)
        except ClientDisconnect as exc:
            await self.error_answer(scope, exc)(scope, receive, send)
            return
        kwargs: dict[str, Any] = {}
        if route.model is not None:
            if b"\\u" in body or b"\xed" in body:  # could hold a lone surrogate: FastAPI's way
                await self.app(scope, replaying(body, receive), send)
                return
            try:
                kwargs[route.body_name] = route.model.model_validate_json(body)  # type: ignore[index]
            except ValidationError:  # answered as FastAPI answers it
                await self.app(scope, replaying(body, receive), send)
                return
        if route.logic_name is not None:
            kwargs[route.logic_name] = self.logic()
        try:
            result = await route.endpoint(**kwargs)
            if isinstance(result, Response):
                status, headers, payload = result.status_code, result.raw_headers, result.body
            else:
                status, payload = route.status_code, pydantic_core.to_json(result)
                headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(payload))]
        except Exception as exc:
            response = self.error_answer(scope, exc)
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _front_end(self, route: FrontEndRoute, scope: Scope, receive: Receive,
                         send: Send) -> None:
        scope["endpoint"] = route.endpoint  # as the router sets it: the error's wording
        request = Request(scope, receive)
        try:
            response = await route.endpoint(
                **{route.request_name: request, route.logic_name: self.logic()})
        except Exception as exc:
            response = self.error_answer(scope, exc)
        await response(scope, receive, send)


def _json_request(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value == _JSON or value.startswith(b"application/json;")
    return False
