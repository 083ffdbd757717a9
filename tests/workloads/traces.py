"""Traces sent as the services send theirs: OpenTelemetry's SDK and OTLP/HTTP exporter."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context

from socialbench.workloads.probes.spans import NS_PER_MS

MS = NS_PER_MS
# The exclusive times of export_trace's trace, in ms.
COMPOSE_TIMES = {"compose-post": 4.0, "text": 3.0, "rpc to text": 2.0, "memcached": 1.0}


def export_trace(endpoint: str, start_ns: int, compression: Compression = Compression.NoCompression
                 ) -> None:
    """A compose-post server span [0, 10] ms calling text over RPC [2, 8], whose server span
    [3, 7] makes a memcached call [4, 5]: two services, each exporting its own spans."""
    providers = {}
    for service in ("compose-post", "text"):
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint, compression=compression)))
        providers[service] = provider
    compose = providers["compose-post"].get_tracer("test")
    text = providers["text"].get_tracer("test")
    root = compose.start_span("POST /wrk2-api/post/compose", kind=SpanKind.SERVER,
                              start_time=start_ns)
    rpc = compose.start_span("text upload_text", context=set_span_in_context(root),
                             kind=SpanKind.CLIENT, attributes={"rpc.service": "text"},
                             start_time=start_ns + 2 * MS)
    served = text.start_span("POST /upload_text", context=set_span_in_context(rpc),
                             kind=SpanKind.SERVER, start_time=start_ns + 3 * MS)
    store = text.start_span("memcached get", context=set_span_in_context(served),
                            kind=SpanKind.CLIENT, attributes={"db.system.name": "memcached"},
                            start_time=start_ns + 4 * MS)
    store.end(end_time=start_ns + 5 * MS)
    served.end(end_time=start_ns + 7 * MS)
    rpc.end(end_time=start_ns + 8 * MS)
    root.end(end_time=start_ns + 10 * MS)
    for provider in providers.values():
        provider.shutdown()
