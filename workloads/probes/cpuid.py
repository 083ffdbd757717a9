"""Which CPU this is, from what Linux shows: the family of the coefficients table it is.

On x86, the vendor, family, model and stepping of ``/proc/cpuinfo`` (or ``lscpu``) name
the microarchitecture (Cascade Lake is Intel family 6 model 85 stepping 5-7; EPYC 2nd
Gen is AMD family 23 model 49...). On Arm, the MIDR does (CPU implementer and part:
0x41/0xd0c is Neoverse N1), but a core is in several chips: Ampere Altra and Altra Max
and AWS Graviton2 all have N1 cores. The chip then comes from lscpu's BIOS model name
(SMBIOS, when lscpu may read it), the DMI vendor (``/sys/class/dmi/id``: "Amazon EC2",
"Alibaba Cloud"...), or the cores per socket where the count alone decides (Altra has
up to 80, Altra Max 96 to 128, Graviton2 64). When none of it decides, the identity
says so and names no family: no coefficients are used. Entry points: :func:`identify`
(pure: the texts in, the identity out) and :func:`this_machine`.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from socialbench.workloads.probes.records import Strict

DMI = Path("/sys/class/dmi/id")
DMI_FIELDS = ("sys_vendor", "product_name", "board_vendor", "board_name", "bios_vendor")
ALTRA_MAX_CORES = 80  # Altra: up to 80 cores; Altra Max: 96 to 128
GRAVITON2_CORES = 64

# lscpu's names of Arm cores (util-linux sys-utils/lscpu-arm.c) to their MIDR part.
LSCPU_ARM_PARTS = {"Neoverse-N1": "0xd0c", "Neoverse-V1": "0xd40", "Neoverse-N2": "0xd49",
                   "Neoverse-V2": "0xd4f"}
ARM_CORES = {"0xd0c": "Neoverse N1", "0xd40": "Neoverse V1", "0xd49": "Neoverse N2",
             "0xd4f": "Neoverse V2"}


class CpuIdentity(Strict):
    """The CPU as identified, how, and how surely; ``family`` keys the coefficients table
    (None: not identified, or a CPU the table does not have)."""

    family: str | None = Field(description="The coefficients table's key; None: no family.")
    name: str = Field(description="What the CPU is, as far as told.")
    core: str | None = Field(default=None, description="The microarchitecture of its cores.")
    evidence: list[str] = Field(default_factory=list, description="What told it.")
    certain: bool = Field(default=True, description="False: by elimination or core count.")
    caveat: str = Field(default="", description="What could make it wrong.")
    threads: int | None = Field(default=None, description="Hardware threads (logical CPUs).")
    cores_per_socket: int | None = None
    sockets: int | None = None
    virtual: bool = Field(default=False, description="A hypervisor's virtual CPU.")


@dataclass
class Facts:
    """What the texts say, parsed."""

    vendor: str = ""
    model_name: str = ""
    cpu_family: int | None = None
    model: int | None = None
    stepping: int | None = None
    implementer: str = ""
    part: str = ""
    bios_model: str = ""
    bios_vendor: str = ""
    hypervisor: str = ""
    threads: int | None = None
    cores_per_socket: int | None = None
    sockets: int | None = None
    dmi: dict[str, str] = field(default_factory=dict)


def _field(text: str, key: str) -> str:
    match = re.search(rf"^\s*{re.escape(key)}\s*:[ \t]*(.*?)\s*$", text, re.MULTILINE)
    return match.group(1) if match else ""


def _int(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse(cpuinfo: str = "", lscpu: str = "", dmi: dict[str, str] | None = None,
          threads: int | None = None) -> Facts:
    """The facts of a ``/proc/cpuinfo`` text, an ``lscpu`` text and the DMI fields."""
    facts = Facts(dmi={k: v for k, v in (dmi or {}).items() if v})
    facts.vendor = _field(cpuinfo, "vendor_id") or _field(lscpu, "Vendor ID")
    facts.model_name = _field(cpuinfo, "model name") or _field(lscpu, "Model name")
    facts.cpu_family = _int(_field(cpuinfo, "cpu family") or _field(lscpu, "CPU family"))
    if facts.vendor in ("GenuineIntel", "AuthenticAMD"):
        facts.model = _int(_field(cpuinfo, "model") or _field(lscpu, "Model"))
        facts.stepping = _int(_field(cpuinfo, "stepping") or _field(lscpu, "Stepping"))
    facts.implementer = _field(cpuinfo, "CPU implementer").lower()
    facts.part = _field(cpuinfo, "CPU part").lower()
    if not facts.part:  # lscpu names the core instead of giving the part
        name = _field(lscpu, "Model name")
        if name in LSCPU_ARM_PARTS:
            facts.implementer, facts.part = "0x41", LSCPU_ARM_PARTS[name]
        elif facts.vendor == "Ampere" or name.startswith("Ampere-1"):
            facts.implementer = "0xc0"
    facts.bios_model = _field(lscpu, "BIOS Model name")
    facts.bios_vendor = _field(lscpu, "BIOS Vendor ID")
    facts.hypervisor = _field(lscpu, "Hypervisor vendor")
    if not facts.hypervisor and re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.MULTILINE):
        facts.hypervisor = "a hypervisor (the cpuinfo flag)"
    facts.cores_per_socket = _int(_field(lscpu, "Core(s) per socket"))
    facts.sockets = _int(_field(lscpu, "Socket(s)"))
    processors = len(re.findall(r"^processor\s*:", cpuinfo, re.MULTILINE))
    facts.threads = threads or _int(_field(lscpu, "CPU(s)")) or processors or None
    return facts


def _vendor_text(facts: Facts) -> str:
    """Every vendor name the firmware and DMI gave, for matching."""
    return " ".join([facts.bios_vendor, facts.bios_model, *facts.dmi.values()])


def _x86(facts: Facts) -> tuple[str | None, str, str]:
    """(family key, name, core) of an x86 CPU from its vendor, family, model, stepping."""
    family, model, stepping = facts.cpu_family, facts.model, facts.stepping
    if facts.vendor == "GenuineIntel" and family == 6 and model is not None:
        if model == 85:
            if stepping is not None and stepping <= 4:
                return "skylake-sp", "Intel Xeon Skylake-SP", "Skylake"
            if stepping in (5, 6, 7):
                return "cascade-lake", "Intel Xeon Cascade Lake", "Cascade Lake"
            if stepping in (10, 11):
                return None, "Intel Xeon Cooper Lake (not in the table)", "Cooper Lake"
            return None, f"Intel family 6 model 85 stepping {stepping}: not told", "Skylake"
        by_model = {106: ("ice-lake", "Ice Lake"), 108: ("ice-lake", "Ice Lake"),
                    143: ("sapphire-rapids", "Sapphire Rapids"),
                    207: ("emerald-rapids", "Emerald Rapids"),
                    173: ("granite-rapids", "Granite Rapids"),
                    174: ("granite-rapids", "Granite Rapids"),
                    175: ("sierra-forest", "Sierra Forest"), 63: ("haswell", "Haswell"),
                    79: ("broadwell", "Broadwell"), 86: ("broadwell", "Broadwell")}
        if model in by_model:
            key, core = by_model[model]
            return key, f"Intel Xeon {core}", core
        return None, f"Intel family 6 model {model} (not in the table)", ""
    if facts.vendor == "AuthenticAMD" and model is not None:
        if "EPYC" not in facts.model_name:
            return None, f"{facts.model_name or 'AMD'} (not an EPYC: not in the table)", ""
        if family == 23 and model < 0x30:
            return "epyc-1", "AMD EPYC 1st Gen (Naples)", "Zen"
        if family == 23 and 0x30 <= model < 0x40:
            return "epyc-2", "AMD EPYC 2nd Gen (Rome)", "Zen 2"
        if family == 25 and model < 0x10:
            return "epyc-3", "AMD EPYC 3rd Gen (Milan)", "Zen 3"
        if family == 25 and (0x10 <= model < 0x20 or 0xA0 <= model < 0xB0):
            return "epyc-4", "AMD EPYC 4th Gen (Genoa, Bergamo or Siena)", "Zen 4"
        if family == 26:
            return "epyc-5", "AMD EPYC 5th Gen (Turin)", "Zen 5"
        return None, f"AMD family {family} model {model} (not in the table)", ""
    return None, f"{facts.vendor or 'x86'} family {family} model {model}: not in the table", ""


def _arm(facts: Facts) -> tuple[str | None, str, str, list[str], bool]:
    """(family key, name, core, evidence, certain) of an Arm CPU from its MIDR, the
    firmware's and DMI's names and its cores per socket."""
    names = _vendor_text(facts)
    evidence: list[str] = []
    amazon = re.search(r"\bAmazon\b|\bAWS\b", names)
    if facts.implementer == "0xc0":
        return "ampereone", "AmpereOne", "Ampere", evidence, True
    core = ARM_CORES.get(facts.part, "")
    if facts.implementer != "0x41" or not core:
        return None, (f"Arm implementer {facts.implementer or '?'} part {facts.part or '?'}: "
                      "not in the table"), core, evidence, True
    if facts.part == "0xd0c":
        if "Graviton2" in names or amazon:
            return "graviton2", "AWS Graviton2", core, evidence, True
        if re.search(r"Altra\(R\) Max|Altra Max|\bM\d{2,3}-\d{2}\b", facts.bios_model):
            return "altra-max", "Ampere Altra Max", core, evidence, True
        if "Altra" in facts.bios_model:
            return "altra", "Ampere Altra", core, evidence, True
        cores = facts.cores_per_socket
        if cores is not None and cores > ALTRA_MAX_CORES:
            evidence.append(f"{cores} cores per socket (Altra has up to {ALTRA_MAX_CORES})")
            return "altra-max", "Ampere Altra Max", core, evidence, False
        if cores is not None and cores > GRAVITON2_CORES:
            evidence.append(f"{cores} cores per socket (Graviton2 has {GRAVITON2_CORES}, "
                            "Altra Max 96 or more)")
            return "altra", "Ampere Altra", core, evidence, False
        return None, ("Neoverse N1: Ampere Altra, Altra Max or AWS Graviton2, not told apart "
                      "by what Linux shows here"), core, evidence, True
    if facts.part == "0xd40":
        if "Graviton3" in names or amazon:
            return "graviton3", "AWS Graviton3", core, evidence, True
        return None, "Neoverse V1 (AWS Graviton3 has it): not confirmed here", core, evidence, True
    if facts.part == "0xd4f":
        if "Graviton4" in names or amazon:
            return "graviton4", "AWS Graviton4", core, evidence, True
        if re.search(r"Grace|NVIDIA", names):
            return "grace", "NVIDIA Grace", core, evidence, True
        if re.search(r"\bGoogle\b", names):
            return "axion", "Google Axion", core, evidence, True
        return "neoverse-v2", "Neoverse V2: AWS Graviton4, NVIDIA Grace or Google Axion, not " \
                              "told apart", core, evidence, True
    if re.search(r"Alibaba", names):
        return "yitian-710", "Alibaba Yitian 710", core, evidence, True
    if re.search(r"Microsoft", names):
        return "cobalt-100", "Microsoft Cobalt 100", core, evidence, True
    return "neoverse-n2", "Neoverse N2: Yitian 710 or Cobalt 100, not told apart", core, \
        evidence, True


def identify(cpuinfo: str = "", lscpu: str = "", dmi: dict[str, str] | None = None,
             threads: int | None = None) -> CpuIdentity:
    """The identity of the CPU these texts describe (any of them may be empty)."""
    facts = parse(cpuinfo, lscpu, dmi, threads)
    evidence: list[str] = []
    caveat = ""
    certain = True
    if facts.vendor in ("GenuineIntel", "AuthenticAMD"):
        key, name, core = _x86(facts)
        evidence.append(f"{facts.vendor} family {facts.cpu_family} model {facts.model} "
                        f"stepping {facts.stepping}"
                        + (f", model name {facts.model_name!r}" if facts.model_name else ""))
        if facts.hypervisor:
            caveat = (f"a virtual CPU ({facts.hypervisor}): its family and model are what the "
                      "hypervisor shows, which may not be the host's CPU")
            certain = False
    elif facts.implementer:
        key, name, core, found, certain = _arm(facts)
        evidence.append(f"CPU implementer {facts.implementer}"
                        + (f", part {facts.part}" if facts.part else "")
                        + (f" ({core})" if core else ""))
        evidence.extend(found)
    else:
        return CpuIdentity(family=None, name="not identified: neither an x86 vendor nor an "
                           "Arm MIDR in /proc/cpuinfo or lscpu", threads=facts.threads)
    if facts.bios_model:
        evidence.append(f"lscpu BIOS model name {facts.bios_model!r}")
    if facts.bios_vendor:
        evidence.append(f"lscpu BIOS vendor {facts.bios_vendor!r}")
    for name_, value in facts.dmi.items():
        if name_ in ("sys_vendor", "product_name"):
            evidence.append(f"DMI {name_} {value!r}")
    return CpuIdentity(
        family=key, name=name, core=core or None, evidence=evidence, certain=certain,
        caveat=caveat, threads=facts.threads, cores_per_socket=facts.cores_per_socket,
        sockets=facts.sockets, virtual=bool(facts.hypervisor))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def lscpu_text() -> str:
    """``lscpu``'s output in the C locale ("" where it is missing or fails)."""
    try:
        result = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                                env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def this_machine() -> CpuIdentity:
    """This machine's CPU, from /proc/cpuinfo, lscpu and /sys/class/dmi/id."""
    dmi = {name: _read(DMI / name) for name in DMI_FIELDS}
    return identify(_read(Path("/proc/cpuinfo")), lscpu_text(), dmi, os.cpu_count())
