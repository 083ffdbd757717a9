"""An OTLP/HTTP span receiver inside the ramp's process, and each step's latency by service.

``socialbench ramp --trace-ratio R`` points the services' exporters
(``SOCIALBENCH_TRACING_ENDPOINT``) at :class:`SpanReceiver`, which takes protobuf
``ExportTraceServiceRequest`` posts on ``/v1/traces``, as Jaeger or a collector would,
and keeps the spans by trace. At the end of each step :meth:`SpanReceiver.step_table`
waits for the exporters' last batch, tables the traces whose root started in the step's
measured window (:mod:`socialbench.workloads.probes.spans`), and forgets what is older.
No Go binary, no second process: spans are placed in steps by their own timestamps.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from socialbench.runtime.tracing import EXPORT_INTERVAL_MS
from socialbench.workloads.probes.spans import LatencyByService, Span, latency_by_service

if TYPE_CHECKING:  # the local stack's supervisor imports this module: keep it light
    from socialbench.workloads.driver.result import LoadResult


class StepRun(Protocol):
    """A measured step (the ramp's StepRun): its driver result."""

    result: LoadResult

PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
# A step's table waits this long after the step for the exporters' last batch.
SETTLE_S = EXPORT_INTERVAL_MS / 1000 + 1.0
# A trace is forgotten once its last span is this much older than the window just tabled.
KEEP_S = 30.0
STORE_ATTRIBUTE = "db.system.name"  # set on store calls (socialbench.runtime.store_spans)
RPC_ATTRIBUTE = "rpc.service"  # set on RPCs (socialbench.runtime.rpc)


def decode(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        service = next((a.value.string_value for a in resource_spans.resource.attributes
                        if a.key == "service.name"), "unknown")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found = {a.key: a.value.string_value for a in span.attributes
                         if a.key in (STORE_ATTRIBUTE, RPC_ATTRIBUTE)}
                spans.append(Span(
                    trace_id=span.trace_id, span_id=span.span_id, parent_id=span.parent_span_id,
                    service=service, name=span.name,
                    server=span.kind == ProtoSpan.SpanKind.SPAN_KIND_SERVER,
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    store=found.get(STORE_ATTRIBUTE), callee=found.get(RPC_ATTRIBUTE),
                ))
    return spans


def _body(headers: Any, raw: bytes) -> bytes:
    encoding = (headers.get("Content-Encoding") or "identity").lower()
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    if encoding != "identity":
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    return raw


class SpanReceiver:
    """An OTLP/HTTP (protobuf) trace receiver on ``host``, a free port unless given one."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._traces: dict[bytes, list[Span]] = defaultdict(list)
        self.received = 0  # spans, since start
        self.rejected = 0  # posts refused (not protobuf, undecodable)
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The URL to give ``SOCIALBENCH_TRACING_ENDPOINT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{PATH}"

    def start(self) -> SpanReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> SpanReceiver:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def add(self, spans: Iterable[Span]) -> None:
        with self._lock:
            for span in spans:
                self._traces[span.trace_id].append(span)
                self.received += 1

    def table(self, start_ns: int, end_ns: int) -> LatencyByService:
        """Latency by service of the traces whose root started in ``[start_ns, end_ns)``;
        traces that ended long before ``start_ns`` are forgotten."""
        with self._lock:
            horizon = start_ns - int(KEEP_S * 1e9)
            for trace_id in [t for t, spans in self._traces.items()
                             if max(s.end_ns for s in spans) < horizon]:
                del self._traces[trace_id]
            traces = [list(spans) for spans in self._traces.values()]
        return latency_by_service(traces, start_ns, end_ns)

    def step_table(self, step: StepRun) -> LatencyByService:
        """The table of ``step``'s measured window, once its last spans had time to arrive."""
        time.sleep(SETTLE_S)
        result = step.result
        start = result.started_at + timedelta(seconds=result.config.warmup_s)
        start_ns = int(start.timestamp() * 1e9)
        return self.table(start_ns, start_ns + int(result.window_s * 1e9))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the exporters keep their connection

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != PATH:
                    self._answer(HTTPStatus.NOT_FOUND, f"spans go to {PATH}".encode())
                    return
                if (self.headers.get("Content-Type") or "").split(";")[0] != PROTOBUF:
                    receiver.rejected += 1
                    self._answer(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                                 f"only OTLP/HTTP protobuf ({PROTOBUF})".encode())
                    return
                try:
                    spans = decode(_body(self.headers, raw))
                except (DecodeError, ValueError, OSError, zlib.error) as exc:
                    receiver.rejected += 1
                    self._answer(HTTPStatus.BAD_REQUEST, f"not an OTLP trace export: {exc}"
                                 .encode())
                    return
                receiver.add(spans)
                self._answer(HTTPStatus.OK, ExportTraceServiceResponse().SerializeToString(),
                             PROTOBUF)

            def _answer(self, status: HTTPStatus, body: bytes,
                        content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # one line per export would flood the ramp's console

        return Handler
