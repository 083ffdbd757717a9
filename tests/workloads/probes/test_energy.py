from __future__ import annotations

from pathlib import Path

from socialbench.workloads.probes.energy import EnergyMeter


def make_domain(root: Path, name: str, energy_uj: int, max_uj: int = 1_000_000_000) -> Path:
    domain = root / name
    domain.mkdir()
    (domain / "energy_uj").write_text(f"{energy_uj}\n")
    (domain / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return domain


def test_rapl_energy_is_summed_over_packages_and_survives_a_wrap(tmp_path: Path) -> None:
    package0 = make_domain(tmp_path, "intel-rapl:0", 5_000_000)
    package1 = make_domain(tmp_path, "intel-rapl:1", 999_000_000)
    make_domain(package0, "intel-rapl:0:0", 1)  # a sub-domain: not counted twice
    with EnergyMeter(root=tmp_path) as meter:
        (package0 / "energy_uj").write_text("7000000\n")  # +2 J
        (package1 / "energy_uj").write_text("1000000\n")  # wrapped: +2 J
    assert meter.reading.source == "rapl"
    assert meter.reading.joules == 4.0


def test_power_command_is_sampled_and_integrated(tmp_path: Path) -> None:
    import time

    with EnergyMeter(power_cmd="echo 'power: 42.5 W'", root=tmp_path) as meter:
        time.sleep(2.3)
    assert meter.reading.source == "power-cmd"
    assert meter.reading.watts is not None and abs(meter.reading.watts - 42.5) < 1e-6


def test_no_source_says_why(tmp_path: Path) -> None:
    with EnergyMeter(root=tmp_path) as meter:
        pass
    assert meter.reading.source == "unavailable"
    assert meter.reading.joules is None
    assert "no RAPL" in meter.reading.detail
