"""Energy per operation of cache runs and scale probes: a --power-cmd of known watts, the
stated estimate (label and band) where there is no meter, or an explicit "unavailable"
when there is neither (never zeros)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.cache import CacheConfig, CacheProtocol, run_cache
from socialbench.workloads.cache.energy import format_joules
from socialbench.workloads.cache.scale import ScaleConfig, scale
from socialbench.workloads.cache.servers import Instance
from socialbench.workloads.probes.cpuid import CpuIdentity
from socialbench.workloads.probes.energy import EnergyOptions, EnergyPlan, System, plan_energy
from socialbench.workloads.reports.cache_report import build_cache_report
from socialbench.workloads.results.cache_runs import CacheBundleWriter, read_records
from tests.workloads.cache.conftest import start_fake

WATTS = 50.0
POWER_CMD = f"echo 'power: {WATTS} W'"
WINDOW_S = 2.5  # the power command is sampled each second: two samples or more


def no_meter(tmp_path: Path, family: str | None = None) -> System:
    """A machine with no meter at all, whose CPU is ``family`` (None: not identified)."""
    return System(powercap=tmp_path / "none", hwmon=tmp_path / "none", ipmi_devices=(),
                  identify=lambda: CpuIdentity(family=family, name=family or "unknown",
                                               threads=4))


def power_cmd(tmp_path: Path) -> EnergyPlan:
    return plan_energy(EnergyOptions(power_cmd=POWER_CMD), no_meter(tmp_path))


def test_power_command_gives_joules_per_operation(memcached: Instance, tmp_path: Path
                                                  ) -> None:
    plan = power_cmd(tmp_path)
    result = run_cache(CacheConfig(port=memcached.port, key_maximum=999, clients=2,
                                   test_time_s=WINDOW_S, warmup_s=0.3, key_prefix="energy-",
                                   seed=11), plan.meter())
    energy = result.energy
    assert energy is not None and energy.available and energy.source == "power-cmd"
    assert energy.watts == pytest.approx(WATTS)
    assert energy.joules == pytest.approx(WATTS * energy.seconds)
    # The meter covers the measured window (after the warm-up), not the prefill.
    assert abs(energy.seconds - WINDOW_S) < 0.5
    assert energy.ops == result.ops > 0
    assert energy.joules_per_op == pytest.approx(energy.joules / result.ops)
    assert energy.ops_per_s_per_watt == pytest.approx(result.ops / energy.joules)
    assert [format_joules(j) for j in (32.8e-3, 3.2e-6, 1.5, 1.2e-7)] == \
        ["32.8 mJ", "3.2 µJ", "1.5 J", "120 nJ"]

    writer = CacheBundleWriter(tmp_path, "energy", "cache-run", {}, energy=plan)
    writer.add("pipeline-1", result)
    report = build_cache_report(writer.directory).read_text()
    manifest, records, _ = read_records(writer.directory)
    assert "--power-cmd" in manifest.energy_source
    assert manifest.energy_meter is not None and manifest.energy_meter.kind == "power-cmd"
    assert manifest.energy_meter.sampling_period_s == 1.0
    assert records[0].energy == energy
    with (writer.directory / "runs.csv").open() as file:
        row = next(csv.DictReader(file))
    assert row["energy_source"] == "power-cmd"
    assert float(row["joules_per_op"]) == pytest.approx(energy.joules_per_op)
    assert format_joules(energy.joules_per_op) in report
    assert f"{energy.ops_per_s_per_watt:,.0f}" in report


def test_no_energy_source_is_said_not_zero(memcached: Instance, tmp_path: Path) -> None:
    plan = plan_energy(system=no_meter(tmp_path))  # no meter, and a CPU not identified
    result = run_cache(CacheConfig(port=memcached.port, key_maximum=99, clients=1,
                                   requests=110, key_prefix="no-energy-", seed=12), plan.meter())
    energy = result.energy
    assert energy is not None and not energy.available and energy.source == "unavailable"
    assert energy.joules is None and energy.joules_per_op is None
    assert energy.ops_per_s_per_watt is None and energy.watts is None
    assert energy.note.startswith("unavailable: no meter (no RAPL")
    assert "no estimate either: the CPU is not identified" in energy.note

    writer = CacheBundleWriter(tmp_path, "no-energy", "cache-run", {}, energy=plan)
    writer.add("pipeline-1", result)
    report = build_cache_report(writer.directory).read_text()
    with (writer.directory / "runs.csv").open() as file:
        row = next(csv.DictReader(file))
    assert row["joules_per_op"] == row["ops_per_s_per_watt"] == "unavailable"
    assert "Energy unavailable: no meter (no RAPL" in report
    raw = json.loads((writer.directory / "runs.json").read_text())[0]["energy"]
    assert raw["available"] is False and raw["joules_per_op"] is None


def test_every_scale_probe_is_metered(tmp_path: Path) -> None:
    run = CacheConfig(protocol=CacheProtocol.REDIS, clients=1, key_maximum=99, seed=1)
    config = ScaleConfig(server="fake", max_instances=2, run=run, step_s=1.5,
                         sla_p99_ms=50.0, min_gain=-1)
    plan = power_cmd(tmp_path)
    writer = CacheBundleWriter(tmp_path, "scale-energy", "cache-scale", {}, energy=plan)
    outcome = scale(config, lambda _: start_fake(), on_level=writer.add_level,
                    meter=plan.meter)
    writer.write_scale(outcome)
    report = build_cache_report(writer.directory).read_text()
    probes = [probe for level in outcome.levels for probe in level.probes]
    assert [level.instances for level in outcome.levels] == [1, 2] and probes
    for probe in probes:
        energy = probe.energy
        assert energy is not None and energy.watts == pytest.approx(WATTS)
        # one meter over every instance: per operation of the aggregate
        ops = energy.ops
        assert energy.joules_per_op == pytest.approx(energy.joules / ops)  # type: ignore[operator]
        assert ops == pytest.approx(probe.aggregate_ops_per_s * config.step_s, rel=1e-9)
    _, _, read_back = read_records(writer.directory)
    assert read_back is not None
    assert read_back.levels[1].reported.energy == outcome.levels[1].reported.energy
    with (writer.directory / "scale.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [float(r["energy_watts"]) for r in rows] == pytest.approx([WATTS, WATTS])
    assert "Energy there:" in report and "J/op" in report


def test_cli_run_records_energy(memcached: Instance, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "cache", "run", "-p", str(memcached.port), "--key-maximum", "999", "-c", "2",
        "--test-time", str(WINDOW_S), "--power-cmd", POWER_CMD, "--results-dir",
        str(tmp_path), "--label", "cli-energy"])
    assert result.exit_code == 0, result.output
    assert "energy: " in result.output and "ops/s per W (power-cmd" in result.output
    bundle = next(tmp_path.glob("*-cache-cli-energy"))
    _, records, _ = read_records(bundle)
    assert records[0].energy is not None and records[0].energy.watts == pytest.approx(WATTS)


def test_the_estimate_is_labelled_with_its_band_wherever_shown(memcached: Instance,
                                                               tmp_path: Path) -> None:
    plan = plan_energy(system=no_meter(tmp_path, "cascade-lake"))
    result = run_cache(CacheConfig(port=memcached.port, key_maximum=999, clients=2,
                                   test_time_s=1.5, key_prefix="estimate-", seed=13),
                       plan.meter())
    energy = result.energy
    label = "estimated (CCF linear model, SPECpower coefficients for Cascade Lake)"
    assert energy is not None and energy.available and energy.estimated
    assert energy.source == "estimate" and energy.label == label
    assert energy.utilisation is not None and 0 <= energy.utilisation <= 1
    low, high = energy.ops_per_s_per_watt_low, energy.ops_per_s_per_watt_high
    assert low is not None and high is not None and energy.ops_per_s_per_watt is not None
    assert low < energy.ops_per_s_per_watt < high
    assert label in energy.describe() and energy.band_text() in energy.describe()

    writer = CacheBundleWriter(tmp_path, "estimate", "cache-run", {}, energy=plan)
    writer.add("pipeline-1", result)
    manifest, _, _ = read_records(writer.directory)
    assert manifest.energy_meter is not None and manifest.energy_meter.estimated
    assert manifest.energy_meter.coefficients is not None
    assert manifest.energy_meter.coefficients.key == "cascade-lake"
    with (writer.directory / "runs.csv").open() as file:
        row = next(csv.DictReader(file))
    assert row["energy_source"] == "estimate" and row["estimated"] == "True"
    assert float(row["ops_per_s_per_watt_low"]) == pytest.approx(low)
    report = build_cache_report(writer.directory).read_text()
    assert label in report and "band" in report
