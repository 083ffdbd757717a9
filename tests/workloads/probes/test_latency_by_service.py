"""A ramp with a span receiver: each step's latency by service in steps.json, its CSV, the
stacked bars and the table of the report. The traces come from OpenTelemetry's exporter
while the ramp runs, as the services' would (the capacity server traces nothing)."""

from __future__ import annotations

import csv
import io
import threading
import time
from pathlib import Path

from PIL import Image
from rich.console import Console

from socialbench.workloads.probes.otlp import SpanReceiver
from socialbench.workloads.probes.spans import SERVICE_TIME_CSV
from socialbench.workloads.reports.ramp_report import SERVICE_PLOT, service_tables
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.workloads.conftest import CapacityServer, small_ramp
from tests.workloads.traces import COMPOSE_TIMES, export_trace

ENDPOINT = "POST /wrk2-api/post/compose"


def test_a_traced_ramp_records_and_reports_latency_by_service(
    capacity_server: CapacityServer, tmp_path: Path
) -> None:
    stop = threading.Event()
    with SpanReceiver() as receiver:

        def emit() -> None:
            while not stop.wait(0.05):
                export_trace(receiver.endpoint, time.time_ns())

        emitter = threading.Thread(target=emit)
        emitter.start()
        try:
            ramp = execute(RampJob(
                config=small_ramp(capacity_server.url, max_steps=2), label="traced",
                results_dir=tmp_path, sampler=lambda: (None, "not measured here"),
                resources_source="none", dataset=Dataset(fresh=False, users=962),
                mongodb_server="mongod", spans=receiver,
            ), Console(file=io.StringIO(), width=200))
        finally:
            stop.set()
            emitter.join()

    bundle = read_bundle(ramp.directory)
    assert len(bundle.steps) == 2
    for step in bundle.steps:
        table = step.latency_by_service
        assert table is not None and table.traces > 0, step.name
        (endpoint,) = table.endpoints
        assert endpoint.endpoint == ENDPOINT and endpoint.traces == table.traces
        assert {p.name: p.p50_ms for p in endpoint.parts} == COMPOSE_TIMES
        assert {p.name: p.p99_ms for p in endpoint.parts} == COMPOSE_TIMES

    with (ramp.directory / SERVICE_TIME_CSV).open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 2 * len(COMPOSE_TIMES)
    for row in rows:
        record = next(s for s in bundle.steps if s.index == int(row["index"]))
        assert record.latency_by_service is not None
        assert row["endpoint"] == ENDPOINT
        assert int(row["endpoint_traces"]) == record.latency_by_service.traces
        assert float(row["p50_ms"]) == COMPOSE_TIMES[row["part"]]

    (table,) = service_tables(bundle.steps)
    assert [name for name, _ in table.parts] == list(COMPOSE_TIMES)  # largest first
    with Image.open(ramp.directory / SERVICE_PLOT) as image:
        colours = image.convert("L").getextrema()
        assert colours[1] - colours[0] > 100, "the bars are blank"
    page = ramp.report.read_text()
    assert f'data-file="{SERVICE_PLOT}"' in page
    assert 'id="latency-by-service"' in page and "rpc to text" in page
    assert f'href="{SERVICE_TIME_CSV}"' in page


def test_an_untraced_ramp_has_no_latency_by_service(refined_ramp: RampReport) -> None:
    bundle = read_bundle(refined_ramp.directory)

    assert all(step.latency_by_service is None for step in bundle.steps)
    assert not (refined_ramp.directory / SERVICE_TIME_CSV).exists()
    assert not (refined_ramp.directory / SERVICE_PLOT).exists()
    assert "latency-by-service" not in refined_ramp.report.read_text()
