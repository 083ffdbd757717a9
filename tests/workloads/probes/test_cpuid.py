"""The CPU identified from real /proc/cpuinfo and lscpu texts (fixtures/cpus/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from socialbench.workloads.probes.coefficients import load_table
from socialbench.workloads.probes.cpuid import identify

CPUS = Path(__file__).parent / "fixtures" / "cpus"


def text(name: str) -> str:
    return (CPUS / name).read_text()


@pytest.mark.parametrize(("name", "family", "certain"), [
    # Arm: the MIDR, then the firmware's name, the DMI vendor or the cores per socket.
    ("altra-q80-30.lscpu", "altra", True),  # BIOS model name "...Altra(R) Processor Q80-30"
    ("altra-max.lscpu", "altra-max", True),  # BIOS model name "...Altra(R) Max Processor"
    ("altra-azure-64.lscpu", None, True),  # N1, 64 cores, no firmware name: not told apart
    ("graviton2.cpuinfo", None, True),  # 0x41/0xd0c alone: Altra, Altra Max or Graviton2
    ("graviton2.lscpu", "graviton2", True),  # BIOS vendor AWS
    ("graviton2-bios.lscpu", "graviton2", True),  # BIOS model name "AWS Graviton2"
    ("graviton3.cpuinfo", None, True),  # 0xd40 without AWS's name: not confirmed
    ("grace-gh200.lscpu", "neoverse-v2", True),  # V2, 72 cores: Grace, Axion or Graviton4
    ("axion-v2.cpuinfo", "neoverse-v2", True),
    ("yitian-710.cpuinfo", "neoverse-n2", True),  # N2 without the DMI vendor
    ("ampereone-ac04.cpuinfo", "ampereone", True),  # implementer 0xc0
    # x86: vendor, family, model, stepping (a hypervisor's CPU: not certain).
    ("cascade-lake-aws-8259cl.lscpu", "cascade-lake", False),
    ("ice-lake-aws-8375c.lscpu", "ice-lake", False),
    ("sapphire-rapids-aws-8488c.cpuinfo", "sapphire-rapids", False),
    ("sapphire-rapids-gcp-8481c.lscpu", "sapphire-rapids", False),
    ("epyc-rome-azure-7v12.lscpu", "epyc-2", False),
    ("epyc-milan-azure-7v73x.lscpu", "epyc-3", False),
    ("epyc-genoa-9654.cpuinfo", "epyc-4", True),  # bare metal: no hypervisor flag
])
def test_every_fixture_is_identified_as_far_as_its_text_tells(name: str, family: str | None,
                                                              certain: bool) -> None:
    given = text(name)
    cpu = identify(cpuinfo=given) if name.endswith(".cpuinfo") else identify(lscpu=given)
    assert cpu.family == family, cpu
    assert family is None or family in load_table()  # every family named has a row
    assert cpu.certain is certain
    assert cpu.evidence
    if family is None:
        assert "not" in cpu.name  # it says it cannot tell


def test_the_dmi_vendor_names_the_chip_when_the_core_cannot() -> None:
    # /sys/class/dmi/id/sys_vendor of an EC2 instance is "Amazon EC2" (the vendor lscpu
    # shows as BIOS Vendor ID in graviton2-bios.lscpu).
    graviton3 = identify(cpuinfo=text("graviton3.cpuinfo"), dmi={"sys_vendor": "Amazon EC2"})
    assert graviton3.family == "graviton3"
    graviton4 = identify(cpuinfo=text("axion-v2.cpuinfo"),
                         dmi={"sys_vendor": "Amazon EC2", "product_name": "c8g.large"})
    assert graviton4.family == "graviton4"
    assert identify(cpuinfo=text("axion-v2.cpuinfo"),
                    dmi={"sys_vendor": "Google"}).family == "axion"
    assert identify(cpuinfo=text("yitian-710.cpuinfo"),
                    dmi={"sys_vendor": "Alibaba Cloud"}).family == "yitian-710"
    assert identify(lscpu=text("grace-gh200.lscpu"),
                    dmi={"sys_vendor": "NVIDIA"}).family == "grace"


def test_the_core_count_tells_altra_from_altra_max_and_graviton2() -> None:
    altra = text("altra-azure-64.lscpu")
    max_ = identify(lscpu=altra.replace("Core(s) per socket:              64",
                                        "Core(s) per socket:              128"))
    assert max_.family == "altra-max" and not max_.certain
    assert any("128 cores per socket" in line for line in max_.evidence)
    eighty = identify(lscpu=altra.replace("Core(s) per socket:              64",
                                          "Core(s) per socket:              80"))
    assert eighty.family == "altra" and not eighty.certain
    assert identify(lscpu=altra).family is None  # 64: Graviton2 has 64 too


def test_x86_edges() -> None:
    cascade = text("cascade-lake-aws-8259cl.lscpu")
    skylake = identify(lscpu=cascade.replace("Stepping:            7", "Stepping:            4"))
    assert skylake.family == "skylake-sp"
    cooper = identify(lscpu=cascade.replace("Stepping:            7", "Stepping:            11"))
    assert cooper.family is None and "Cooper Lake" in cooper.name
    rome = text("epyc-rome-azure-7v12.lscpu")
    ryzen = identify(lscpu=rome.replace("AMD EPYC 7V12 64-Core Processor",
                                        "AMD Ryzen 9 3950X 16-Core Processor"))
    assert ryzen.family is None and "not an EPYC" in ryzen.name
    virtual = identify(lscpu=rome)
    assert virtual.virtual and "hypervisor" in virtual.caveat
    assert virtual.threads == 120 and virtual.sockets == 2


def test_nothing_to_go_on_is_said() -> None:
    cpu = identify()
    assert cpu.family is None and cpu.name.startswith("not identified")
