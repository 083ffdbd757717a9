"""Energy over a measured interval: a meter where Linux offers one, else a stated estimate.

:func:`plan_energy` decides once, before the load, how energy will be measured
(:class:`EnergyOptions`: ``--power-cmd``, ``--power-meter``, ``--power-coefficients``,
``--cpu-family``) and records it (:class:`MeterRecord`: which meter, what it covers,
its sampling period; for an estimate the CPU as identified and the coefficients with
their source). Each measured interval then enters a fresh meter from the plan
(:meth:`EnergyPlan.meter`) and reads its :class:`EnergyReading`.

The meters (``meters.py`` finds them), in the order ``auto`` takes them: ``--power-cmd``
(the user's override, sampled each second), RAPL, hwmon (amd_energy, xgene-hwmon,
SMpro, acpi_power_meter), IPMI DCMI. Counters are read at both ends of an interval;
power is sampled each second and integrated. Where there is none, the estimate:
Cloud Carbon Footprint's linear model, watts = threads x (min_w + u x (max_w - min_w)),
u the machine's CPU utilisation over the interval from /proc/stat (busy / all, steal
counted as not ours), the coefficients the table's for the CPU identified
(``cpuid.py``, ``coefficients.py``), with the band of that family's SPECpower results.
An estimate is always labelled (:attr:`EnergyReading.label`) and never shown as
measured. When the CPU cannot be told or the table has nothing for it, the reading is
"unavailable" and says why. docs/energy.md has the sources and the numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import Field

from socialbench.errors import SocialbenchError
from socialbench.workloads.driver.hostload import PROC_STAT, StatSample, read_stat
from socialbench.workloads.probes import cpuid
from socialbench.workloads.probes.coefficients import (
    Coefficients,
    CoefficientsError,
    Kind,
    load_table,
    resolve,
)
from socialbench.workloads.probes.cpuid import CpuIdentity
from socialbench.workloads.probes.meters import (
    COVERAGE_TEXT,
    HWMON,
    IPMI_DEVICES,
    POWERCAP,
    Coverage,
    Source,
    dcmi_source,
    hwmon_sources,
    rapl_source,
    run_dcmi,
)
from socialbench.workloads.probes.records import Strict

SAMPLE_S = 1.0  # power sampled each second (a command's, a sensor's, the BMC's)
MODEL = "CCF linear model"


class EnergyError(SocialbenchError, ValueError):
    """The energy measurement asked for cannot be had (a meter that is not there, an
    unknown --cpu-family)."""


class MeterChoice(StrEnum):
    AUTO = "auto"
    RAPL = "rapl"
    HWMON = "hwmon"
    DCMI = "dcmi"
    ESTIMATE = "estimate"


@dataclass(frozen=True)
class EnergyOptions:
    """How energy is to be measured, as the user asked."""

    power_cmd: str | None = None  # a command printing watts: overrides every meter
    meter: MeterChoice = MeterChoice.AUTO
    coefficients: Path | None = None  # the user's coefficients file (replaces table rows)
    cpu_family: str | None = None  # the table's key for this CPU, overriding identification


@dataclass(frozen=True)
class EnergyReading:
    """Energy over one interval, measured or estimated, or why there is none."""

    source: str  # rapl, hwmon, dcmi, power-cmd, estimate or unavailable
    joules: float | None
    seconds: float
    detail: str = ""
    estimated: bool = False
    label: str = ""  # an estimate's: "estimated (CCF linear model, SPECpower ...)"
    joules_low: float | None = None  # an estimate's band
    joules_high: float | None = None
    utilisation: float | None = None  # an estimate's u, measured over the interval

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.joules is not None and self.seconds else None


class CoefficientsRecord(Strict):
    """The coefficients an estimate used, and where they come from."""

    key: str
    name: str
    kind: str = Field(description="specpower, proxy or user.")
    uses: str | None = Field(default=None, description="A proxy: the family it takes.")
    min_w: float = Field(description="W per hardware thread at active idle.")
    max_w: float = Field(description="W per hardware thread at 100%.")
    idle_lo: float | None = None
    idle_hi: float | None = None
    full_lo: float | None = None
    full_hi: float | None = None
    results: int | None = Field(default=None, description="SPECpower results behind them.")
    source: str
    origin: str = Field(description='"table" (the package\'s) or the user\'s file.')


class MeterRecord(Strict):
    """How energy was measured over every interval of a run (the manifest's record)."""

    kind: str = Field(description="rapl, hwmon, dcmi, power-cmd, estimate or unavailable.")
    name: str = Field(description="The meter, e.g. 'RAPL intel-rapl:0'.")
    covers: Coverage | None = Field(description="package, soc, system, unstated or model.")
    covers_text: str = ""
    sampling_period_s: float | None = Field(
        default=None, description="How often power was sampled (None: counters read at "
                                  "both ends of each interval).")
    meter_period_s: float | None = Field(
        default=None, description="The meter's own averaging period, when it has one.")
    method: str = ""
    estimated: bool = False
    label: str = Field(default="", description="An estimate's label, shown with every "
                                               "number it gives.")
    threads: int | None = Field(default=None, description="An estimate's hardware threads.")
    cpu: CpuIdentity | None = Field(default=None, description="The CPU as identified.")
    cpu_stated: bool = Field(default=False, description="The family was --cpu-family's.")
    coefficients: CoefficientsRecord | None = None
    others: list[str] = Field(default_factory=list,
                              description="Other meters found and not used, and why not.")
    why: str = Field(default="", description="unavailable: why.")

    def describe(self) -> str:
        """One line: what measured energy, or why nothing did."""
        if self.kind == "unavailable":
            return f"unavailable: {self.why}"
        period = (f", sampled every {self.sampling_period_s:g} s and integrated"
                  if self.sampling_period_s else "")
        text = f"{self.name} ({self.kind}; covers {self.covers_text}{period})"
        if self.estimated:
            text = f"{self.label}: {self.method}"
        return text


def label_for(row: Coefficients, table: dict[str, Coefficients]) -> str:
    """``estimated (CCF linear model, SPECpower coefficients for Cascade Lake)``."""
    if row.kind is Kind.PROXY and row.uses is not None:
        return (f"estimated ({MODEL}, SPECpower coefficients for {table[row.uses].name} as "
                f"a proxy for {row.name})")
    if row.origin != "table":
        return f"estimated ({MODEL}, coefficients for {row.name} from {row.origin})"
    return f"estimated ({MODEL}, SPECpower coefficients for {row.name})"


def model_watts(threads: int, min_w: float, max_w: float, utilisation: float) -> float:
    """CCF's linear model: threads x (min + u x (max - min))."""
    return threads * (min_w + utilisation * (max_w - min_w))


# ---------------------------------------------------------------- meters of one interval


class IntervalMeter:
    """Measures one interval as a context manager; :attr:`reading` after it."""

    reading: EnergyReading

    def __init__(self) -> None:
        self.reading = EnergyReading("unavailable", None, 0.0, "not measured yet")
        self._start = 0.0

    def __enter__(self) -> IntervalMeter:
        self._start = time.perf_counter()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.reading = self.stop(time.perf_counter() - self._start)

    def start(self) -> None:
        pass

    def stop(self, seconds: float) -> EnergyReading:
        raise NotImplementedError


class Unavailable(IntervalMeter):
    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def stop(self, seconds: float) -> EnergyReading:
        return EnergyReading("unavailable", None, seconds, self.why)


class CounterMeter(IntervalMeter):
    """Energy counters (RAPL, amd_energy) read at both ends; a counter that wrapped is
    unwrapped by its range."""

    def __init__(self, source: Source) -> None:
        super().__init__()
        self.source = source
        self._starts: list[int] = []
        self._error = ""

    def start(self) -> None:
        try:
            self._starts = [counter.read() for counter in self.source.counters]
        except (OSError, ValueError) as exc:  # e.g. energy_uj readable by root only
            self._error = f"{self.source.name} not readable: {exc}"

    def stop(self, seconds: float) -> EnergyReading:
        if self._error:
            return EnergyReading("unavailable", None, seconds, self._error)
        joules = 0.0
        try:
            for counter, begin in zip(self.source.counters, self._starts, strict=True):
                delta = counter.read() - begin
                if delta < 0:
                    wrap = counter.wrap()
                    if wrap is None:
                        return EnergyReading("unavailable", None, seconds,
                                             f"{counter.path} went backwards")
                    delta += wrap
                joules += delta * counter.scale
        except (OSError, ValueError) as exc:
            return EnergyReading("unavailable", None, seconds,
                                 f"{self.source.name} not readable: {exc}")
        return EnergyReading(self.source.kind, joules, seconds, self.source.detail)


class SampledMeter(IntervalMeter):
    """Power sampled every ``period_s`` (from the start) and integrated: mean x time."""

    def __init__(self, kind: str, name: str, sample: Callable[[], float],
                 period_s: float = SAMPLE_S) -> None:
        super().__init__()
        self.kind, self.name, self.sample, self.period_s = kind, name, sample, period_s
        self._samples: list[float] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        try:
            self._samples.append(self.sample())
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            self._errors.append(str(exc))

    def _run(self) -> None:
        self._take()
        while not self._stop.wait(self.period_s):
            self._take()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self, seconds: float) -> EnergyReading:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self._samples:
            why = "; ".join(self._errors[-3:]) or "no sample"
            return EnergyReading("unavailable", None, seconds, f"{self.name}: {why}")
        mean = sum(self._samples) / len(self._samples)
        return EnergyReading(self.kind, mean * seconds, seconds,
                             f"{len(self._samples)} samples of {self.name}, mean "
                             f"{mean:.4g} W")


class EstimateMeter(IntervalMeter):
    """CCF's linear model on the machine's CPU utilisation over the interval."""

    def __init__(self, row: Coefficients, label: str, threads: int,
                 stat_path: str = PROC_STAT) -> None:
        super().__init__()
        self.row, self.label, self.threads, self.stat_path = row, label, threads, stat_path
        self._first: StatSample | None = None

    def start(self) -> None:
        self._first = read_stat(None, self.stat_path)

    def stop(self, seconds: float) -> EnergyReading:
        last = read_stat(None, self.stat_path)
        if self._first is None or last is None:
            return EnergyReading("unavailable", None, seconds,
                                 f"{self.label}: no CPU utilisation ({self.stat_path} "
                                 "not readable)")
        times = last.cpus - self._first.cpus
        if times.total <= 0:
            return EnergyReading("unavailable", None, seconds,
                                 f"{self.label}: no CPU time passed in {self.stat_path}")
        u = min(max(times.busy / times.total, 0.0), 1.0)
        row = self.row
        assert row.min_w is not None and row.max_w is not None
        watts = model_watts(self.threads, row.min_w, row.max_w, u)
        low = high = None
        if row.band is not None:
            low = model_watts(self.threads, row.band.idle_lo, row.band.full_lo, u) * seconds
            high = model_watts(self.threads, row.band.idle_hi, row.band.full_hi, u) * seconds
        detail = (f"{self.label}: {self.threads} threads x ({row.min_w:g} + u x "
                  f"({row.max_w:g} - {row.min_w:g})) W, u = {u:.1%} from /proc/stat over "
                  f"the interval = {watts:.4g} W")
        if low is not None and high is not None and seconds:
            detail += f", band {low / seconds:.4g}-{high / seconds:.4g} W"
        return EnergyReading("estimate", watts * seconds, seconds, detail, estimated=True,
                             label=self.label, joules_low=low, joules_high=high,
                             utilisation=u)


def _power_cmd_sample(command: str) -> Callable[[], float]:
    def sample() -> float:
        out = subprocess.run(command, shell=True, capture_output=True, text=True,
                             timeout=5).stdout
        match = re.search(r"[-+]?\d+(\.\d+)?", out)
        if match is None:
            raise ValueError(f"no number in {out!r}")
        return float(match.group(0))

    return sample


# ---------------------------------------------------------------- the plan


@dataclass
class System:
    """Where the meters and the CPU are looked for (tests lay out fake ones)."""

    powercap: Path = POWERCAP
    hwmon: Path = HWMON
    ipmi_devices: tuple[Path, ...] = IPMI_DEVICES
    run_dcmi: Callable[[list[str]], str] = run_dcmi
    which: Callable[[str], str | None] | None = None  # None: shutil.which
    identify: Callable[[], CpuIdentity] = cpuid.this_machine
    threads: int | None = field(default_factory=os.cpu_count)
    proc_stat: str = PROC_STAT
    sample_s: float = SAMPLE_S  # how often power is sampled


@dataclass
class EnergyPlan:
    """How every interval of a run is measured; :meth:`meter` gives a fresh meter."""

    record: MeterRecord
    factory: Callable[[], IntervalMeter]

    def meter(self) -> IntervalMeter:
        return self.factory()

    def describe(self) -> str:
        return self.record.describe()


def _coefficients_record(row: Coefficients) -> CoefficientsRecord:
    assert row.min_w is not None and row.max_w is not None
    band = row.band
    return CoefficientsRecord(
        key=row.key, name=row.name, kind=row.kind.value, uses=row.uses, min_w=row.min_w,
        max_w=row.max_w, idle_lo=band.idle_lo if band else None,
        idle_hi=band.idle_hi if band else None, full_lo=band.full_lo if band else None,
        full_hi=band.full_hi if band else None, results=row.results, source=row.source,
        origin=row.origin)


def _source_plan(source: Source, others: list[str], period: float) -> EnergyPlan:
    """The plan of a meter found."""
    if source.counters:
        record = MeterRecord(
            kind=source.kind, name=source.name, covers=source.covers,
            covers_text=COVERAGE_TEXT[source.covers], sampling_period_s=None,
            meter_period_s=source.sampling_period_s,
            method=f"energy counters read at both ends of each interval; {source.detail}",
            others=others)
        return EnergyPlan(record, lambda: CounterMeter(source))
    powers = source.powers
    sample: Callable[[], float] = source.sample or (lambda: sum(p.read() for p in powers))
    record = MeterRecord(
        kind=source.kind, name=source.name, covers=source.covers,
        covers_text=COVERAGE_TEXT[source.covers], sampling_period_s=period,
        meter_period_s=source.sampling_period_s,
        method=f"power sampled every {period:g} s and integrated; {source.detail}",
        others=others)
    return EnergyPlan(record, lambda: SampledMeter(source.kind, source.name, sample, period))


def _estimate_plan(options: EnergyOptions, system: System, table: dict[str, Coefficients],
                   others: list[str], why_no_meter: str) -> EnergyPlan:
    """The estimate's plan, or an unavailable one that says why there is none."""
    identity = system.identify()
    family = options.cpu_family or identity.family
    base = f"{why_no_meter}; " if why_no_meter else ""

    def unavailable(why: str) -> EnergyPlan:
        record = MeterRecord(kind="unavailable", name="none", covers=None, cpu=identity,
                             cpu_stated=options.cpu_family is not None, others=others,
                             why=base + why)
        return EnergyPlan(record, lambda: Unavailable(record.why))

    if family is None:
        return unavailable(f"no estimate either: the CPU is not identified ({identity.name}); "
                           "give --cpu-family KEY (socialbench keys: docs/energy.md) or "
                           "--power-cmd")
    if family not in table:
        return unavailable(f"no estimate either: {family} is not in the coefficients table")
    row = table[family]
    if row.kind is Kind.UNKNOWN:
        return unavailable(f"no estimate either: {row.name} has no coefficients "
                           f"({row.source}); give --power-coefficients FILE or --power-cmd")
    used = resolve(table, family)
    threads = identity.threads or system.threads
    if not threads:
        return unavailable("no estimate either: the number of hardware threads is unknown")
    label = label_for(row, table)
    of = used.name if used.uses is None else table[used.uses].name
    record = MeterRecord(
        kind="estimate", name=MODEL, covers=Coverage.MODEL,
        covers_text=COVERAGE_TEXT[Coverage.MODEL], sampling_period_s=None,
        method=(f"{threads} threads x (min_w + u x (max_w - min_w)), u the machine's CPU "
                f"utilisation over each interval from /proc/stat; {of}'s coefficients "
                f"{used.min_w:g}/{used.max_w:g} W per thread"),
        estimated=True, label=label, threads=threads, cpu=identity,
        cpu_stated=options.cpu_family is not None, coefficients=_coefficients_record(used),
        others=others, why=why_no_meter)
    return EnergyPlan(record, lambda: EstimateMeter(used, label, threads, system.proc_stat))


def plan_energy(options: EnergyOptions | None = None, system: System | None = None
                ) -> EnergyPlan:
    """Decide how energy is measured: the user's command, the meter asked or the first
    found, else the estimate; :class:`EnergyError` when the meter asked is not there."""
    options = options or EnergyOptions()
    system = system or System()
    try:
        table = load_table(options.coefficients)
    except CoefficientsError as exc:
        raise EnergyError(str(exc)) from None
    if options.cpu_family is not None and options.cpu_family not in table:
        raise EnergyError(f"--cpu-family {options.cpu_family!r} is not in the coefficients "
                          f"table; its keys: {', '.join(sorted(table))}")
    if options.power_cmd:
        record = MeterRecord(
            kind="power-cmd", name=f"--power-cmd {options.power_cmd!r}",
            covers=Coverage.UNSTATED, covers_text=COVERAGE_TEXT[Coverage.UNSTATED],
            sampling_period_s=system.sample_s,
            method=f"the command's watts, sampled every {system.sample_s:g} s and integrated")
        sample = _power_cmd_sample(options.power_cmd)
        return EnergyPlan(record, lambda: SampledMeter("power-cmd", record.name, sample,
                                                       system.sample_s))
    choice = options.meter
    found: list[Source] = []
    others: list[str] = []
    why: list[str] = []
    if choice in (MeterChoice.AUTO, MeterChoice.RAPL):
        rapl = rapl_source(system.powercap)
        if rapl:
            found.append(rapl)
        else:
            why.append("no RAPL counters under /sys/class/powercap")
    if choice in (MeterChoice.AUTO, MeterChoice.HWMON):
        sources, unused = hwmon_sources(system.hwmon)
        found.extend(sources)
        others.extend(unused)
        if not sources:
            why.append("no hwmon power meter of a known driver")
    if choice is MeterChoice.DCMI or (choice is MeterChoice.AUTO and not found):
        kwargs = {"which": system.which} if system.which is not None else {}
        dcmi, no_dcmi = dcmi_source(system.ipmi_devices, system.run_dcmi, **kwargs)
        if dcmi:
            found.append(dcmi)
        else:
            why.append(f"no IPMI DCMI ({no_dcmi})")
    if found:
        chosen, rest = found[0], found[1:]
        return _source_plan(chosen, others + [f"{s.name} (covers {s.covers}): found, "
                                              "not used" for s in rest], system.sample_s)
    reason = "; ".join(why)
    if choice not in (MeterChoice.AUTO, MeterChoice.ESTIMATE):
        raise EnergyError(f"--power-meter {choice.value}: {reason}")
    return _estimate_plan(options, system, table, others, "" if choice is MeterChoice.ESTIMATE
                          else f"no meter ({reason})")

