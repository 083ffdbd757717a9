"""Energy per operation over a measured window (the meter itself is the caller's).

The generator knows no energy source: ``run_many`` enters a :class:`Meter` (one of the
ramp's: ``socialbench.workloads.probes.energy``, a meter or the stated estimate) when the
measured window opens and exits it when the window closes, and :class:`OpsEnergy` turns
its reading into joules per operation of every server driven in that window. The energy
is the whole machine's (generator and servers alike), as the ramp's. An estimate keeps
its label and band with every number it gives.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field


def format_joules(joules: float) -> str:
    """``32.8 mJ``, ``3.2 µJ``, ``120 nJ``: three significant digits in a readable unit."""
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("µJ", 1e-6)):
        if abs(joules) >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules / 1e-9:.3g} nJ"


class Reading(Protocol):
    """Energy over an interval (``socialbench.workloads.probes.energy.EnergyReading``)."""

    @property
    def source(self) -> str: ...

    @property
    def joules(self) -> float | None: ...

    @property
    def seconds(self) -> float: ...

    @property
    def detail(self) -> str: ...

    @property
    def estimated(self) -> bool: ...

    @property
    def label(self) -> str: ...

    @property
    def joules_low(self) -> float | None: ...

    @property
    def joules_high(self) -> float | None: ...

    @property
    def utilisation(self) -> float | None: ...


class Meter(Protocol):
    """Measures energy over a with-block (``socialbench.workloads.probes.energy``'s)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def reading(self) -> Reading: ...


class OpsEnergy(BaseModel):
    """The machine's energy over a measured window, per operation answered in it."""

    available: bool
    source: str = Field(description="rapl, hwmon, dcmi, power-cmd, estimate or unavailable.")
    note: str = Field(description='How it was measured, or "unavailable: <why>".')
    seconds: float = Field(description="Length of the metered window.")
    ops: int = Field(description="Operations of every server driven in the window.")
    joules: float | None
    watts: float | None
    joules_per_op: float | None
    ops_per_s_per_watt: float | None = Field(description="(ops/s) / W, i.e. ops per joule.")
    estimated: bool = Field(default=False, description="An estimate, not a measurement.")
    label: str = Field(default="", description="An estimate's label.")
    utilisation: float | None = Field(default=None, description="An estimate's CPU "
                                                                "utilisation over the window.")
    watts_low: float | None = Field(default=None, description="An estimate's band.")
    watts_high: float | None = None
    ops_per_s_per_watt_low: float | None = None
    ops_per_s_per_watt_high: float | None = None

    @classmethod
    def of(cls, reading: Reading, ops: int) -> OpsEnergy:
        joules = reading.joules
        available = joules is not None
        seconds = reading.seconds
        low, high = reading.joules_low, reading.joules_high
        return cls(
            available=available, source=reading.source,
            note=reading.detail if available else f"unavailable: {reading.detail}",
            seconds=seconds, ops=ops, joules=joules,
            watts=joules / seconds if joules is not None and seconds else None,
            joules_per_op=joules / ops if joules is not None and ops else None,
            ops_per_s_per_watt=ops / joules if joules else None,
            estimated=reading.estimated, label=reading.label,
            utilisation=reading.utilisation,
            watts_low=low / seconds if low is not None and seconds else None,
            watts_high=high / seconds if high is not None and seconds else None,
            ops_per_s_per_watt_low=ops / high if high else None,
            ops_per_s_per_watt_high=ops / low if low else None,
        )

    def band_text(self) -> str:
        """``band 250,000-400,000`` (ops/s per W) of an estimate, or ""."""
        if self.ops_per_s_per_watt_low is None or self.ops_per_s_per_watt_high is None:
            return ""
        return (f"band {self.ops_per_s_per_watt_low:,.0f}-"
                f"{self.ops_per_s_per_watt_high:,.0f}")

    def describe(self) -> str:
        """``3.2 µJ/op, 312,000 ops/s per W (power-cmd, ...)`` or ``unavailable: <why>``;
        an estimate says so first."""
        if self.joules is None:
            return self.note
        measured = f"{self.joules:.3g} J over {self.seconds:.1f} s"
        if self.joules_per_op is None or self.ops_per_s_per_watt is None:
            return f"{measured}, no operations ({self.source})"
        if self.estimated:
            band = self.band_text()
            return (f"{format_joules(self.joules_per_op)}/op, {self.ops_per_s_per_watt:,.0f} "
                    f"ops/s per W, {self.label}" + (f", {band}" if band else "")
                    + f" ({measured}, u {self.utilisation or 0:.0%})")
        return (f"{format_joules(self.joules_per_op)}/op, {self.ops_per_s_per_watt:,.0f} ops/s "
                f"per W ({self.source}, {measured})")
