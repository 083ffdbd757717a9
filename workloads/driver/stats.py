"""What one worker counts while it runs: outcomes of the measured requests, and per second.

A request is *measured* when its intended send time falls in the measurement window
(after the warm-up). Every measured request ends in exactly one outcome: a response
(ok, or an error status), a connect, read or timeout error, or dropped (the growing pool
was full). Latencies are recorded for every response, whatever its status.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum

from socialbench.workloads.driver.histogram import Recorder

OK_BELOW = 400  # wrk counts a status of 400 or more as an error ("Non-2xx or 3xx")


class Failure(StrEnum):
    """Why a request got no response."""

    CONNECT = "connect"  # no connection could be made for it
    READ = "read"  # the connection closed or broke (reset, bad response) before the answer
    TIMEOUT = "timeout"  # no answer in time, or still unsent when the run ended
    DROPPED = "dropped"  # the growing pool was at its maximum


class RunStats:
    """Counters and latency recorders of one worker."""

    def __init__(self, window_start_ns: int, window_end_ns: int) -> None:
        self.window_start_ns = window_start_ns
        self.window_end_ns = window_end_ns
        self.latency = Recorder()  # from the intended send time
        self.service = Recorder()  # from the actual send
        self.send_lag = Recorder()  # actual hand-over to the pool minus intended time

        self.scheduled = 0
        self.sent = 0
        self.ok = 0
        self.status_errors: Counter[int] = Counter()
        self.failures: Counter[Failure] = Counter()
        self.queued = 0  # measured requests that waited for a free connection
        self.completed_in_window = 0  # responses (any request) received inside the window
        self.in_flight_at_start = 0

        self.second_sent = 0
        self.second_completed = 0
        self.second_errors = 0

    # Pool.on_response counts responses itself (the hot path); errors come here.

    def on_status_error(self, status: int) -> None:
        """A measured response with an error status."""
        self.second_errors += 1
        self.status_errors[status] += 1

    def on_failure(self, kind: Failure, measured: bool) -> None:
        self.second_errors += 1
        if measured:
            self.failures[kind] += 1

    def take_second(self) -> tuple[int, int, int]:
        """Sent, completed and errors since the last call."""
        counts = (self.second_sent, self.second_completed, self.second_errors)
        self.second_sent = self.second_completed = self.second_errors = 0
        return counts
