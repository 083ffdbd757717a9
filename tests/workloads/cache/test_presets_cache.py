"""A cache preset run for real, shortened: its deviations in the manifest, every run of
--runs in the bundle, the preset named in the report and in compare."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.cache.servers import Instance
from socialbench.workloads.reports.cache_compare import compare_cache
from socialbench.workloads.results.cache_runs import read_records

RUNNER = CliRunner()


def test_a_shortened_yitian_run_records_its_deviations_and_runs(
        memcached: Instance, tmp_path: Path) -> None:
    done = RUNNER.invoke(app, [
        "cache", "run", "--preset", "memcached-yitian", "--port", str(memcached.port),
        "--threads", "1", "--clients", "2", "--pipeline", "1", "--pipeline", "4",
        "--runs", "2", "--test-time", "0.5", "--key-maximum", "999",
        "--results-dir", str(tmp_path), "--label", "yitian"])
    assert done.exit_code == 0, done.output
    assert "Yitian 710 memcached method, 4 deviations: --threads 1 (preset: 8)" in done.output
    assert "pipeline 4: 2 runs," in done.output and "mean" in done.output
    (bundle,) = tmp_path.iterdir()
    manifest, records, outcome = read_records(bundle)
    assert outcome is None and manifest.preset is not None
    assert [d.option for d in manifest.preset.deviations] == [
        "threads", "clients", "pipeline", "runs"]
    assert sorted((r.pipeline, r.name) for r in records) == [
        (1, "pipeline-1-run1"), (1, "pipeline-1-run2"), (4, "pipeline-4-run1"),
        (4, "pipeline-4-run2")]
    assert json.loads((bundle / "manifest.json").read_text())["config"]["repeats"] == 2
    assert 'id="preset"' in (bundle / "report.html").read_text()

    other = RUNNER.invoke(app, [
        "cache", "run", "--port", str(memcached.port), "--threads", "1", "--clients", "2",
        "--pipeline", "1", "--pipeline", "4", "--test-time", "0.5", "--key-maximum", "999",
        "--results-dir", str(tmp_path / "plain"), "--label", "plain"])
    assert other.exit_code == 0, other.output
    (plain,) = (tmp_path / "plain").iterdir()
    notes = compare_cache([bundle, plain]).preset_notes()
    assert len(notes) == 1 and "yitian: Yitian 710 memcached method, 4 deviations" in notes[0]
    assert "plain: none" in notes[0]
