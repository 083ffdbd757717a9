"""The arrival process: the intended send time of every request, fixed before the run starts.

Times are ``time.perf_counter_ns()`` values. The schedule never looks at what happened:
a late driver or a slow server does not move the next intended time.
"""

from __future__ import annotations

import random
from math import log

from socialbench.workloads.driver.config import Distribution

NS_PER_S = 1_000_000_000


class Schedule:
    """Intended send times at ``rate`` per second from ``start_ns`` (+ ``phase_ns``)."""

    __slots__ = ("_count", "_exponential", "_offset", "_period_ns", "_random", "_start")

    def __init__(
        self,
        rate: float,
        distribution: Distribution,
        start_ns: int,
        rng: random.Random,
        phase_ns: int = 0,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self._period_ns = NS_PER_S / rate
        self._exponential = distribution is Distribution.EXPONENTIAL
        self._random = rng.random
        self._start = start_ns + phase_ns
        self._count = 0
        # Exponential gaps accumulate as a float offset (ns from the start, exact to well
        # under 1 ns for days), so rounding never biases the rate.
        self._offset = 0.0
        if self._exponential:
            self._offset -= log(1.0 - self._random()) * self._period_ns

    def next(self) -> int:
        """The next intended send time."""
        if self._exponential:
            due_ns = self._start + int(self._offset)
            # random.expovariate's formula, inline: this runs once per request
            self._offset -= log(1.0 - self._random()) * self._period_ns
            return due_ns
        # Constant: from the start each time, so error never accumulates.
        due_ns = self._start + int(self._count * self._period_ns)
        self._count += 1
        return due_ns
