"""Tracing through the runtime: the text service, fake neighbours, an OTLP/HTTP collector.

The collector is a fake of Jaeger's OTLP receiver (it decodes what the real exporter
sends); the service, its tracing and its RPC client are the real ones.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from httpx import ASGITransport, AsyncClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.responses import Response

from socialbench.runtime.settings import get_settings
from socialbench.runtime.tracing import Tracing, TracingMiddleware
from socialbench.services.text import create_app
from tests.services.support import app_client, point_at, serve_fake, serve_neighbours

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN_ID = "00f067aa0ba902b7"
TEXT = "hello @alice, see http://example.com"
SAMPLED = 0x01  # the sampled bit of a traceparent's flags


@dataclass
class Collector:
    """Spans received on ``/v1/traces``, with the service.name of each."""

    spans: list[tuple[str, Span]] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/traces")
        async def export(request: Request) -> Response:
            message = ExportTraceServiceRequest.FromString(await request.body())
            for resource_spans in message.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append((resource["service.name"], span))
            body = ExportTraceServiceResponse().SerializeToString()
            return Response(body, media_type="application/x-protobuf")

        return app


@dataclass
class Neighbours:
    """url-shorten and user-mention, keeping the trace header of each call."""

    traceparents: dict[str, str | None] = field(default_factory=dict)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/compose_urls")
        async def compose_urls(request: Request) -> dict[str, Any]:
            self.traceparents["compose_urls"] = request.headers.get("traceparent")
            urls = (await request.json())["urls"]
            return {"urls": [{"shortened_url": "http://short-url/0000000001", "expanded_url": u}
                             for u in urls]}

        @app.post("/compose_user_mentions")
        async def compose_user_mentions(request: Request) -> dict[str, Any]:
            self.traceparents["compose_user_mentions"] = request.headers.get("traceparent")
            return {"user_mentions": [{"user_id": "1", "username": "alice"}]}

        return app


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    received = Collector()
    async with serve_fake(received.app()) as url:
        yield received, f"{url}/v1/traces"


@pytest.fixture
async def neighbours(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Neighbours]:
    fakes = Neighbours()
    async with serve_neighbours(monkeypatch, fakes.app(), "url-shorten", "user-mention"):
        yield fakes


def trace_to(monkeypatch: pytest.MonkeyPatch, endpoint: str | None, ratio: float) -> None:
    if endpoint is None:
        monkeypatch.delenv("SOCIALBENCH_TRACING_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("SOCIALBENCH_TRACING_ENDPOINT", endpoint)
    monkeypatch.setenv("SOCIALBENCH_TRACING_SAMPLE_RATIO", str(ratio))
    get_settings.cache_clear()


def parse_traceparent(header: str | None) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of a W3C traceparent header."""
    assert header is not None, "no traceparent header"
    version, trace_id, span_id, flags = header.split("-")
    assert version == "00"
    return trace_id, span_id, flags


async def test_a_sampled_caller_gets_a_whole_trace_across_rpcs(
    monkeypatch: pytest.MonkeyPatch, collector: tuple[Collector, str], neighbours: Neighbours
) -> None:
    received, endpoint = collector
    # Ratio 0: the spans below exist only because the caller's trace is sampled.
    trace_to(monkeypatch, endpoint, 0.0)
    caller = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": TEXT},
                                     headers={"traceparent": caller})
        assert response.status_code == 200, response.text
    # Leaving the app flushed its spans to the collector.

    spans = {span.name: span for service, span in received.spans if service == "text"}
    assert set(spans) == {"POST /compose_text", "url-shorten compose_urls",
                          "user-mention compose_user_mentions"}
    server = spans["POST /compose_text"]
    assert server.kind == Span.SPAN_KIND_SERVER
    assert server.trace_id.hex() == TRACE_ID
    assert server.parent_span_id.hex() == CALLER_SPAN_ID
    assert {a.key: a.value.int_value for a in server.attributes}[
        "http.response.status_code"] == 200
    for method in ("compose_urls", "compose_user_mentions"):
        client_span = next(s for name, s in spans.items() if name.endswith(method))
        assert client_span.kind == Span.SPAN_KIND_CLIENT
        assert client_span.trace_id.hex() == TRACE_ID
        assert client_span.parent_span_id == server.span_id
        assert server.start_time_unix_nano <= client_span.start_time_unix_nano
        assert client_span.end_time_unix_nano <= server.end_time_unix_nano
        # The neighbour was told the trace, with the client span as its parent.
        trace_id, parent, flags = parse_traceparent(neighbours.traceparents[method])
        assert (trace_id, parent) == (TRACE_ID, client_span.span_id.hex())
        assert int(flags, 16) & SAMPLED


@pytest.mark.parametrize("caller", [None, f"00-{TRACE_ID}-{CALLER_SPAN_ID}-00"],
                         ids=["no-trace", "caller-not-sampled"])
async def test_an_untraced_request_exports_nothing_and_its_rpcs_carry_nothing(
    monkeypatch: pytest.MonkeyPatch,
    collector: tuple[Collector, str],
    neighbours: Neighbours,
    caller: str | None,
) -> None:
    received, endpoint = collector
    # Ratio 1, but /compose_text is internal: only a caller's sampled trace is followed.
    trace_to(monkeypatch, endpoint, 1.0)
    headers = {"traceparent": caller} if caller else {}
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": TEXT}, headers=headers)
        assert response.status_code == 200, response.text
    assert received.spans == []
    assert neighbours.traceparents == {"compose_urls": None, "compose_user_mentions": None}


def front_end_app(tracing: Tracing) -> FastAPI:
    """A front-end route and an internal one, behind the tracing middleware."""
    app = FastAPI()

    @app.get("/front")
    async def front() -> dict[str, str]:
        return {"route": "front"}

    @app.get("/internal")
    async def internal() -> dict[str, str]:
        return {"route": "internal"}

    app.add_middleware(TracingMiddleware, tracing=tracing)
    return app


@pytest.mark.parametrize(("ratio", "path", "traced"), [
    (1.0, "/front", True), (0.0, "/front", False), (1.0, "/internal", False),
])
async def test_only_front_end_routes_start_traces_at_the_sample_ratio(
    collector: tuple[Collector, str], ratio: float, path: str, traced: bool
) -> None:
    received, endpoint = collector
    tracing = Tracing("front-end", endpoint, ratio, entry_paths=["/front"])
    tracing.start()
    transport = ASGITransport(app=front_end_app(tracing))
    async with AsyncClient(transport=transport, base_url="http://test") as client:
        for _ in range(20):
            assert (await client.get(path)).status_code == 200
    await asyncio.to_thread(tracing.shutdown)
    spans = [span for _, span in received.spans]
    if not traced:
        assert spans == []
        return
    assert len(spans) == 20
    assert {span.name for span in spans} == {f"GET {path}"}
    assert all(span.parent_span_id == b"" for span in spans)  # each a new trace's root
    assert len({span.trace_id for span in spans}) == 20


def test_the_ratio_decides_the_share_of_front_end_requests_traced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracing = Tracing("front-end", "http://unused", 0.25, entry_paths=["/front"])
    monkeypatch.setattr(random, "random", random.Random(7).random)  # repeatable draws
    share = sum(tracing.starts_trace("/front") for _ in range(20_000)) / 20_000
    assert 0.24 < share < 0.26
    assert not any(tracing.starts_trace("/internal") for _ in range(1000))


async def test_a_failed_neighbour_marks_the_spans_as_errors(
    monkeypatch: pytest.MonkeyPatch, collector: tuple[Collector, str], neighbours: Neighbours
) -> None:
    received, endpoint = collector
    trace_to(monkeypatch, endpoint, 1.0)
    point_at(monkeypatch, "user-mention", "http://127.0.0.1:9")  # nothing listens there
    async with app_client(create_app()) as client:
        response = await client.post("/compose_text", json={"text": "hello @alice"},
                                     headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"})
        assert response.status_code >= 500, response.text
    spans = {span.name: span for _, span in received.spans}
    assert spans["POST /compose_text"].status.code == Status.STATUS_CODE_ERROR
    failed_call = spans["user-mention compose_user_mentions"]
    assert failed_call.status.code == Status.STATUS_CODE_ERROR
    assert any(event.name == "exception" for event in failed_call.events)


async def test_without_an_endpoint_nothing_is_traced_or_propagated(
    monkeypatch: pytest.MonkeyPatch, neighbours: Neighbours
) -> None:
    trace_to(monkeypatch, None, 1.0)
    app = create_app()
    assert not any(m.cls is TracingMiddleware for m in app.runtime_middleware)
    async with app_client(app) as client:
        response = await client.post("/compose_text", json={"text": TEXT},
                                     headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"})
        assert response.status_code == 200, response.text
    assert neighbours.traceparents == {"compose_urls": None, "compose_user_mentions": None}


def test_the_sample_ratio_must_be_a_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCIALBENCH_TRACING_SAMPLE_RATIO", "1.5")
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="tracing_sample_ratio"):
        get_settings()
    get_settings.cache_clear()
