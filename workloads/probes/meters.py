"""The power meters Linux offers, found by looking: what each is, what it covers, how read.

- RAPL (``/sys/class/powercap/intel-rapl:N``): each package's energy counter (µJ),
  wrapping at ``max_energy_range_uj``; covers the packages.
- hwmon (``/sys/class/hwmon/hwmonN``), by driver, as each lays its files out:
  ``amd_energy`` (``energyN_input`` µJ counters, labels ``EcoreNNN`` and ``EsocketN``: the
  sockets' are summed, covering the packages), ``apm_xgene`` (xgene-hwmon on Ampere
  Altra and X-Gene: ``power1_input`` "CPU power" + ``power2_input`` "IO power", µW: the
  SoC), ``smpro_hwmon`` (Ampere's SMpro: the "CORE VRD", "SoC" and "RCA VRD" rails' µW,
  summed: the SoC's rails, DIMMs not counted) and ``power_meter`` (acpi_power_meter:
  ``power1_average`` µW over ``power1_average_interval`` ms, in ``hwmonN/`` or, on older
  kernels, ``hwmonN/device/``: the whole system as the firmware's meter sees it). Other
  drivers with power files (a GPU's, say) are listed, never used: what they cover is not
  the machine's.
- IPMI DCMI: ``ipmitool dcmi power reading`` (or FreeIPMI's ``ipmi-dcmi
  --get-system-power-statistics``), the BMC's reading of the whole system at its power
  supplies; needs an IPMI device (``/dev/ipmi0``) and, usually, root.

Entry points: :func:`rapl_domains`, :func:`hwmon_sources`, :func:`parse_dcmi`,
:func:`dcmi_source`. Everything takes the root it reads, so tests lay out fake trees.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
HWMON = Path("/sys/class/hwmon")
IPMI_DEVICES = (Path("/dev/ipmi0"), Path("/dev/ipmi/0"), Path("/dev/ipmidev/0"))
DCMI_COMMANDS = (["ipmitool", "dcmi", "power", "reading"],
                 ["ipmi-dcmi", "--get-system-power-statistics"])


class Coverage(StrEnum):
    """What a meter's watts are of."""

    PACKAGE = "package"  # the CPU packages (RAPL: and DRAM where it has a domain)
    SOC = "soc"  # the whole SoC: cores, uncore and IO
    SYSTEM = "system"  # the whole system, at its power supplies (the wall)
    UNSTATED = "unstated"  # a user's command: whatever it measures
    MODEL = "model"  # an estimate: SPECpower's wall watts, shared out per thread


COVERAGE_TEXT = {
    Coverage.PACKAGE: "the CPU packages",
    Coverage.SOC: "the SoC (cores, uncore and IO)",
    Coverage.SYSTEM: "the whole system at its power supplies (the wall)",
    Coverage.UNSTATED: "what the command measures (not stated)",
    Coverage.MODEL: "the whole system at the wall, as SPECpower measures it, shared out per "
                    "hardware thread (a model, not a meter)",
}


@dataclass(frozen=True)
class Counter:
    """An energy counter file: its reading times ``scale`` is joules."""

    path: Path
    scale: float = 1e-6
    wrap_path: Path | None = None  # RAPL's max_energy_range_uj

    def read(self) -> int:
        return int(self.path.read_text().split()[0])

    def wrap(self) -> int | None:
        return int(self.wrap_path.read_text()) if self.wrap_path is not None else None


@dataclass(frozen=True)
class PowerFile:
    """A power file: its reading times ``scale`` is watts."""

    path: Path
    scale: float = 1e-6

    def read(self) -> float:
        return int(self.path.read_text().split()[0]) * self.scale


@dataclass
class Source:
    """One meter found: counters read at both ends of an interval, or power sampled."""

    kind: str  # rapl, hwmon, dcmi
    name: str
    covers: Coverage
    counters: list[Counter] = field(default_factory=list)
    powers: list[PowerFile] = field(default_factory=list)
    sample: Callable[[], float] | None = None  # dcmi: the watts now
    sampling_period_s: float | None = None  # the meter's own averaging period, if it has one
    detail: str = ""


def rapl_domains(root: Path = POWERCAP) -> list[Path]:
    """Top-level RAPL domains (packages; their sub-domains are inside them)."""
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1
                  and (p / "energy_uj").exists())


def rapl_source(root: Path = POWERCAP) -> Source | None:
    domains = rapl_domains(root)
    if not domains:
        return None
    names = ", ".join(d.name for d in domains)
    return Source("rapl", f"RAPL {names}", Coverage.PACKAGE,
                  counters=[Counter(d / "energy_uj", 1e-6, d / "max_energy_range_uj")
                            for d in domains], detail=f"domains: {names}")


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _attribute_dirs(hwmon: Path) -> list[Path]:
    """Where a hwmon device's attributes are: its directory, and ``device/`` for drivers
    that put them on the parent device (acpi_power_meter before Linux 6.x)."""
    return [hwmon, hwmon / "device"]


def _channels(hwmon: Path, pattern: str) -> list[tuple[Path, str]]:
    """Each file matching ``pattern`` (e.g. ``power*_input``) with its channel's label."""
    found = []
    for directory in _attribute_dirs(hwmon):
        for path in sorted(directory.glob(pattern)):
            prefix = path.name.rsplit("_", 1)[0]
            found.append((path, _text(directory / f"{prefix}_label")))
        if found:
            break
    return found


def _hwmon_source(hwmon: Path, chip: str) -> Source | None:
    """The meter of one hwmon device whose driver ``chip`` is known; None otherwise."""
    where = f"hwmon {chip} ({hwmon.name})"
    if chip == "amd_energy":
        sockets = [(p, label) for p, label in _channels(hwmon, "energy*_input")
                   if label.startswith("Esocket")]
        if sockets:
            return Source("hwmon", f"{where}: {', '.join(lbl for _, lbl in sockets)}",
                          Coverage.PACKAGE, counters=[Counter(p, 1e-6) for p, _ in sockets],
                          detail="energy counters (µJ) of each socket")
    elif chip == "apm_xgene":
        powers = [(p, label) for p, label in _channels(hwmon, "power*_input")
                  if label in ("CPU power", "IO power")]
        if powers:
            return Source("hwmon", f"{where}: {' + '.join(lbl for _, lbl in powers)}",
                          Coverage.SOC, powers=[PowerFile(p) for p, _ in powers],
                          detail="xgene-hwmon power (µW), sampled")
    elif chip == "smpro_hwmon":
        rails = ("CORE VRD", "SoC", "RCA VRD")
        powers = [(p, label) for p, label in _channels(hwmon, "power*_input")
                  if label.split(" ", 1)[-1] in rails]
        if powers:
            return Source("hwmon", f"{where}: {' + '.join(lbl for _, lbl in powers)}",
                          Coverage.SOC, powers=[PowerFile(p) for p, _ in powers],
                          detail="SMpro rail power (µW), sampled; DIMM rails not counted")
    elif chip == "power_meter":
        averages = _channels(hwmon, "power*_average")
        if averages:
            path = averages[0][0]
            interval = _text(path.with_name(path.name.replace("_average",
                                                              "_average_interval")))
            period = int(interval) / 1000 if interval.isdigit() else None
            return Source("hwmon", f"{where}: {path.name}", Coverage.SYSTEM,
                          powers=[PowerFile(path)], sampling_period_s=period,
                          detail="ACPI power meter average (µW)"
                          + (f" over {period:g} s" if period else ""))
    return None


def hwmon_sources(root: Path = HWMON) -> tuple[list[Source], list[str]]:
    """The meters of the known hwmon drivers, and a line for each other device with power
    or energy files (listed, not used)."""
    sources: list[Source] = []
    others: list[str] = []
    for hwmon in sorted(root.glob("hwmon*")):
        chip = _text(hwmon / "name") or _text(hwmon / "device" / "name")
        source = _hwmon_source(hwmon, chip)
        if source is not None:
            sources.append(source)
        elif any(_channels(hwmon, pattern) for pattern in
                 ("power*_input", "power*_average", "energy*_input")):
            others.append(f"hwmon {chip or '?'} ({hwmon.name}): power or energy files of a "
                          "driver whose coverage is not known; not used")
    return sources, others


@dataclass(frozen=True)
class DcmiReading:
    watts: float | None  # None: no reading (deactivated at 0 W, or not parsed)
    state: str  # "activated", "deactivated", "Active"...
    period_s: float | None  # the BMC's statistics period, when it gives one


def parse_dcmi(text: str) -> DcmiReading:
    """The instantaneous watts of ``ipmitool dcmi power reading`` or FreeIPMI's
    ``ipmi-dcmi --get-system-power-statistics``; a deactivated 0 W is no reading."""
    match = (re.search(r"Instantaneous power reading\s*:\s*(\d+(?:\.\d+)?)\s*Watts", text)
             or re.search(r"Current Power\s*:\s*(\d+(?:\.\d+)?)\s*Watts", text, re.I))
    state_match = (re.search(r"Power reading state is\s*:\s*(\w+)", text)
                   or re.search(r"Power Measurement\s*:\s*(\w+)", text))
    state = state_match.group(1) if state_match else ""
    period = None
    seconds = re.search(r"Sampling period\s*:\s*(\d+)\s*Seconds", text)
    millis = re.search(r"(?:Statistics reporting time period|Sampling period)\s*:\s*(\d+)\s*"
                       r"milliseconds", text, re.I)
    if seconds:
        period = float(seconds.group(1))
    elif millis:
        period = int(millis.group(1)) / 1000
    watts = float(match.group(1)) if match else None
    if watts == 0 and state.lower() in ("deactivated", "inactive", "not"):
        watts = None
    return DcmiReading(watts, state, period or None)


def run_dcmi(argv: list[str]) -> str:
    """What a DCMI command prints ("" when it cannot run)."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def dcmi_source(devices: tuple[Path, ...] = IPMI_DEVICES,
                run: Callable[[list[str]], str] = run_dcmi,
                which: Callable[[str], str | None] = shutil.which) -> tuple[Source | None, str]:
    """The BMC's meter when an IPMI device and a DCMI tool are there and it gives a
    reading; else None and why not."""
    if not any(device.exists() for device in devices):
        return None, "no IPMI device (/dev/ipmi0)"
    tools = [argv for argv in DCMI_COMMANDS if which(argv[0])]
    if not tools:
        return None, "an IPMI device but neither ipmitool nor FreeIPMI's ipmi-dcmi"
    for argv in tools:
        reading = parse_dcmi(run(argv))
        if reading.watts is not None:
            command = " ".join(argv)

            def sample(argv: list[str] = argv) -> float:
                watts = parse_dcmi(run(argv)).watts
                if watts is None:
                    raise ValueError(f"no power reading from {' '.join(argv)}")
                return watts

            period = f", the BMC's statistics over {reading.period_s:g} s" \
                if reading.period_s else ""
            return Source("dcmi", f"IPMI DCMI ({command})", Coverage.SYSTEM, sample=sample,
                          detail=f"the BMC's instantaneous reading, polled{period}"), ""
    return None, "the BMC gave no DCMI power reading (deactivated, or not supported)"
