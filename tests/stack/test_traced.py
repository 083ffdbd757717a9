"""The local stack traced into the ramp's receiver: its plan, its restarts, its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.runtime.tracing import EXPORT_INTERVAL_MS
from socialbench.stack import launcher
from socialbench.stack.launcher import StackConfig
from socialbench.stack.local import LocalStack
from socialbench.stack.traced import spans_to_receiver

COLLECTOR = "http://127.0.0.1:4999/v1/traces"


def test_a_trace_collector_replaces_jaeger_and_gets_every_services_spans(
    tmp_path: Path,
) -> None:
    config = StackConfig(data_dir=tmp_path, tracing=True, trace_sample_ratio=0.02,
                         trace_collector=COLLECTOR)
    components = launcher.plan(config)

    assert "jaeger" not in [c.name for c in components]
    services = [c for c in components if c.kind == "service"]
    assert services
    for component in services:
        assert component.env["SOCIALBENCH_TRACING_ENDPOINT"] == COLLECTOR
        assert component.env["SOCIALBENCH_TRACING_SAMPLE_RATIO"] == "0.02"
        assert component.env["OTEL_BSP_SCHEDULE_DELAY"] == str(EXPORT_INTERVAL_MS)
    assert StackConfig.from_json(config.to_json()) == config


def test_the_stack_is_traced_into_the_receiver_then_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = StackConfig(data_dir=tmp_path, workers={"text": 2}, trace_sample_ratio=0.05)
    (tmp_path / launcher.CONFIG_FILE).write_text(before.to_json())
    restarts: list[StackConfig] = []

    def restart(self: LocalStack, config: StackConfig, **options: object) -> StackConfig:
        restarts.append(config)
        (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
        return config

    monkeypatch.setattr(LocalStack, "restart", restart)
    stack = LocalStack(tmp_path)
    notes: list[str] = []

    with spans_to_receiver(stack, 0.01, notes.append) as receiver:
        (traced,) = restarts
        assert traced.trace_collector == receiver.endpoint
        assert traced.trace_sample_ratio == 0.01 and traced.workers == {"text": 2}
        record = stack.record(stack.config.url)
        assert record is not None and record.tracing and record.trace_sample_ratio == 0.01

    assert restarts[1] == before
    assert "0.01 of its requests traced" in notes[0]


def test_trace_ratio_needs_the_running_local_stack(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "ramp", "http://127.0.0.1:1/", "--trace-ratio", "0.01", "--data-dir", str(tmp_path),
        "--results-dir", str(tmp_path / "results")])

    assert result.exit_code == 2, result.output
    assert "--trace-ratio" in result.output and "not its running front end" in result.output
    assert not (tmp_path / "results").exists()
