"""How every report and comparison writes its numbers: rates, latencies, ratios, energy
and the machine's name (one formatter each, the same printed and in HTML)."""

from __future__ import annotations

from socialbench.workloads.cache.energy import format_joules
from socialbench.workloads.probes.energy import MeterRecord
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


def format_per_watt_band(value: float | None, low: float | None, high: float | None,
                         estimated: bool) -> str:
    """Perf per watt as shown: ``312,000``, or an estimate's ``312,000 (estimated, band
    250,000-400,000)``; ``unavailable`` where there is none."""
    if value is None:
        return "unavailable"
    if not estimated:
        return f"{value:,.3g}" if value < 100 else f"{value:,.0f}"
    band = f", band {low:,.3g}-{high:,.3g}" if low is not None and high is not None else ""
    return f"{value:,.3g} (estimated{band})"


def meter_lines(record: MeterRecord | None) -> list[str]:
    """What a bundle's energy was, in sentences: the meter and what it covers, or the
    estimate (its label, the CPU as identified, the coefficients and their source)."""
    if record is None:
        return []
    if record.kind == "unavailable":
        lines = [f"Energy unavailable: {record.why}."]
        if record.cpu is not None:
            lines.append(f"CPU: {record.cpu.name} ({'; '.join(record.cpu.evidence)}).")
        return lines
    if not record.estimated:
        period = (f"sampled every {record.sampling_period_s:g} s" if record.sampling_period_s
                  else "energy counters read at both ends of each step")
        lines = [f"Energy measured by {record.name}: it covers {record.covers_text}; "
                 f"{period}."]
        return lines + [f"Also found: {line}." for line in record.others]
    lines = [f"Energy is {record.label}, not measured: {record.method}."]
    if record.why:
        lines.append(f"Why an estimate: {record.why}.")
    cpu = record.cpu
    if cpu is not None:
        how = "stated by --cpu-family" if record.cpu_stated else "; ".join(cpu.evidence)
        lines.append(f"CPU: {cpu.name} ({how})" + (f"; {cpu.caveat}" if cpu.caveat else "")
                     + ".")
    coefficients = record.coefficients
    if coefficients is not None:
        band = ""
        if coefficients.idle_lo is not None and coefficients.full_hi is not None:
            band = (f"; band {coefficients.idle_lo:g}-{coefficients.idle_hi:g} W at idle, "
                    f"{coefficients.full_lo:g}-{coefficients.full_hi:g} W at 100%")
        lines.append(f"Coefficients ({coefficients.kind}): {coefficients.min_w:g} W per thread "
                     f"at idle, {coefficients.max_w:g} at 100%{band}. Source: "
                     f"{coefficients.source}.")
    lines.append(f"It covers {record.covers_text}.")
    return lines
