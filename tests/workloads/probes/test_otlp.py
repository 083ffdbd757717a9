"""The ramp's OTLP/HTTP span receiver, fed by OpenTelemetry's own exporter."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression

from socialbench.workloads.probes.otlp import PATH, PROTOBUF, SpanReceiver
from socialbench.workloads.probes.spans import Part
from tests.workloads.traces import MS, export_trace


@pytest.fixture
def receiver() -> Iterator[SpanReceiver]:
    with SpanReceiver() as running:
        yield running


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_spans_from_the_otel_exporter_are_tabled_by_service(
    receiver: SpanReceiver, compression: Compression
) -> None:
    start = 1_700_000_000 * 1_000_000_000
    export_trace(receiver.endpoint, start, compression)

    assert receiver.received == 4
    table = receiver.table(start, start + 1000 * MS)

    assert (table.traces, table.incomplete) == (1, 0)
    (endpoint,) = table.endpoints
    assert endpoint.endpoint == "POST /wrk2-api/post/compose"
    assert {(p.name, p.kind, p.p50_ms) for p in endpoint.parts} == {
        ("compose-post", Part.SERVICE, 4.0),  # 10 less the RPC's 6
        ("rpc to text", Part.RPC, 2.0),  # 6 less text's 4
        ("text", Part.SERVICE, 3.0),  # 4 less memcached's 1
        ("memcached", Part.STORE, 1.0),
    }


def test_old_traces_are_forgotten_and_the_window_is_respected(receiver: SpanReceiver) -> None:
    second = 1_000_000_000
    start = 1_700_000_000 * second
    export_trace(receiver.endpoint, start)
    export_trace(receiver.endpoint, start + 100 * second)

    assert receiver.table(start + 100 * second, start + 101 * second).traces == 1
    # The first trace ended more than KEEP_S before that window: gone.
    assert receiver.table(start, start + second).traces == 0


def test_what_is_not_an_otlp_protobuf_export_is_refused(receiver: SpanReceiver) -> None:
    with httpx.Client() as client:
        json_body = client.post(receiver.endpoint, json={"resourceSpans": []})
        garbage = client.post(receiver.endpoint, content=b"\xff\xff\xff",
                              headers={"Content-Type": PROTOBUF})
        bad_gzip = client.post(receiver.endpoint, content=b"not gzip",
                               headers={"Content-Type": PROTOBUF, "Content-Encoding": "gzip"})
        elsewhere = client.post(receiver.endpoint.replace(PATH, "/v1/metrics"),
                                content=gzip.compress(b""), headers={"Content-Type": PROTOBUF})

    assert json_body.status_code == 415 and PROTOBUF in json_body.text
    assert garbage.status_code == 400 and "not an OTLP trace export" in garbage.text
    assert bad_gzip.status_code == 400
    assert elsewhere.status_code == 404
    assert (receiver.received, receiver.rejected) == (0, 3)
