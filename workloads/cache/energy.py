"""Energy per operation over a measured window (the meter itself is the caller's).

The generator knows no energy source: ``run_many`` enters a :class:`Meter` (the ramp's
``EnergyMeter``: RAPL or ``--power-cmd``) when the measured window opens and exits it when
the window closes, and :class:`OpsEnergy` turns its reading into joules per operation of
every server driven in that window. The energy is the whole machine's (generator and
servers alike), as the ramp's.
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


class Meter(Protocol):
    """Measures energy over a with-block (``socialbench.workloads.probes.energy.EnergyMeter``)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def reading(self) -> Reading: ...


class OpsEnergy(BaseModel):
    """The machine's energy over a measured window, per operation answered in it."""

    available: bool
    source: str = Field(description="rapl, power-cmd or unavailable.")
    note: str = Field(description='How it was measured, or "unavailable: <why>".')
    seconds: float = Field(description="Length of the metered window.")
    ops: int = Field(description="Operations of every server driven in the window.")
    joules: float | None
    watts: float | None
    joules_per_op: float | None
    ops_per_s_per_watt: float | None = Field(description="(ops/s) / W, i.e. ops per joule.")

    @classmethod
    def of(cls, reading: Reading, ops: int) -> OpsEnergy:
        joules = reading.joules
        available = joules is not None
        return cls(
            available=available, source=reading.source,
            note=reading.detail if available else f"unavailable: {reading.detail}",
            seconds=reading.seconds, ops=ops, joules=joules,
            watts=joules / reading.seconds if joules is not None and reading.seconds else None,
            joules_per_op=joules / ops if joules is not None and ops else None,
            ops_per_s_per_watt=ops / joules if joules else None,
        )

    def describe(self) -> str:
        """``3.2 µJ/op, 312,000 ops/s per W (power-cmd, ...)`` or ``unavailable: <why>``."""
        if self.joules is None:
            return self.note
        measured = f"{self.joules:.3g} J over {self.seconds:.1f} s"
        if self.joules_per_op is None or self.ops_per_s_per_watt is None:
            return f"{measured}, no operations ({self.source})"
        return (f"{format_joules(self.joules_per_op)}/op, {self.ops_per_s_per_watt:,.0f} ops/s "
                f"per W ({self.source}, {measured})")
