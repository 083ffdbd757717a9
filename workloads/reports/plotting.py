"""What every report's plots share: the embedded-PNG record, log axes with plain tick
labels, the percentile axes of a latency spectrum, and saving a figure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter

DPI = 110
SPECTRUM_NINES = 6  # the spectrum's x axis goes to 99.9999% at most


@dataclass(frozen=True)
class Plot:
    """A PNG of the bundle: its file name, caption, and bytes as base64 for embedding."""

    file: str
    title: str
    caption: str
    base64: str


def log_tick_label(value: float, _: object) -> str:
    """1, 2, 5, 10, 20, 50…: plain numbers, and only those (minor ticks stay readable)."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** np.floor(np.log10(value))
    return f"{value:g}" if round(mantissa, 6) in (1.0, 2.0, 5.0) else ""


def plain_log_axis(axis: Any) -> None:
    """Log-scale latency ticks as plain numbers (50, 100, 200) rather than 10^2."""
    axis.yaxis.set_major_formatter(FuncFormatter(log_tick_label))
    axis.yaxis.set_minor_formatter(FuncFormatter(log_tick_label))


def save(figure: Figure, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def percentile_axes(axis: Any, widest: int, ylabel: str) -> None:
    """Log-log axes of a latency spectrum: 90%, 99%, ... up to 10**widest on x."""
    axis.set_xscale("log")
    axis.set_yscale("log")
    plain_log_axis(axis)
    axis.xaxis.set_major_locator(FixedLocator([10.0**k for k in range(widest + 1)]))
    axis.xaxis.set_major_formatter(FuncFormatter(_percentile_label))
    axis.xaxis.set_minor_locator(FixedLocator([]))
    axis.set_xlabel("percentile")
    axis.set_ylabel(ylabel)


def _percentile_label(x: float, _: object) -> str:
    nines = np.log10(x)
    if nines < 0.5:
        return "0%"
    return f"{100 - 100 / x:.{max(0, round(nines) - 2)}f}%"
