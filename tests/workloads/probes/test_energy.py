"""Energy meters on fake sysfs trees laid out as each real driver lays them out, DCMI on
recorded outputs, and the stated estimate (with its band) where there is no meter."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from socialbench.workloads.probes.cpuid import CpuIdentity
from socialbench.workloads.probes.energy import (
    EnergyError,
    EnergyOptions,
    MeterChoice,
    System,
    model_watts,
    plan_energy,
)
from socialbench.workloads.probes.meters import Coverage, hwmon_sources, parse_dcmi

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE_S = 0.2


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{text}\n")
    return path


def identity(family: str | None, name: str = "a CPU", threads: int = 64) -> CpuIdentity:
    return CpuIdentity(family=family, name=name, threads=threads)


def system(tmp_path: Path, **changes: object) -> System:
    """Nothing found anywhere (an empty tree, no IPMI device) unless ``changes`` say."""
    fields: dict[str, object] = {
        "powercap": tmp_path / "powercap", "hwmon": tmp_path / "hwmon",
        "ipmi_devices": (tmp_path / "ipmi0",), "run_dcmi": lambda argv: "",
        "which": lambda name: None, "identify": lambda: identity(None, "not identified"),
        "threads": 2, "proc_stat": str(tmp_path / "stat"), "sample_s": SAMPLE_S,
    }
    fields.update(changes)
    return System(**fields)  # type: ignore[arg-type]


def make_domain(root: Path, name: str, energy_uj: int, max_uj: int = 1_000_000_000) -> Path:
    domain = root / name
    write(domain / "energy_uj", str(energy_uj))
    write(domain / "max_energy_range_uj", str(max_uj))
    return domain


def test_rapl_energy_is_summed_over_packages_and_survives_a_wrap(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    package0 = make_domain(root, "intel-rapl:0", 5_000_000)
    package1 = make_domain(root, "intel-rapl:1", 999_000_000)
    make_domain(package0, "intel-rapl:0:0", 1)  # a sub-domain: not counted twice
    plan = plan_energy(system=system(tmp_path))
    assert plan.record.kind == "rapl" and plan.record.covers is Coverage.PACKAGE
    assert plan.record.sampling_period_s is None  # counters, read at both ends
    with plan.meter() as meter:
        (package0 / "energy_uj").write_text("7000000\n")  # +2 J
        (package1 / "energy_uj").write_text("1000000\n")  # wrapped: +2 J
    assert meter.reading.source == "rapl"
    assert meter.reading.joules == pytest.approx(4.0)
    assert not meter.reading.estimated


def test_power_command_overrides_every_meter(tmp_path: Path) -> None:
    make_domain(tmp_path / "powercap", "intel-rapl:0", 1)
    plan = plan_energy(EnergyOptions(power_cmd="echo 'power: 42.5 W'"), system(tmp_path))
    assert plan.record.kind == "power-cmd" and plan.record.covers is Coverage.UNSTATED
    with plan.meter() as meter:
        time.sleep(3 * SAMPLE_S)
    assert meter.reading.source == "power-cmd"
    assert meter.reading.watts == pytest.approx(42.5)


def xgene(root: Path, cpu_uw: int, io_uw: int) -> Path:
    """xgene-hwmon (drivers/hwmon/xgene-hwmon.c): name apm_xgene, power1 "CPU power",
    power2 "IO power" in µW, temp1 "SoC Temperature"."""
    hwmon = root / "hwmon0"
    write(hwmon / "name", "apm_xgene")
    write(hwmon / "temp1_label", "SoC Temperature")
    write(hwmon / "temp1_input", "45000")
    write(hwmon / "power1_label", "CPU power")
    write(hwmon / "power1_input", str(cpu_uw))
    write(hwmon / "power2_label", "IO power")
    write(hwmon / "power2_input", str(io_uw))
    return hwmon


def test_xgene_hwmon_sums_cpu_and_io_power_of_the_soc(tmp_path: Path) -> None:
    xgene(tmp_path / "hwmon", 80_000_000, 25_500_000)
    plan = plan_energy(system=system(tmp_path))
    record = plan.record
    assert record.kind == "hwmon" and record.covers is Coverage.SOC
    assert "CPU power + IO power" in record.name and record.sampling_period_s == SAMPLE_S
    with plan.meter() as meter:
        time.sleep(2.5 * SAMPLE_S)
    assert meter.reading.watts == pytest.approx(105.5)


def test_smpro_hwmon_counts_the_soc_rails_not_the_dimms(tmp_path: Path) -> None:
    # smpro-hwmon.c: name smpro_hwmon, labels "power1 CORE VRD" ... "power5 RCA VRD" (µW).
    hwmon = tmp_path / "hwmon" / "hwmon3"
    write(hwmon / "name", "smpro_hwmon")
    for number, label, microwatts in ((1, "power1 CORE VRD", 120_000_000),
                                      (2, "power2 SoC", 30_000_000),
                                      (3, "power3 DIMM VRD1", 9_000_000),
                                      (4, "power4 DIMM VRD2", 9_000_000),
                                      (5, "power5 RCA VRD", 5_000_000)):
        write(hwmon / f"power{number}_label", label)
        write(hwmon / f"power{number}_input", str(microwatts))
    (source,), _ = hwmon_sources(tmp_path / "hwmon")
    assert source.covers is Coverage.SOC
    assert sum(p.read() for p in source.powers) == pytest.approx(155.0)
    assert "DIMM" not in source.name


@pytest.mark.parametrize("under_device", [True, False])
def test_acpi_power_meter_is_the_whole_system_with_its_interval(tmp_path: Path,
                                                                under_device: bool) -> None:
    # acpi_power_meter: power1_average (µW) and power1_average_interval (ms), on the ACPI
    # device (hwmonN/device/, older kernels) or on the hwmon device itself.
    hwmon = tmp_path / "hwmon" / "hwmon1"
    write(hwmon / "name", "power_meter")
    attributes = hwmon / "device" if under_device else hwmon
    write(attributes / "power1_average", "231000000")
    write(attributes / "power1_average_interval", "1000")
    write(attributes / "power1_is_battery", "0")
    plan = plan_energy(system=system(tmp_path))
    assert plan.record.covers is Coverage.SYSTEM and plan.record.meter_period_s == 1.0
    with plan.meter() as meter:
        time.sleep(1.5 * SAMPLE_S)
    assert meter.reading.watts == pytest.approx(231.0)


def test_amd_energy_sums_the_socket_counters_not_the_cores(tmp_path: Path) -> None:
    # amd_energy: energyN_input (µJ), labels Ecore000.. then Esocket0..
    hwmon = tmp_path / "hwmon" / "hwmon2"
    write(hwmon / "name", "amd_energy")
    labels = ["Ecore000", "Ecore001", "Esocket0", "Esocket1"]
    for number, label in enumerate(labels, start=1):
        write(hwmon / f"energy{number}_label", label)
        write(hwmon / f"energy{number}_input", "1000000")
    plan = plan_energy(system=system(tmp_path))
    assert plan.record.covers is Coverage.PACKAGE and plan.record.sampling_period_s is None
    with plan.meter() as meter:
        write(hwmon / "energy1_input", "9000000")  # a core: part of its socket's count
        write(hwmon / "energy3_input", "3000000")  # +2 J
        write(hwmon / "energy4_input", "4000000")  # +3 J
    assert meter.reading.joules == pytest.approx(5.0)


def test_a_driver_of_unknown_coverage_is_listed_not_used(tmp_path: Path) -> None:
    hwmon = tmp_path / "hwmon" / "hwmon0"
    write(hwmon / "name", "amdgpu")
    write(hwmon / "power1_average", "35000000")
    write(tmp_path / "stat", "cpu  100 0 100 800 0 0 0 0 0 0")
    plan = plan_energy(system=system(tmp_path, identify=lambda: identity("cascade-lake")))
    assert plan.record.kind == "estimate"
    assert any("amdgpu" in line and "not used" in line for line in plan.record.others)


@pytest.mark.parametrize(("name", "watts", "period_s"), [
    ("ipmitool-activated.txt", 215, 1131466),
    ("ipmitool-unindented.txt", 167, 699043),
    ("ipmitool-deactivated-zero.txt", None, None),  # a 0 W deactivated reading is none
    ("ipmitool-openbmc-deactivated.txt", 360, None),
    ("ipmitool-supermicro-run-on.txt", 109, 65530),
    ("freeipmi.txt", 332, 2685198),
])
def test_dcmi_readings_are_parsed_from_recorded_outputs(name: str, watts: float | None,
                                                        period_s: float | None) -> None:
    reading = parse_dcmi((FIXTURES / "dcmi" / name).read_text())
    assert reading.watts == watts
    assert reading.period_s == period_s


def test_dcmi_is_the_whole_system_polled(tmp_path: Path) -> None:
    device = write(tmp_path / "ipmi0", "")
    recorded = (FIXTURES / "dcmi" / "ipmitool-activated.txt").read_text()
    asked: list[list[str]] = []

    def run(argv: list[str]) -> str:
        asked.append(argv)
        return recorded

    plan = plan_energy(system=system(tmp_path, ipmi_devices=(device,), run_dcmi=run,
                                     which=lambda name: f"/usr/bin/{name}"))
    assert plan.record.kind == "dcmi" and plan.record.covers is Coverage.SYSTEM
    with plan.meter() as meter:
        time.sleep(1.5 * SAMPLE_S)
    assert meter.reading.watts == pytest.approx(215)
    assert asked[0] == ["ipmitool", "dcmi", "power", "reading"]


def test_a_deactivated_bmc_is_no_meter(tmp_path: Path) -> None:
    device = write(tmp_path / "ipmi0", "")
    zero = (FIXTURES / "dcmi" / "ipmitool-deactivated-zero.txt").read_text()
    with pytest.raises(EnergyError, match="deactivated"):
        plan_energy(EnergyOptions(meter=MeterChoice.DCMI),
                    system(tmp_path, ipmi_devices=(device,), run_dcmi=lambda argv: zero,
                           which=lambda name: name))


def stat_line(busy: int, idle: int, steal: int = 0) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return f"cpu  {busy} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 {busy} 0 0 {idle} 0 0 0 0 0 0\n"


def test_the_estimate_uses_the_utilisation_measured_over_the_interval(tmp_path: Path) -> None:
    stat = write(tmp_path / "stat", stat_line(1000, 9000))
    plan = plan_energy(system=system(tmp_path, identify=lambda: identity("cascade-lake",
                                                                         threads=96)))
    record = plan.record
    assert record.kind == "estimate" and record.estimated
    assert record.label == ("estimated (CCF linear model, SPECpower coefficients for "
                            "Cascade Lake)")
    assert record.coefficients is not None and record.coefficients.key == "cascade-lake"
    assert record.threads == 96 and "no RAPL" in record.why
    with plan.meter() as meter:
        stat.write_text(stat_line(1000 + 300, 9000 + 100, steal=100))  # busy 300 of 500
    reading = meter.reading
    assert reading.estimated and reading.label == record.label
    assert reading.utilisation == pytest.approx(0.6)
    coefficients = record.coefficients
    watts = 96 * (coefficients.min_w + 0.6 * (coefficients.max_w - coefficients.min_w))
    assert reading.watts == pytest.approx(watts)
    assert coefficients.idle_lo is not None and coefficients.full_lo is not None
    assert coefficients.idle_hi is not None and coefficients.full_hi is not None
    low = model_watts(96, coefficients.idle_lo, coefficients.full_lo, 0.6)
    high = model_watts(96, coefficients.idle_hi, coefficients.full_hi, 0.6)
    assert reading.joules_low == pytest.approx(low * reading.seconds)
    assert reading.joules_high == pytest.approx(high * reading.seconds)
    assert reading.joules_low < reading.joules < reading.joules_high


def test_a_proxy_says_whose_coefficients_it_takes(tmp_path: Path) -> None:
    write(tmp_path / "stat", stat_line(0, 100))
    plan = plan_energy(system=system(tmp_path, identify=lambda: identity("graviton3")))
    assert plan.record.label == ("estimated (CCF linear model, SPECpower coefficients for "
                                 "EPYC 2nd Gen (Rome) as a proxy for AWS Graviton3)")
    assert plan.record.coefficients is not None
    assert plan.record.coefficients.kind == "proxy"
    assert plan.record.coefficients.uses == "epyc-2"


@pytest.mark.parametrize("family", ["yitian-710", "ampereone", "neoverse-v2", "sierra-forest"])
def test_unknown_in_the_table_is_no_estimate(tmp_path: Path, family: str) -> None:
    write(tmp_path / "stat", stat_line(0, 100))
    plan = plan_energy(system=system(tmp_path, identify=lambda: identity(family)))
    assert plan.record.kind == "unavailable" and "no coefficients" in plan.record.why
    with plan.meter() as meter:
        pass
    assert meter.reading.joules is None and meter.reading.source == "unavailable"


def test_an_unidentified_cpu_is_no_estimate_and_says_how_to_give_one(tmp_path: Path) -> None:
    plan = plan_energy(system=system(tmp_path))
    assert plan.record.kind == "unavailable"
    assert "not identified" in plan.record.why and "--cpu-family" in plan.record.why


def test_cpu_family_states_what_linux_does_not_tell(tmp_path: Path) -> None:
    write(tmp_path / "stat", stat_line(0, 100))
    plan = plan_energy(EnergyOptions(cpu_family="altra-max"), system(tmp_path))
    assert plan.record.kind == "estimate" and plan.record.cpu_stated
    assert "Ampere Altra Max" in plan.record.label
    with pytest.raises(EnergyError, match="not in the coefficients table"):
        plan_energy(EnergyOptions(cpu_family="pentium-4"), system(tmp_path))


def test_a_users_coefficients_replace_the_tables(tmp_path: Path) -> None:
    write(tmp_path / "stat", stat_line(0, 100))
    own = write(tmp_path / "mine.csv", "key,name,min_w,max_w,source\n"
                "cascade-lake,Cascade Lake (our lab),1.0,5.0,our wall meter 2026-11\n")
    plan = plan_energy(EnergyOptions(coefficients=own),
                       system(tmp_path, identify=lambda: identity("cascade-lake")))
    coefficients = plan.record.coefficients
    assert coefficients is not None and coefficients.origin == str(own)
    assert (coefficients.min_w, coefficients.max_w, coefficients.idle_lo) == (1.0, 5.0, None)
    assert plan.record.label == ("estimated (CCF linear model, coefficients for Cascade Lake "
                                 f"(our lab) from {own})")
    bad = write(tmp_path / "bad.csv", "key,name,min_w,max_w,source\nx,X,2,1,here\n")
    with pytest.raises(EnergyError, match="below min_w"):
        plan_energy(EnergyOptions(coefficients=bad), system(tmp_path))


def test_a_meter_asked_for_and_not_there_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EnergyError, match="--power-meter rapl: no RAPL"):
        plan_energy(EnergyOptions(meter=MeterChoice.RAPL), system(tmp_path))
    write(tmp_path / "stat", stat_line(0, 100))
    make_domain(tmp_path / "powercap", "intel-rapl:0", 1)
    forced = plan_energy(EnergyOptions(meter=MeterChoice.ESTIMATE),
                         system(tmp_path, identify=lambda: identity("ice-lake")))
    assert forced.record.kind == "estimate" and forced.record.why == ""
