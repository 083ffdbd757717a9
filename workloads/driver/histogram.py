"""HdrHistograms of latencies in microseconds (1 µs to 1 h, 3 significant digits).

The hot path only appends nanosecond durations to an ``array``; :meth:`Recorder.flush`
moves them into the histograms in one vectorised step that computes exactly the bucket
``HdrHistogram.record_value`` would (``record_value`` costs about 2 µs a call in Python,
too much at tens of thousands of requests a second).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
NS_PER_US = 1000


def new_histogram() -> HdrHistogram:
    """An empty latency histogram in microseconds."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def encode(histogram: HdrHistogram) -> str:
    """The histogram in HdrHistogram's compressed V2 format, base64 (``HISTF…``)."""
    return str(histogram.encode().decode("ascii"))


def decode(encoded: str) -> HdrHistogram:
    """A histogram from :func:`encode`'s text."""
    histogram = new_histogram()
    histogram.decode_and_add(encoded)
    return histogram


def merge(encoded: Iterable[str]) -> HdrHistogram:
    """One histogram of every sample of the encoded ones (exact: counts add bucket by bucket)."""
    total = new_histogram()
    for text in encoded:
        total.decode_and_add(text)
    return total


def record_many(values_us: np.ndarray, *histograms: HdrHistogram) -> None:
    """Record integer microsecond ``values_us`` into each histogram as ``record_value`` would.

    Values are clamped to the trackable range. The histograms must share one layout (all
    come from :func:`new_histogram`): the bucket of each value is computed once for all.
    """
    if values_us.size == 0 or not histograms:
        return
    layout = histograms[0]
    values = np.clip(values_us, 0, HIGHEST_US).astype(np.int64, copy=False)
    # bit length of (value | sub_bucket_mask); exact through float64 for values below 2**53
    _, bit_length = np.frexp((values | layout.sub_bucket_mask).astype(np.float64))
    bucket = bit_length - (layout.unit_magnitude + layout.sub_bucket_half_count_magnitude + 1)
    sub_bucket = values >> (bucket + layout.unit_magnitude)
    index = ((bucket + 1) << layout.sub_bucket_half_count_magnitude) + (
        sub_bucket - layout.sub_bucket_half_count
    )
    # Only the buckets hit: adding a whole 23,552-bucket array per flush costs more.
    buckets, added = np.unique(index, return_counts=True)
    low, high, count = int(values.min()), int(values.max()), int(values.size)
    for histogram in histograms:
        counts = np.ctypeslib.as_array(histogram.counts)
        counts[buckets] += added.astype(counts.dtype, copy=False)
        histogram.total_count += count
        histogram.min_value = min(histogram.min_value, low)
        histogram.max_value = max(histogram.max_value, high)


class Recorder:
    """Collects nanosecond durations cheaply; :meth:`flush` moves them into histograms.

    ``record`` takes a measured sample (into the run's histogram and the current
    interval's); ``record_unmeasured`` one from the warm-up (the interval's only, so the
    live line shows the warm-up too). :meth:`take_interval` hands over the interval's.
    """

    __slots__ = ("_measured", "_unmeasured", "interval", "record", "record_unmeasured", "total")

    def __init__(self) -> None:
        self._measured = array("q")
        self._unmeasured = array("q")
        self.record = self._measured.append  # the hot path: one bound call per sample
        self.record_unmeasured = self._unmeasured.append
        self.total = new_histogram()
        self.interval = new_histogram()

    def flush(self) -> None:
        if self._measured:
            record_many(_to_us(self._measured), self.total, self.interval)
        if self._unmeasured:
            record_many(_to_us(self._unmeasured), self.interval)

    def take_interval(self) -> HdrHistogram:
        """Flush, then hand over the current interval's histogram and start a new one."""
        self.flush()
        interval, self.interval = self.interval, new_histogram()
        return interval


def _to_us(pending: array[int]) -> np.ndarray:
    # The floor division copies, so no view pins the array while it is emptied.
    values_us = np.frombuffer(pending, dtype=np.int64) // NS_PER_US
    del pending[:]
    return values_us
