"""N drivers' results merged into one equal what one driver reports for the same samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.driver.merge import merge_results
from socialbench.workloads.driver.result import LoadResult
from socialbench.workloads.driver.worker import WorkerReport
from tests.deploy.results import load_config, result_of, second, worker_report

DRIVERS = 3
RATE = 900.0


@pytest.fixture(scope="module")
def reports() -> list[WorkerReport]:
    return [worker_report(i, requests=2000 + 100 * i, seed=i) for i in range(DRIVERS)]


@pytest.fixture(scope="module")
def parts(reports: list[WorkerReport]) -> list[LoadResult]:
    """Each worker's samples reported by its own driver at R/N."""
    return [result_of(load_config(RATE / DRIVERS, 1, 32), [report]) for report in reports]


@pytest.fixture(scope="module")
def merged(parts: list[LoadResult]) -> LoadResult:
    return merge_results(parts)


def test_merge_of_n_drivers_equals_one_driver_with_n_processes(
    reports: list[WorkerReport], parts: list[LoadResult], merged: LoadResult
) -> None:
    one_driver = result_of(load_config(RATE, DRIVERS, 32 * DRIVERS), reports)
    for field in ("latency", "service_time", "send_lag", "errors", "scheduled", "sent",
                  "completed", "ok", "queued", "in_flight_at_start", "in_flight_at_end",
                  "peak_connections", "offered_rps", "scheduled_rps", "achieved_rps",
                  "window_s", "precise_timer", "saturated", "warnings"):
        assert getattr(merged, field) == getattr(one_driver, field), field
    assert merged.driver_cpu_s == pytest.approx(one_driver.driver_cpu_s)
    assert merged.config.rate == RATE
    assert merged.config.processes == DRIVERS
    assert merged.config.connections == 32 * DRIVERS
    # Drivers often share a node: the CPU count is the one the load average was taken on.
    assert (merged.host.cpus, merged.host.loadavg_start) == (
        parts[0].host.cpus, parts[0].host.loadavg_start)


def test_merged_histograms_hold_every_sample(parts: list[LoadResult], merged: LoadResult) -> None:
    assert merged.latency.count == sum(p.latency.count for p in parts) > 6000
    assert merged.latency.max_us == max(p.latency.max_us for p in parts)
    assert merged.latency.min_us == min(p.latency.min_us for p in parts)
    assert merged.latency.decode().get_total_count() == merged.latency.count


def test_a_saturated_driver_makes_the_whole_result_untrustworthy(
    parts: list[LoadResult], merged: LoadResult
) -> None:
    assert not merged.saturated
    spoiled = list(parts)
    spoiled[1] = parts[1].model_copy(update={"saturated": True,
                                             "warnings": ["send lag p99 is 9.00 ms"]})
    result = merge_results(spoiled)
    assert result.saturated
    assert "driver 1: send lag p99 is 9.00 ms" in result.warnings


def test_a_driver_stopped_early_marks_the_whole_result_so(
    parts: list[LoadResult], merged: LoadResult
) -> None:
    assert not merged.stopped_early
    cut = list(parts)
    cut[2] = parts[2].model_copy(update={"stopped_early": True,
                                         "window_s": parts[2].window_s / 2})
    result = merge_results(cut)
    assert result.stopped_early
    assert "the drivers' measured windows differ; rates use the longest" in result.warnings


def test_timeline_adds_counts_and_keeps_the_worst_p99(parts: list[LoadResult]) -> None:
    a = parts[0].model_copy(update={"timeline": [second(1, 450, 900), second(2, 450, 800)]})
    b = parts[1].model_copy(update={"timeline": [second(1, 440, 700), second(2, 460, 1200)]})
    timeline = merge_results([a, b]).timeline
    assert [(s.second, s.sent, s.latency_p99_us, s.errors) for s in timeline] == [
        (1, 890, 900, 2), (2, 910, 1200, 2)]


def test_the_merged_host_names_every_drivers_architecture_once(
    parts: list[LoadResult],
) -> None:
    hosts = [("node-a", "x86_64", False), ("node-b", "aarch64", True),
             ("node-a", "x86_64", False)]
    mixed = [part.model_copy(update={"host": part.host.model_copy(update={
        "hostname": name, "architecture": arch, "emulated": emulated})})
        for part, (name, arch, emulated) in zip(parts, hosts, strict=True)]
    host = merge_results(mixed).host
    assert (host.hostname, host.architecture) == ("node-a,node-b", "x86_64,aarch64")
    assert host.emulated is True  # one emulated driver's timings are in the merge
    assert merge_results(parts).host.emulated is False


def test_a_result_written_before_the_architecture_was_recorded_still_reads(
    parts: list[LoadResult],
) -> None:
    older = json.loads(parts[0].model_dump_json())
    del older["host"]["architecture"], older["host"]["emulated"]
    host = LoadResult.model_validate(older).host
    assert (host.architecture, host.emulated) == ("", None)


def test_nothing_to_merge_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_results([])


def test_merge_command_writes_the_merged_result(
    tmp_path: Path, parts: list[LoadResult], merged: LoadResult
) -> None:
    files = []
    for index, part in enumerate(parts):
        files.append(tmp_path / f"driver-{index}.json")
        files[-1].write_text(part.model_dump_json())
    out = tmp_path / "merged" / "result.json"
    run = CliRunner().invoke(app, ["merge", *map(str, files), "--json", str(out)])
    assert run.exit_code == 0, run.output
    assert "3 results merged" in run.output
    assert LoadResult.model_validate_json(out.read_text()) == merged


def test_merge_command_names_a_file_that_is_not_a_result(tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text('{"rate": 1}')
    out = tmp_path / "result.json"
    run = CliRunner().invoke(app, ["merge", str(bad), "--json", str(out)],
                             env={"COLUMNS": "300"})
    assert run.exit_code == 2
    assert "notes.json: not a `socialbench load --json` result" in run.output
    assert not out.exists()
