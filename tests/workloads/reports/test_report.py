"""The report: non-empty PNG plots, and one self-contained HTML page that shows them."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from PIL import Image
from pydantic import TypeAdapter
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.reports.ramp_report import (
    ACHIEVED_PLOT,
    LATENCY_PLOT,
    RESOURCES_PLOT,
    SPECTRUM_PLOT,
    build_report,
)
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import StepRecord
from socialbench.workloads.results.summary import RampReport

PLOTS = (LATENCY_PLOT, ACHIEVED_PLOT, SPECTRUM_PLOT, RESOURCES_PLOT)


def copy_bundle(ramp: RampReport, tmp_path: Path) -> Path:
    directory = tmp_path / ramp.directory.name
    shutil.copytree(ramp.directory, directory)
    return directory


def test_the_plots_are_non_empty_images(refined_ramp: RampReport, tmp_path: Path) -> None:
    directory = copy_bundle(refined_ramp, tmp_path)
    for name in PLOTS:
        (directory / name).unlink()
    build_report(directory)

    for name in PLOTS:
        with Image.open(directory / name) as image:
            assert image.format == "PNG"
            assert image.width >= 600 and image.height >= 400
            colours = image.convert("L").getextrema()
            assert colours[1] - colours[0] > 100, f"{name} is blank"


def test_the_html_embeds_and_links_every_plot_and_log(
    refined_ramp: RampReport, tmp_path: Path
) -> None:
    directory = copy_bundle(refined_ramp, tmp_path)
    page = build_report(directory).read_text()
    bundle = read_bundle(directory)

    for name in PLOTS:
        embedded = base64.b64encode((directory / name).read_bytes()).decode()
        assert f'src="data:image/png;base64,{embedded}"' in page, name
        assert f'href="{name}"' in page
    for step in bundle.steps:
        assert f'href="{step.histogram_log}"' in page and f'href="{step.raw_result}"' in page
    assert bundle.summary.max_rate_rps is not None
    assert f"Max <b>{bundle.summary.max_rate_rps:,.6g} req/s</b>" in page
    assert "SLA p99 &lt;= 120 ms" in page  # escaped
    assert "capacity-server" in page  # where the CPU went
    assert "req/s per watt" in page  # energy, measured with --power-cmd
    # self-contained: nothing fetched from elsewhere
    assert "<script" not in page and "<link" not in page and 'src="http' not in page


def test_report_command_rebuilds_the_report(refined_ramp: RampReport, tmp_path: Path) -> None:
    directory = copy_bundle(refined_ramp, tmp_path)
    (directory / "report.html").unlink()
    (directory / LATENCY_PLOT).unlink()

    result = CliRunner().invoke(app, ["report", str(directory)])

    assert result.exit_code == 0, result.output
    assert (directory / "report.html").exists() and (directory / LATENCY_PLOT).exists()
    assert str(directory / "report.html") in result.output.replace("\n", "")


def test_report_of_a_bundle_without_resources_or_energy_says_why(
    refined_ramp: RampReport, tmp_path: Path
) -> None:
    directory = copy_bundle(refined_ramp, tmp_path)
    bundle = read_bundle(directory)
    steps = [
        step.model_copy(update={
            "resources": step.resources.model_copy(update={
                "available": False, "note": "unavailable: not the local stack",
                "components": [], "stack_cpu_seconds": None, "cpu_ms_per_request": None}),
            "energy": step.energy.model_copy(update={
                "available": False, "source": "unavailable", "joules": None, "watts": None,
                "joules_per_request": None, "requests_per_joule": None,
                "note": "unavailable: no RAPL counters and no --power-cmd"}),
        })
        for step in bundle.steps
    ]
    summary = bundle.summary.model_copy(update={
        "energy_note": "unavailable: no RAPL counters and no --power-cmd",
        "resources_note": "unavailable: not the local stack",
        "best": bundle.summary.best.model_copy(  # type: ignore[union-attr]
            update={"cpu_ms_per_request": None, "joules_per_request": None}),
    })
    (directory / "steps.json").write_bytes(TypeAdapter(list[StepRecord]).dump_json(steps))
    (directory / "summary.json").write_text(summary.model_dump_json())
    (directory / RESOURCES_PLOT).unlink()

    page = build_report(directory).read_text()

    assert not (directory / RESOURCES_PLOT).exists()
    assert "Per-component CPU and memory: unavailable: not the local stack" in page
    assert "Energy: unavailable: no RAPL counters and no --power-cmd" in page


def test_each_step_and_the_broken_one_say_what_limited_them(refined_ramp: RampReport) -> None:
    # The capacity server limits by its slots, sleeping: no process is at its core. On a
    # machine other work keeps busy meanwhile, that work is the step's limit, named so.
    steps = json.loads((refined_ramp.directory / "steps.json").read_text())
    verdicts = [step["bottleneck"] for step in steps]
    assert all(v is not None and "capacity-server" in v["text"] for v in verdicts), verdicts
    for verdict in verdicts:
        if verdict["limit"] != "waiting":
            assert verdict["limit"] == "cpus", verdict
            assert "other processes and steal" in verdict["text"], verdict
            assert "quiet machine" in verdict["suggestion"], verdict
    html = refined_ramp.report.read_text()
    assert "<b>Limited by</b>" in html
    if any(v["limit"] == "waiting" for v in verdicts):
        assert "latency comes from waiting" in html
