"""compare: two bundles side by side, with the right ratios."""

from __future__ import annotations

import base64
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.check.contents import CheckResult
from socialbench.workloads.probes.cpuid import CpuIdentity
from socialbench.workloads.probes.energy import EnergyOptions, System, plan_energy
from socialbench.workloads.probes.meters import Coverage
from socialbench.workloads.probes.records import StackRecord
from socialbench.workloads.ramp.engine import Sla
from socialbench.workloads.reports.compare import (
    COMPARE_PLOT,
    FIGURES_PLOT,
    Comparison,
    IncomparableError,
    compare,
    compare_ramps,
)
from socialbench.workloads.reports.formatting import format_ratio
from socialbench.workloads.results.cache_runs import CacheBundleWriter
from socialbench.workloads.results.files import BundleError, read_bundle
from socialbench.workloads.results.schema import Dataset, StepRecord
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.seeding.seed import SeedDataset, SeedPath, SeedRecord


@pytest.fixture
def two_bundles(refined_ramp: RampReport, tmp_path: Path) -> tuple[Path, Path]:
    """The measured bundle, and a copy "from a machine" with known differences: 1.2x the
    max rate, 0.66x its p99, 0.9x the energy per request (1/0.9x the perf per watt), half
    the p99 at every rate."""
    base = tmp_path / "base"
    other = tmp_path / "other"
    shutil.copytree(refined_ramp.directory, base)
    shutil.copytree(refined_ramp.directory, other)
    bundle = read_bundle(other)
    best = bundle.summary.best
    assert best is not None and best.joules_per_request is not None
    faster = best.model_copy(update={
        "max_rate_rps": best.max_rate_rps * 1.2, "p99_ms": best.p99_ms * 0.66,
        "joules_per_request": best.joules_per_request * 0.9,
        "requests_per_joule": 1 / (best.joules_per_request * 0.9),
    })
    summary = bundle.summary.model_copy(update={
        "label": "faster", "best": faster, "max_rate_rps": faster.max_rate_rps,
        "p99_ms": faster.p99_ms,
    })
    steps = [
        step.model_copy(update={"latency_ms": step.latency_ms | {"99": step.latency_ms["99"] / 2}})
        for step in bundle.steps
    ]
    manifest = bundle.manifest.model_copy(update={"label": "faster"})
    (other / "summary.json").write_text(summary.model_dump_json())
    (other / "manifest.json").write_text(manifest.model_dump_json())
    (other / "steps.json").write_bytes(TypeAdapter(list[StepRecord]).dump_json(steps))
    return base, other


def test_ratios_are_run_over_baseline(two_bundles: tuple[Path, Path]) -> None:
    comparison = compare(two_bundles)
    assert isinstance(comparison, Comparison)
    base, other = comparison.runs

    assert comparison.rate_ratio(other) == pytest.approx(1.2)
    assert comparison.p99_ratio(other) == pytest.approx(0.66)
    assert comparison.energy_ratio(other) == pytest.approx(0.9)
    assert comparison.per_watt_ratio(other) == pytest.approx(1 / 0.9)
    assert comparison.per_watt_band(other) is None  # two measurements
    assert comparison.energy_warnings() == []  # the same meter (a --power-cmd) on both
    assert comparison.common_rates == sorted(base.p99_by_rate) == sorted(other.p99_by_rate)
    assert {120.0, 170.0, 220.0} <= set(comparison.common_rates)
    for rate in comparison.common_rates:
        assert other.p99_by_rate[rate] / base.p99_by_rate[rate] == pytest.approx(0.5)
    assert comparison.sentence(other) == (
        "faster vs capacity-200: 20% more req/s at the SLA, p99 there 34% lower, "
        "perf per watt 11% higher, host speed 1.00x (+0%)"
    )
    assert comparison.differences == []


def test_format_ratio() -> None:
    assert format_ratio(1.2) == "1.20x (+20%)"
    assert format_ratio(0.66) == "0.66x (-34%)"
    assert format_ratio(None) == "—"


def test_compare_command_prints_and_renders_the_ratios(
    two_bundles: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "comparison"
    result = CliRunner().invoke(
        app, ["compare", *map(str, two_bundles), "--out", str(out)], env={"COLUMNS": "200"}
    )

    assert result.exit_code == 0, result.output
    for text in ("1.20x (+20%)", "0.66x (-34%)", "1.11x (+11%)", "0.50x (-50%)",
                 "faster vs capacity-200: 20% more req/s at the SLA, p99 there 34% lower"):
        assert text in result.output, text
    assert result.output.count("0.50x (-50%)") == len(compare_ramps(two_bundles).common_rates)
    page = (out / "compare.html").read_text()
    assert "1.20x (+20%)" in page and "0.66x (-34%)" in page and "0.50x (-50%)" in page
    image = base64.b64encode((out / COMPARE_PLOT).read_bytes()).decode()
    assert image and f"base64,{image}" in page and f'href="{COMPARE_PLOT}"' in page
    numbers = json.loads((out / "compare.json").read_text())
    assert numbers["baseline"] == "capacity-200"
    assert numbers["runs"][1]["max_rate_ratio"] == pytest.approx(1.2)
    assert numbers["runs"][1]["per_watt_ratio"] == pytest.approx(1 / 0.9)
    figures = base64.b64encode((out / FIGURES_PLOT).read_bytes()).decode()
    assert f"base64,{figures}" in page and "three figures" in page


def test_compare_needs_two_readable_bundles(
    two_bundles: tuple[Path, Path], tmp_path: Path
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["compare", str(two_bundles[0])]).exit_code == 2
    result = runner.invoke(app, ["compare", str(two_bundles[0]), str(tmp_path / "nothing")])
    assert result.exit_code == 2


def test_a_ramp_bundle_is_not_compared_with_a_cache_bundle(
    two_bundles: tuple[Path, Path], tmp_path: Path
) -> None:
    cache = CacheBundleWriter(tmp_path, "cache", "cache-run", {}).directory
    with pytest.raises(BundleError, match=r"cannot compare a ramp bundle .* with a cache-run"):
        compare([two_bundles[0], cache])
    result = CliRunner().invoke(app, ["compare", str(cache), str(two_bundles[0])],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "cannot compare a cache-run bundle" in result.output


def plant(directory: Path, *, manifest: dict[str, object] | None = None,
          config: dict[str, object] | None = None, load: dict[str, object] | None = None,
          summary: dict[str, object] | None = None) -> None:
    """Change a copied bundle's manifest, configuration and summary in place."""
    bundle = read_bundle(directory)
    ramp_config = bundle.manifest.config
    ramp_config = ramp_config.model_copy(update={
        **(config or {}), "load": ramp_config.load.model_copy(update=load or {})})
    new_manifest = bundle.manifest.model_copy(update={**(manifest or {}), "config": ramp_config})
    (directory / "manifest.json").write_text(new_manifest.model_dump_json())
    (directory / "summary.json").write_text(
        bundle.summary.model_copy(update=summary or {}).model_dump_json())


def test_compare_refuses_runs_at_different_slas_unless_forced(
    two_bundles: tuple[Path, Path]
) -> None:
    base, other = two_bundles
    plant(other, config={"slas": (Sla.parse("p99=2s"),)}, summary={"sla": ["p99 <= 2 s"]})

    with pytest.raises(IncomparableError, match=r"SLA differs \(capacity-200: p99 <= 120 ms; "
                                                r"faster: p99 <= 2 s\)"):
        compare([base, other])
    result = CliRunner().invoke(app, ["compare", str(base), str(other)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "answer different questions" in result.output and "--force" in result.output

    forced = compare([base, other], force=True)
    assert isinstance(forced, Comparison)
    assert [d.name for d in forced.differences] == ["SLA"]


def test_compare_refuses_different_workloads(two_bundles: tuple[Path, Path]) -> None:
    base, other = two_bundles
    plant(other, load={"workload": "mixed"})
    with pytest.raises(IncomparableError, match="workload differs"):
        compare([base, other])


def test_compare_lists_every_difference_that_changes_the_number(
    two_bundles: tuple[Path, Path], tmp_path: Path
) -> None:
    base, other = two_bundles
    bundle = read_bundle(other)
    start = bundle.summary.host_calibration_start
    assert start is not None, "the ramp calibrated the host"
    slower = start.model_copy(update={"cpu_rounds_per_s": start.cpu_rounds_per_s * 0.6,
                                      "memory_bytes_per_s": start.memory_bytes_per_s * 0.7})
    dataset = bundle.manifest.dataset.model_copy(update={"users": 100_000})
    plant(other, manifest={"dataset": dataset,
                           "git": {"commit": "0123456789abcdef", "dirty": False}},
          config={"step_duration_s": 60.0, "warmup_s": 10.0},
          load={"connections": 512}, summary={"host_calibration_start": slower})

    comparison = compare([base, other])
    assert isinstance(comparison, Comparison)
    named = {d.name: d for d in comparison.differences}
    assert set(named) == {"step duration", "warm-up", "data", "code version",
                          "driver settings", "host speed"}
    assert not any(d.refuses for d in comparison.differences)
    assert named["step duration"].values == ("2 s", "60 s")
    assert "100,000 users" in named["data"].values[1]
    assert "commit 0123456789ab" in named["code version"].values[1]
    assert named["host speed"].values[0] == "1.00"
    assert float(named["host speed"].values[1]) == pytest.approx((0.6 * 0.7) ** (1 / 3),
                                                                 abs=0.01)
    result = CliRunner().invoke(app, ["compare", str(base), str(other),
                                      "--out", str(tmp_path / "out")], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    above_table = result.output.split("Baseline:")[0]
    assert "Differences that change the number" in above_table
    for name in named:
        assert f"{name} differs" in above_table, name
    assert "cpu 0.60, loopback 1.00, memory 0.70" in result.output
    page = (tmp_path / "out" / "compare.html").read_text()
    assert "step duration differs" in page


def test_another_store_layout_redis_mode_or_client_is_a_difference(
    two_bundles: tuple[Path, Path]
) -> None:
    base, other = two_bundles
    one_server = {"client": "socialbench", "topology": "standalone"}
    stack = StackRecord(workers={}, nginx_workers="auto", tracing=False, trace_sample_ratio=None,
                        store_layout="shared", redis_mode="standalone", redis_servers=1,
                        store_clients={"home-timeline": {"redis": one_server}})
    for bundle in (base, other):
        plant(bundle, manifest={"stack": stack})
    assert "store layout" not in {d.name for d in compare([base, other]).differences}
    clustered = stack.model_copy(update={
        "redis_mode": "cluster", "redis_servers": 6,
        "store_clients": {"home-timeline": {"redis": {"client": "socialbench",
                                                      "topology": "cluster of 3 masters"}}}})
    plant(other, manifest={"stack": clustered})
    (named,) = [d for d in compare([base, other]).differences if d.name == "store layout"]
    assert "standalone" in named.values[0] and "cluster of 3 masters" in named.values[1]
    assert not named.refuses


def checked(posts: int, edges: int) -> CheckResult:
    return CheckResult(passed=True, scope="every user", posts=posts, users=10, edges=edges,
                       user_timeline_entries=posts, home_timeline_entries=posts,
                       counts={}, tolerated={}, problems=[], elapsed_s=1.0)


def test_stores_of_other_sizes_differ_and_a_ramps_own_posts_do_not(
    two_bundles: tuple[Path, Path]
) -> None:
    base, other = two_bundles
    plant(base, summary={"check": checked(10_000, 37_680)})
    plant(other, summary={"check": checked(10_800, 37_680)})  # 8% more: the ramp's composes
    same = compare([base, other])
    assert isinstance(same, Comparison)
    assert "data size" not in {d.name for d in same.differences}

    plant(other, summary={"check": checked(1_000_000, 37_680)})
    grown = compare([base, other])
    assert isinstance(grown, Comparison)
    (size,) = [d for d in grown.differences if d.name == "data size"]
    assert size.values == ("10,000 posts, 37,680 follow edges",
                           "1,000,000 posts, 37,680 follow edges")


def seeded_record(source: str, seed: int, posts_per_user: int) -> SeedRecord:
    dataset = SeedDataset(graph=f"{source}-{seed}", source=source, users=1000, edges=5000,
                          follows=5000, directed=True, posts_per_user=posts_per_user,
                          posts=1000 * posts_per_user // 2, seed=seed)
    return SeedRecord(dataset=dataset, path=SeedPath.BULK, target="http://127.0.0.1:8080",
                      phases={}, complete=True, started_at=datetime.now(UTC))


def test_compare_refuses_runs_on_other_seeded_data_unless_forced(
    two_bundles: tuple[Path, Path]
) -> None:
    base, other = two_bundles
    dataset = read_bundle(base).manifest.dataset

    def seeded(source: str, seed: int, posts_per_user: int) -> Dataset:
        return dataset.model_copy(update={"fresh": False, "graph": source, "seed": seed,
                                          "posts_per_user": posts_per_user,
                                          "seeded": seeded_record(source, seed, posts_per_user)})

    plant(base, manifest={"dataset": seeded("twitter:1000:5", 1, 20)})
    plant(other, manifest={"dataset": seeded("twitter:1000:5", 1, 20)})
    same = compare([base, other])
    assert isinstance(same, Comparison)
    assert "dataset" not in {d.name for d in same.differences}

    plant(other, manifest={"dataset": seeded("twitter:1000:5", 2, 20)})
    with pytest.raises(IncomparableError, match=r"dataset differs .*seed 1.*seed 2"):
        compare([base, other])
    forced = compare_ramps([base, other], force=True)
    (named,) = [d for d in forced.differences if d.name == "dataset"]
    assert named.refuses and "seeded by --path bulk" in named.values[0]

    # A run on data it does not know is compared, the difference named as before.
    plant(other, manifest={"dataset": dataset.model_copy(update={"graph": None, "seed": None})})
    unknown = compare([base, other])
    assert isinstance(unknown, Comparison)
    assert "dataset" not in {d.name for d in unknown.differences}


def measured_per_watt(directory: Path) -> float:
    best = read_bundle(directory).summary.best
    assert best is not None and best.requests_per_joule is not None
    return best.requests_per_joule


def estimated(directory: Path, label: str, family: str, tmp_path: Path, value: float) -> Path:
    """``directory``'s bundle made an estimate's: the manifest's meter the estimate for
    ``family`` (a machine with no meter), the answer's perf per watt ``value`` with a band
    of -20%/+30%, every step's CPU utilisation 50%."""
    plan = plan_energy(EnergyOptions(cpu_family=family), System(
        powercap=tmp_path / "none", hwmon=tmp_path / "none", ipmi_devices=(),
        identify=lambda: CpuIdentity(family=None, name="unknown", threads=64)))
    bundle = read_bundle(directory)
    best = bundle.summary.best
    assert best is not None
    guessed = best.model_copy(update={
        "requests_per_joule": value, "requests_per_joule_low": value * 0.8,
        "requests_per_joule_high": value * 1.3, "energy_estimated": True,
        "energy_label": plan.record.label})
    steps = [step.model_copy(update={"energy": step.energy.model_copy(update={
        "estimated": True, "label": plan.record.label, "utilisation": 0.5})})
        for step in bundle.steps]
    (directory / "summary.json").write_text(bundle.summary.model_copy(update={
        "label": label, "best": guessed}).model_dump_json())
    (directory / "manifest.json").write_text(bundle.manifest.model_copy(update={
        "label": label, "energy_meter": plan.record}).model_dump_json())
    (directory / "steps.json").write_bytes(TypeAdapter(list[StepRecord]).dump_json(steps))
    return directory


def test_a_measurement_against_an_estimate_says_so(two_bundles: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    base, other = two_bundles
    estimated(other, "altra-max", "altra-max", tmp_path, 2 * measured_per_watt(base))
    comparison = compare([base, other])
    assert isinstance(comparison, Comparison)
    run = comparison.runs[1]
    assert comparison.per_watt_ratio(run) == pytest.approx(2.0)
    assert comparison.per_watt_band(run) == (pytest.approx(1.6), pytest.approx(2.6))
    (warning,) = comparison.energy_warnings()
    assert "sets an estimate against a measurement" in warning
    assert "estimated (CCF linear model, SPECpower coefficients for Ampere Altra Max)" in warning
    assert "--power-cmd 'echo 42'" in warning and "from 1.60x to 2.60x" in warning
    assert "perf per watt 100% higher (an estimate" in comparison.sentence(run)

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", str(base), str(other), "--out", str(out)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "sets an estimate against a measurement" in result.output
    page = (out / "compare.html").read_text()
    assert "sets an estimate against a measurement" in page
    assert "(estimated, band" in page and "estimated: 1.60x-2.60x" in page
    assert json.loads((out / "compare.json").read_text())["energy_warnings"] == [warning]


def test_two_estimates_from_one_table_say_the_ratio_is_the_models(
        two_bundles: tuple[Path, Path], tmp_path: Path) -> None:
    base, other = two_bundles
    value = measured_per_watt(base)
    estimated(base, "x86", "cascade-lake", tmp_path, value)
    estimated(other, "arm", "altra-max", tmp_path, 2.3 * value)
    comparison = compare([base, other])
    assert isinstance(comparison, Comparison)
    (warning,) = comparison.energy_warnings()
    assert "estimated from the same table" in warning
    assert "the ratio comes from the model as much as from the machines" in warning
    assert "Cascade Lake" in warning and "Ampere Altra Max" in warning
    assert "CPU utilisations of 50% and 50%" in warning
    assert comparison.per_watt_band(comparison.runs[1]) == (
        pytest.approx(2.3 * 0.8 / 1.3), pytest.approx(2.3 * 1.3 / 0.8))


def test_meters_covering_different_things_are_said(two_bundles: tuple[Path, Path]) -> None:
    base, other = two_bundles
    bundle = read_bundle(other)
    meter = bundle.manifest.energy_meter
    assert meter is not None
    rapl = meter.model_copy(update={"kind": "rapl", "name": "RAPL intel-rapl:0",
                                    "covers": Coverage.PACKAGE,
                                    "covers_text": "the CPU packages"})
    (other / "manifest.json").write_text(bundle.manifest.model_copy(update={
        "energy_meter": rapl}).model_dump_json())
    comparison = compare([base, other])
    assert isinstance(comparison, Comparison)
    (warning,) = comparison.energy_warnings()
    assert "cover different things" in warning and "the CPU packages" in warning
