"""What a result records of the driver's machine: its architecture, and emulation."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from socialbench.workloads.driver.result import HostInfo, emulated
from socialbench.workloads.probes.machine import hardware

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU architecture: 8
"""


@pytest.mark.parametrize(("machine", "cpuinfo", "expected"), [
    ("x86_64", X86_CPUINFO, False),
    ("aarch64", ARM_CPUINFO, False),
    ("aarch64", X86_CPUINFO, True),  # an arm64 container under QEMU on an amd64 host
    ("x86_64", ARM_CPUINFO, True),   # the other way round
    ("aarch64", "", None),           # /proc/cpuinfo unreadable
    ("riscv64", X86_CPUINFO, None),  # a machine we do not classify
])
def test_emulation_is_a_machine_unlike_the_kernels_cpus(machine: str, cpuinfo: str,
                                                        expected: bool | None) -> None:
    assert emulated(machine, cpuinfo) is expected


def test_this_driver_records_its_own_architecture_not_emulated() -> None:
    host = HostInfo.now()
    assert host.architecture == platform.machine() != ""
    # The tests run natively: the kernel's CPUs are the machine's own kind.
    assert host.emulated is emulated(platform.machine(), Path("/proc/cpuinfo").read_text())
    assert host.emulated is False
    assert hardware()["emulated"] is False and hardware()["architecture"] == host.architecture
