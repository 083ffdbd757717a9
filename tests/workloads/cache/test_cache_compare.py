"""``socialbench compare`` on cache bundles: a measured bundle beside a copy with known
differences ("another machine"), for cache run and cache scale bundles."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.cache import CacheConfig, CacheProtocol
from socialbench.workloads.cache.scale import ScaleConfig, ScaleOutcome, scale
from socialbench.workloads.cache.servers import Instance
from socialbench.workloads.probes.cpuid import CpuIdentity
from socialbench.workloads.probes.energy import EnergyOptions, System, plan_energy
from socialbench.workloads.reports.cache_compare import COMPARE_PLOT, CacheComparison
from socialbench.workloads.reports.cache_report import build_cache_report
from socialbench.workloads.reports.compare import compare
from socialbench.workloads.results.cache_runs import CacheBundleWriter, CacheManifest, RunRecord
from socialbench.workloads.results.files import BundleError
from tests.workloads.cache.conftest import start_fake

FASTER, P99, CORE, ENERGY = 1.2, 0.5, 1.25, 0.9


def _relabel(directory: Path, label: str) -> None:
    path = directory / "manifest.json"
    manifest = CacheManifest.model_validate_json(path.read_bytes())
    path.write_text(manifest.model_copy(update={"label": label}).model_dump_json())


@pytest.fixture(scope="module")
def run_bundle(memcached: Instance, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `cache run` bundle: memcached at pipeline 1 and 4, energy from a power command."""
    results = tmp_path_factory.mktemp("cache-runs")
    result = CliRunner().invoke(app, [
        "cache", "run", "-p", str(memcached.port), "--key-maximum", "999", "-c", "2",
        "--pipeline", "1", "--pipeline", "4", "--test-time", "1.5", "--power-cmd", "echo 50",
        "--seed", "21", "--results-dir", str(results),
        "--label", "memcached"])
    assert result.exit_code == 0, result.output
    return next(results.glob("*-cache-memcached"))


@pytest.fixture
def two_run_bundles(run_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The measured bundle and a copy 1.2x the ops/s, half the p99s, 1.25x the ops per
    generator core and 0.9x the energy per operation, at every depth."""
    base, other = tmp_path / "base", tmp_path / "other"
    shutil.copytree(run_bundle, base)
    shutil.copytree(run_bundle, other)
    adapter = TypeAdapter(list[RunRecord])
    records = adapter.validate_json((other / "runs.json").read_bytes())
    changed = []
    for record in records:
        energy = record.energy
        assert energy is not None and energy.joules_per_op and energy.ops_per_s_per_watt
        changed.append(record.model_copy(update={
            "ops_per_s": record.ops_per_s * FASTER, "sets_per_s": record.sets_per_s * FASTER,
            "gets_per_s": record.gets_per_s * FASTER,
            "latency_ms": {op: values | {"99": values["99"] * P99}
                           for op, values in record.latency_ms.items()},
            "generator_cpu_s": record.generator_cpu_s / CORE,
            "energy": energy.model_copy(update={
                "joules_per_op": energy.joules_per_op * ENERGY,
                "ops_per_s_per_watt": energy.ops_per_s_per_watt / ENERGY}),
        }))
    (other / "runs.json").write_bytes(adapter.dump_json(changed))
    _relabel(other, "faster")
    return base, other


def test_run_bundles_ratios_are_run_over_baseline(two_run_bundles: tuple[Path, Path]) -> None:
    comparison = compare(two_run_bundles)
    assert isinstance(comparison, CacheComparison) and comparison.kind == "cache-run"
    base, other = comparison.runs
    assert comparison.common_cases == [1, 4] and base.headline_case == other.headline_case
    for depth in (1, 4):
        assert comparison.case_ratio(other, "ops_per_s", depth) == pytest.approx(FASTER)
        for key in ("get_p99_ms", "set_p99_ms", "all_p99_ms"):
            assert comparison.case_ratio(other, key, depth) == pytest.approx(P99)
        assert comparison.case_ratio(other, "ops_per_generator_core", depth) == \
            pytest.approx(CORE)
        assert comparison.case_ratio(other, "joules_per_op", depth) == pytest.approx(ENERGY)
        assert comparison.case_ratio(other, "ops_per_s_per_watt", depth) == \
            pytest.approx(1 / ENERGY)
    assert "memcached" in base.server and "(memcache_text)" in base.server
    depth = base.headline_case
    assert comparison.sentence(other) == (
        f"faster vs memcached: 20% more ops/s at the peak (pipeline {depth} vs {depth}), "
        "p99 50% lower, 25% more ops/s per generator core, energy per op 10% lower, "
        "11% more ops/s per watt")


def test_compare_command_on_run_bundles(two_run_bundles: tuple[Path, Path], tmp_path: Path
                                        ) -> None:
    out = tmp_path / "comparison"
    result = CliRunner().invoke(app, ["compare", *map(str, two_run_bundles), "--out", str(out)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for text in ("1.20x (+20%)", "0.50x (-50%)", "1.25x (+25%)", "0.90x (-10%)",
                 "1.11x (+11%)", "faster vs memcached: 20% more ops/s at the peak",
                 "--power-cmd 'echo 50'"):
        assert text in result.output, text
    # per depth: ops/s, 3 p99s, core, energy, per watt; + the headline's 5
    assert result.output.count("0.50x (-50%)") == 2 * 3 + 1
    page = (out / "compare.html").read_text()
    assert "1.20x (+20%)" in page and "0.90x (-10%)" in page and "cache-run bundles" in page
    image = base64.b64encode((out / COMPARE_PLOT).read_bytes()).decode()
    assert f"base64,{image}" in page
    numbers = json.loads((out / "compare.json").read_text())
    assert numbers["kind"] == "cache-run" and numbers["common_cases"] == [1, 4]
    assert numbers["runs"][1]["cases"]["4"]["ratios"]["ops_per_s"] == pytest.approx(FASTER)
    assert numbers["runs"][1]["headline_ratios"]["joules_per_op"] == pytest.approx(ENERGY)


@pytest.fixture(scope="module")
def scale_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `cache scale` bundle against two fake servers that both hold the SLA."""
    run = CacheConfig(protocol=CacheProtocol.REDIS, clients=1, key_maximum=99, seed=1)
    config = ScaleConfig(server="fake", max_instances=2, run=run, step_s=0.5,
                         sla_p99_ms=50.0, min_gain=-1)
    writer = CacheBundleWriter(tmp_path_factory.mktemp("cache-scale"), "scale", "cache-scale",
                               config.model_dump(mode="json"))
    outcome = scale(config, lambda _: start_fake(), on_level=writer.add_level)
    writer.write_scale(outcome)
    build_cache_report(writer.directory)
    return writer.directory


def test_scale_bundles_compare_aggregates_by_instance_count(scale_bundle: Path,
                                                            tmp_path: Path) -> None:
    base, other = tmp_path / "base", tmp_path / "other"
    shutil.copytree(scale_bundle, base)
    shutil.copytree(scale_bundle, other)
    outcome = ScaleOutcome.model_validate_json((other / "scale.json").read_bytes())
    levels = [level.model_copy(update={
        "held": level.held.model_copy(update={
            "aggregate_ops_per_s": level.held.aggregate_ops_per_s * 2}) if level.held else None,
    }) for level in outcome.levels]
    (other / "scale.json").write_text(outcome.model_copy(update={"levels": levels})
                                      .model_dump_json())
    _relabel(other, "double")

    comparison = compare([base, other])
    assert isinstance(comparison, CacheComparison) and comparison.scale
    assert comparison.common_cases == [1, 2]
    run = comparison.runs[1]
    assert [comparison.case_ratio(run, "ops_per_s", n) for n in (1, 2)] == \
        pytest.approx([2.0, 2.0])
    assert comparison.case_ratio(run, "ops_per_generator_core", 2) == pytest.approx(1.0)
    assert comparison.sentence(run).startswith(
        "double vs scale: 100% more ops/s with the SLA held (2 vs 2 instances)")
    out = tmp_path / "comparison"
    result = CliRunner().invoke(app, ["compare", str(base), str(other), "--out", str(out)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "2.00x (+100%)" in result.output and "best aggregate ops/s at the SLA" in \
        result.output
    assert (out / "aggregate-vs-instances.png").exists()


def test_run_and_scale_bundles_are_not_compared(run_bundle: Path, scale_bundle: Path) -> None:
    with pytest.raises(BundleError, match="cannot compare a cache-run bundle"):
        compare([run_bundle, scale_bundle])
    result = CliRunner().invoke(app, ["compare", str(scale_bundle), str(run_bundle)])
    assert result.exit_code == 2
    assert "cannot compare a cache-scale bundle" in result.output


def test_an_estimated_bundle_is_marked_and_its_ratio_warned(two_run_bundles: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    base, other = two_run_bundles
    plan = plan_energy(EnergyOptions(cpu_family="graviton2"), System(
        powercap=tmp_path / "none", hwmon=tmp_path / "none", ipmi_devices=(),
        identify=lambda: CpuIdentity(family=None, name="unknown", threads=4)))
    adapter = TypeAdapter(list[RunRecord])
    records = adapter.validate_json((other / "runs.json").read_bytes())
    guessed = []
    for record in records:
        energy = record.energy
        assert energy is not None and energy.ops_per_s_per_watt
        guessed.append(record.model_copy(update={"energy": energy.model_copy(update={
            "estimated": True, "label": plan.record.label, "source": "estimate",
            "ops_per_s_per_watt_low": energy.ops_per_s_per_watt * 0.5,
            "ops_per_s_per_watt_high": energy.ops_per_s_per_watt * 2})}))
    (other / "runs.json").write_bytes(adapter.dump_json(guessed))
    path = other / "manifest.json"
    manifest = CacheManifest.model_validate_json(path.read_bytes())
    path.write_text(manifest.model_copy(update={"energy_meter": plan.record}).model_dump_json())

    comparison = compare([base, other])
    assert isinstance(comparison, CacheComparison)
    (warning,) = comparison.energy_warnings()
    assert "sets an estimate against a measurement" in warning
    assert "EPYC 2nd Gen (Rome) as a proxy for AWS Graviton2" in warning
    assert "from 0.56x to 2.22x" in warning  # (1/0.9) x 0.5 and x 2
    assert any("(estimated)" in cell for cell in comparison.headline_rows()[1])
    assert not any("(estimated)" in cell for cell in comparison.headline_rows()[0])
    page = comparison.render(tmp_path / "out").read_text()
    assert "sets an estimate against a measurement" in page and "seed-figures.png" in page
