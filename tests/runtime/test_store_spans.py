"""Spans of store calls, against the real Redis, memcached and MongoDB servers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer

from socialbench.registry import Store
from socialbench.runtime.mongodb_client import MongoCommandError
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.stack.servers import ServerCommand

ALL = (Store.REDIS, Store.MEMCACHED, Store.MONGODB)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.shutdown()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


@pytest.fixture
async def stores(
    redis_server: ServerCommand,
    memcached_server: ServerCommand,
    mongodb_server: ServerCommand,
    tracer: Tracer,
) -> AsyncIterator[Stores]:
    settings = Settings(redis_url=f"redis://{redis_server.address}/0",
                        memcached_address=memcached_server.address,
                        mongodb_url=f"mongodb://{mongodb_server.address}")
    connected = Stores.connect(settings, ALL, tracer=tracer)
    yield connected
    await connected.close()


async def use_every_store(stores: Stores, key: str) -> None:
    """One call of each kind the services make."""
    redis, memcached = stores.require_redis(), stores.require_memcached()
    await redis.zadd(key, {"a": 1})
    await redis.pipeline(("ZADD", key, 2, "b"), ("ZREVRANGE", key, 0, -1), ("EXISTS", key))
    await memcached.set(key.encode(), b"v")
    await memcached.add(key.encode(), b"v")
    await memcached.multi_get(key.encode(), b"missing-" + key.encode())
    posts = stores.require_mongodb()["socialbench_test"]["post"]
    await posts.insert_one({"_id": key})
    assert await posts.find_one({"_id": key}) is not None


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_store_calls_in_a_traced_request_are_its_child_spans(
    stores: Stores, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    key = f"spans:{uuid.uuid4().hex}"
    with tracer.start_as_current_span("request", kind=SpanKind.SERVER) as request:
        await use_every_store(stores, key)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert {"redis ZADD", "redis pipeline", "memcached set", "memcached add",
            "memcached multi_get", "mongodb insert post", "mongodb find post"} <= set(spans)
    request_id = request.get_span_context().span_id
    for name, span in spans.items():
        if name != "request":
            assert span.kind is SpanKind.CLIENT, name
            assert span.parent is not None and span.parent.span_id == request_id, name
    pipeline = attributes(spans["redis pipeline"])
    assert pipeline["db.operation.batch.size"] == 3
    assert pipeline["db.operation.name"] == "PIPELINE EXISTS ZADD ZREVRANGE"
    assert attributes(spans["memcached multi_get"])["db.operation.batch.size"] == 2
    assert attributes(spans["mongodb find post"])["db.collection.name"] == "post"
    assert attributes(spans["mongodb insert post"])["db.namespace"] == "socialbench_test"


async def test_store_calls_outside_a_traced_request_make_no_spans(
    stores: Stores, exporter: InMemorySpanExporter
) -> None:
    await use_every_store(stores, f"spans:{uuid.uuid4().hex}")
    assert exporter.get_finished_spans() == ()


async def test_a_failed_command_is_an_error_span(
    stores: Stores, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    mongodb = stores.require_mongodb()
    with tracer.start_as_current_span("request"), pytest.raises(MongoCommandError):
        await mongodb.command("socialbench_test", {"no_such_command": 1})
    failed = [s for s in exporter.get_finished_spans() if s.name == "mongodb no_such_command"]
    assert len(failed) == 1
    assert failed[0].status.status_code is StatusCode.ERROR
