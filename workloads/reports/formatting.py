"""How every report and comparison writes its numbers: rates, latencies, ratios, energy
and the machine's name (one formatter each, the same printed and in HTML)."""

from __future__ import annotations

from socialbench.workloads.cache.energy import format_joules
from socialbench.workloads.ramp.engine import format_ms


def format_rate(value: float | None) -> str:
    """Requests per second for people (``2,400``), or ``—``."""
    return "—" if value is None else f"{value:,.6g}"


def format_latency(value: float | None) -> str:
    """Milliseconds for people (``1.23 ms``), or ``—``."""
    return "—" if value is None else format_ms(value)


def format_energy(value: float | None) -> str:
    """Joules for people (``2.64 mJ``), or ``unavailable`` where none were measured."""
    return "unavailable" if value is None else format_joules(value)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, or None when either is unknown or the base is zero."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def format_ratio(value: float | None) -> str:
    """``1.20x (+20%)``, ``0.66x (-34%)``, or ``—``."""
    if value is None:
        return "—"
    return f"{value:.2f}x ({(value - 1) * 100:+.0f}%)"


def machine_name(hardware: dict[str, object]) -> str:
    """``<CPU model> (<cores> cores, <architecture>)`` from a manifest's hardware."""
    cores = hardware.get("usable_cores") or hardware.get("logical_cores")
    return f"{hardware.get('cpu_model', '?')} ({cores} cores, {hardware.get('architecture')})"


def format_mib(value: int) -> str:
    """Bytes as whole MiB (``1,024 MiB``)."""
    return f"{value / 2**20:,.0f} MiB"


def format_number(value: float | None, digits: int = 3) -> str:
    """A number to ``digits`` significant digits, or ``—``."""
    return "—" if value is None else f"{value:,.{digits}g}"


def format_count(value: float | None) -> str:
    """A whole count (``12,345``), or ``—``."""
    return "—" if value is None else f"{value:,.0f}"


def format_per_watt(value: float | None) -> str:
    """Operations per second per watt, or ``unavailable`` where no energy was measured."""
    return "unavailable" if value is None else f"{value:,.0f}"
