"""Perf per watt between two bundles, said as it is: the seeds' three figures as bars, and
the warnings a perf-per-watt ratio needs.

The seed documents compare platforms by three figures, each a ratio to the baseline:
throughput at the SLA, p99 there, and perf per watt. :func:`plot_seed_figures` draws
them as bars normalised to the baseline (1.0), an estimated perf per watt hatched and
with the estimate's band as an error bar. :func:`energy_warnings` says what the
perf-per-watt ratio rests on: a measurement against an estimate (not a measured ratio;
the band it could lie in), two estimates from the same table (the ratio comes from the
model as much as from the machines), or two meters that cover different things (the
packages against the wall). Used by :mod:`.compare` (ramps) and :mod:`.cache_compare`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import pyplot as plt

from socialbench.workloads.probes.energy import MeterRecord


@dataclass(frozen=True)
class EnergySide:
    """One bundle's perf per watt at its answer, and how it was had."""

    run: str  # the bundle's label
    value: float | None  # (req/s or ops/s) per watt
    low: float | None = None  # an estimate's band
    high: float | None = None
    estimated: bool = False
    label: str = ""  # the estimate's
    meter: MeterRecord | None = None
    utilisation: float | None = None  # an estimate's, at the answer

    @property
    def how(self) -> str:
        if self.estimated:
            return self.label
        if self.meter is not None and self.meter.kind != "unavailable":
            return f"measured by {self.meter.name}, covering {self.meter.covers_text}"
        return "measured"


def ratio_band(run: EnergySide, base: EnergySide) -> tuple[float, float] | None:
    """The lowest and highest the perf-per-watt ratio can be, given the estimates' bands
    (a measured side counts as its value); None without two values."""
    if run.value is None or base.value is None or base.value == 0:
        return None
    run_low = run.low if run.estimated and run.low is not None else run.value
    run_high = run.high if run.estimated and run.high is not None else run.value
    base_low = base.low if base.estimated and base.low is not None else base.value
    base_high = base.high if base.estimated and base.high is not None else base.value
    if not base_low or not base_high:
        return None
    return run_low / base_high, run_high / base_low


def _same_table(run: EnergySide, base: EnergySide) -> bool:
    run_c = run.meter.coefficients if run.meter else None
    base_c = base.meter.coefficients if base.meter else None
    if run_c is None or base_c is None:
        return run.label.split(",")[0] == base.label.split(",")[0]
    return run_c.origin == base_c.origin


def energy_warnings(run: EnergySide, base: EnergySide) -> list[str]:
    """What the perf-per-watt ratio of ``run`` to ``base`` rests on, when it is not two
    measurements of the same thing."""
    pair = f"{run.run} vs {base.run}"
    band = ratio_band(run, base)
    band_text = f" (from {band[0]:.2f}x to {band[1]:.2f}x within the estimates' band)" \
        if band else ""
    if run.estimated and base.estimated:
        if _same_table(run, base):
            utilisation = ""
            if run.utilisation is not None and base.utilisation is not None:
                utilisation = (f" at CPU utilisations of {run.utilisation:.0%} and "
                               f"{base.utilisation:.0%}")
            return [f"{pair}: both perf-per-watt figures are estimated from the same table "
                    f"({run.label}; {base.label}): the ratio comes from the model as much as "
                    "from the machines: it is the throughput ratio over the ratio of the "
                    f"modelled watts{utilisation}, not a measurement{band_text}."]
        return [f"{pair}: both perf-per-watt figures are estimates, from different "
                f"coefficients ({run.label}; {base.label}): not a measured ratio{band_text}."]
    if run.estimated or base.estimated:
        estimate, measured = (run, base) if run.estimated else (base, run)
        return [f"{pair}: the perf-per-watt ratio sets an estimate against a measurement: "
                f"{estimate.run} is {estimate.label}, {measured.run} is {measured.how}; it "
                f"is not a measured ratio{band_text}."]
    run_cover = run.meter.covers if run.meter else None
    base_cover = base.meter.covers if base.meter else None
    if run_cover is not None and base_cover is not None and run_cover != base_cover:
        return [f"{pair}: the two meters cover different things ({run.run}: "
                f"{run.meter.covers_text if run.meter else run_cover}; {base.run}: "
                f"{base.meter.covers_text if base.meter else base_cover}): their perf-per-watt "
                "ratio is not of the same watts."]
    return []


@dataclass(frozen=True)
class Figure:
    """One of the three figures: its title and each bundle's ratio to the baseline."""

    title: str
    ratios: Sequence[float | None]
    bands: Sequence[tuple[float, float] | None] = ()  # an estimate's ratio band per bundle
    estimated: Sequence[bool] = ()


def plot_seed_figures(path: Path, labels: Sequence[str], figures: Sequence[Figure],
                      baseline: str, note: str = "") -> None:
    """The figures as bars normalised to the baseline (1.0), one group per figure, one bar
    per bundle; an estimate hatched, with its band as an error bar."""
    count = len(labels)
    width = 0.8 / max(count, 1)
    figure, axis = plt.subplots(figsize=(8.5, 4.8))
    colours = plt.get_cmap("tab10")
    for index, label in enumerate(labels):
        xs, heights, hatches, errors = [], [], [], []
        for group, fig in enumerate(figures):
            value = fig.ratios[index]
            x = group + (index - (count - 1) / 2) * width
            if value is None:
                axis.text(x, 0.02, "n/a", ha="center", va="bottom", fontsize=7,
                          rotation=90)
                continue
            xs.append(x)
            heights.append(value)
            estimated = bool(fig.estimated and fig.estimated[index])
            hatches.append("//" if estimated else "")
            band = fig.bands[index] if fig.bands else None
            errors.append((value - band[0], band[1] - value) if band else (0.0, 0.0))
        bars = axis.bar(xs, heights, width=width * 0.95, color=colours(index % 10),
                        label=label, edgecolor="black", linewidth=0.5)
        for bar, hatch in zip(bars, hatches, strict=True):
            bar.set_hatch(hatch)
        banded = [(x, h, e) for x, h, e in zip(xs, heights, errors, strict=True) if any(e)]
        if banded:
            axis.errorbar([b[0] for b in banded], [b[1] for b in banded],
                          yerr=[[b[2][0] for b in banded], [b[2][1] for b in banded]],
                          fmt="none", ecolor="black", capsize=3, linewidth=1)
        for x, height in zip(xs, heights, strict=True):
            axis.text(x, height, f"{height:.2f}", ha="center", va="bottom", fontsize=7)
    axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.set_xticks(range(len(figures)), [f.title for f in figures])
    axis.set_ylabel(f"ratio to the baseline ({baseline} = 1)")
    axis.set_title("The seeds' three figures, each as a ratio to the baseline"
                   + (f"\n{note}" if note else ""), fontsize=10)
    axis.set_ylim(bottom=0)
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
