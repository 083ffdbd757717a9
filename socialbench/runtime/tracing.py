"""Distributed tracing with OpenTelemetry: a span for each request served and each RPC made
(and each store call: :mod:`socialbench.runtime.store_spans`).

Off unless ``SOCIALBENCH_TRACING_ENDPOINT`` names an OTLP/HTTP collector (Jaeger's is
``http://<host>:4318/v1/traces``); off, no middleware is installed and an RPC adds
nothing, so a benchmark without tracing pays nothing for it.

On, a request is traced when it arrives with a sampled W3C ``traceparent``, or when it
arrives at a front-end route (one nginx sends to, as DeathStarBench's nginx starts its
traces) and wins a ``SOCIALBENCH_TRACING_SAMPLE_RATIO`` draw. A traced request's RPCs
carry the trace on; an untraced one's carry nothing, so internal routes never start a
trace of their own: a trace is whole or absent, and an untraced request costs a header
check and a draw. The server span of a request covers the whole handler and the client
span of an RPC the whole call, so a trace's times add up to what the caller saw. Each
worker process exports its spans in batches from a background thread.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import SpanKind, StatusCode, Tracer, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from socialbench import registry
from socialbench.runtime.settings import Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROPAGATED_HEADERS = (b"traceparent", b"tracestate")
# How often the services' exporters send their batch (OTEL_BSP_SCHEDULE_DELAY, which the
# local stack sets when its spans go to the ramp's receiver, workloads/probes/otlp.py; the
# SDK's default is 5 s).
EXPORT_INTERVAL_MS = 1000

_propagator = TraceContextTextMapPropagator()


class Tracing:
    """The tracing of one service process: started with the app, shut down (flushed) after."""

    def __init__(
        self, service: str, endpoint: str, sample_ratio: float, entry_paths: Iterable[str]
    ) -> None:
        self.service = service
        self.endpoint = endpoint
        self.sample_ratio = sample_ratio
        self.entry_paths = frozenset(entry_paths)
        self._provider: TracerProvider | None = None
        self.tracer: Tracer | None = None  # set by start()

    @classmethod
    def from_settings(cls, service: str, settings: Settings) -> Tracing | None:
        """The service's tracing (its front-end routes start traces), None without endpoint."""
        if not settings.tracing_endpoint:
            return None
        return cls(service, settings.tracing_endpoint, settings.tracing_sample_ratio,
                   registry.get(service).gateway_routes)

    def starts_trace(self, path: str) -> bool:
        """Whether a request at ``path`` that came without a trace starts one."""
        return path in self.entry_paths and random.random() < self.sample_ratio

    def start(self) -> None:
        """Create the exporter and its thread (in the worker process, after any fork)."""
        self._provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: self.service}),
            # Roots are chosen by starts_trace; a caller's choice is followed.
            sampler=ParentBased(ALWAYS_ON),
        )
        self._provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=self.endpoint))
        )
        self.tracer = self._provider.get_tracer("socialbench")

    def shutdown(self) -> None:
        """Export what is still buffered, then stop the exporter."""
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
            self.tracer = None


def in_traced_request() -> bool:
    """Whether the current request is traced (its RPCs get client spans)."""
    return get_current_span().is_recording()


def inject_context(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current trace context added (``traceparent``)."""
    _propagator.inject(headers)
    return headers


def _caller_context(scope: Scope) -> Context | None:
    """The trace context the request came with, None when it came with none."""
    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope["headers"]
        if name in PROPAGATED_HEADERS
    }
    return _propagator.extract(carrier) if carrier else None


class TracingMiddleware:
    """A server span around each traced request, continuing the caller's trace if any."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = self.tracing.tracer
        if scope["type"] != "http" or tracer is None:
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        caller = _caller_context(scope)
        if caller is None and not self.tracing.starts_trace(path):
            await self.app(scope, receive, send)
            return
        with tracer.start_as_current_span(
            f"{method} {path}",
            context=caller,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        ) as span:

            async def send_with_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(StatusCode.ERROR)
                await send(message)

            await self.app(scope, receive, send_with_status)
            route = scope.get("route")
            if route is not None and getattr(route, "path", path) != path:
                span.update_name(f"{method} {route.path}")  # a template, not every id
