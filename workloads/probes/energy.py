"""Energy over a measurement: RAPL counters where the machine exposes them, else a command.

RAPL (``/sys/class/powercap/intel-rapl:*``) gives package and DRAM energy in µJ,
wrapping at ``max_energy_range_uj``. Where there is no RAPL (Arm servers, most VMs),
``--power-cmd`` names a command that prints the current watts; it is sampled each
second and integrated. When neither is there, the result says so instead of a number.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class EnergyReading:
    source: str  # "rapl", "power-cmd" or "unavailable"
    joules: float | None
    seconds: float
    detail: str = ""

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.joules is not None and self.seconds else None


def rapl_domains(root: Path = POWERCAP) -> list[Path]:
    """Top-level RAPL domains (packages; their sub-domains are inside them)."""
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1
                  and (p / "energy_uj").exists())


def energy_source(power_cmd: str | None) -> str:
    """How energy will be measured, or why it will not."""
    if power_cmd:
        return f"--power-cmd {power_cmd!r}, sampled each second and integrated"
    domains = rapl_domains()
    if domains:
        return "RAPL counters: " + ", ".join(d.name for d in domains)
    return "unavailable: no RAPL counters under /sys/class/powercap and no --power-cmd"


def _read_uj(domain: Path) -> int:
    return int((domain / "energy_uj").read_text())


class EnergyMeter:
    """Measure energy over one interval (use as a context manager)."""

    def __init__(self, power_cmd: str | None = None, root: Path = POWERCAP) -> None:
        self.power_cmd = power_cmd
        self.domains = [] if power_cmd else rapl_domains(root)
        self._start_uj: dict[Path, int] = {}
        self._start = 0.0
        self._samples: list[float] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reading = EnergyReading("unavailable", None, 0.0)

    def _sample_power_cmd(self) -> None:
        assert self.power_cmd is not None
        while not self._stop.wait(1.0):
            try:
                out = subprocess.run(self.power_cmd, shell=True, capture_output=True, text=True,
                                     timeout=5).stdout
                match = re.search(r"[-+]?\d+(\.\d+)?", out)
                if match is None:
                    raise ValueError(f"no number in {out!r}")
                self._samples.append(float(match.group(0)))
            except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
                self._errors.append(str(exc))

    def __enter__(self) -> EnergyMeter:
        self._start = time.perf_counter()
        try:
            self._start_uj = {d: _read_uj(d) for d in self.domains}
        except OSError as exc:  # e.g. energy_uj readable by root only
            self._errors.append(f"RAPL not readable: {exc}")
            self.domains = []
        if self.power_cmd:
            self._thread = threading.Thread(target=self._sample_power_cmd, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self._start
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self.domains:
            joules = 0.0
            for domain in self.domains:
                delta = _read_uj(domain) - self._start_uj[domain]
                if delta < 0:  # the counter wrapped
                    delta += int((domain / "max_energy_range_uj").read_text())
                joules += delta / 1e6
            names = ", ".join(d.name for d in self.domains)
            self.reading = EnergyReading("rapl", joules, seconds, f"domains: {names}")
        elif self.power_cmd and self._samples:
            mean_watts = sum(self._samples) / len(self._samples)
            self.reading = EnergyReading("power-cmd", mean_watts * seconds, seconds,
                                         f"{len(self._samples)} samples of {self.power_cmd!r}")
        else:
            why = "; ".join(self._errors[-3:]) or "no RAPL counters and no --power-cmd"
            self.reading = EnergyReading("unavailable", None, seconds, why)
