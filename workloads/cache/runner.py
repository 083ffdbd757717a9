"""``run_cache``/``run_many``: start the generator processes, start them together, merge.

As the HTTP driver's runner: the parent sends no load; it starts ``threads`` processes
per server (``python -m socialbench.workloads.cache``, talking over a socket pair, so no
caller's ``__main__`` is re-imported), waits until all have connected and prefilled,
gives them one start time, and merges their reports (HdrHistograms add exactly).
``run_many`` drives several servers at once (``cache scale``): one result per server.
An energy meter, when given, is entered when the measured window opens (after the
warm-up) and exited when it closes (after the test time, or when the last result of a
request-count run is in).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait

from socialbench.errors import SocialbenchError
from socialbench.workloads.cache.config import CacheConfig
from socialbench.workloads.cache.energy import Meter, OpsEnergy
from socialbench.workloads.cache.result import CacheResult, build_result
from socialbench.workloads.cache.worker import WorkerReport
from socialbench.workloads.driver.runner import await_ready, stop_workers

START_MARGIN_S = 0.2
READY_TIMEOUT_S = 300.0  # importing, connecting, prefilling and building the streams
FINISH_GRACE_S = 60.0


class CacheLoadError(SocialbenchError, RuntimeError):
    """The generator could not run (no connection, a process failed, died or hung)."""


@dataclass
class _Worker:
    run: int  # which config of run_many
    index: int
    process: subprocess.Popen[bytes]
    pipe: Pipe


def run_cache(config: CacheConfig, meter: Meter | None = None) -> CacheResult:
    """One run against one server; blocks for the prefill plus the run.

    With a ``meter``, the result carries the energy of the measured window per operation.
    """
    result = run_many([config], meter)[0]
    if meter is None:
        return result
    return result.model_copy(update={"energy": OpsEnergy.of(meter.reading, result.ops)})


def run_many(configs: list[CacheConfig], meter: Meter | None = None) -> list[CacheResult]:
    """Runs against several servers at the same time (one common start); one result each.

    ``meter`` (optional) is entered and exited around the measured window of them all.
    """
    configs = [c if c.seed is not None else c.model_copy(update={"seed": secrets.randbits(31)})
               for c in configs]
    workers: list[_Worker] = []
    try:
        for number, config in enumerate(configs):
            payload = config.model_dump_json()
            for index in range(config.threads):
                worker = _start_worker(number, index)
                workers.append(worker)
                worker.pipe.send(("config", payload))
        await_ready(workers, _receive, CacheLoadError, "generator", READY_TIMEOUT_S)
        start_ns = time.perf_counter_ns() + int(START_MARGIN_S * 1e9)
        started_at = datetime.now(UTC) + timedelta(seconds=START_MARGIN_S)
        for worker in workers:
            worker.pipe.send(("start", start_ns))
        longest = max(c.warmup_s + (c.test_time_s or 0) + c.timeout_s for c in configs)
        with _MeteredWindow(meter, *_window(configs, start_ns)) as window:
            reports = _collect(workers, longest, window)
    except BaseException:
        stop_workers(workers, 0.0)
        raise
    stop_workers(workers, 5.0)
    loadavg = os.getloadavg()
    return [
        build_result(config, sorted((r for n, r in reports if n == number),
                                    key=lambda r: r.index),
                     started_at=started_at, loadavg=loadavg)
        for number, config in enumerate(configs)
    ]


def _start_worker(run: int, index: int) -> _Worker:
    parent_end, child_end = socket.socketpair()
    with child_end:
        fd = child_end.fileno()
        process = subprocess.Popen(
            [sys.executable, "-m", "socialbench.workloads.cache", str(fd), str(index)],
            pass_fds=(fd,),
        )
    return _Worker(run, index, process, Pipe(parent_end.detach()))


def _receive(worker: _Worker) -> tuple[str, object]:
    try:
        message: tuple[str, object] = worker.pipe.recv()
    except (EOFError, ConnectionError):
        try:
            code = worker.process.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        raise CacheLoadError(f"generator process {worker.index} closed its pipe "
                             f"(exit code {code})") from None
    if message[0] == "error":
        raise CacheLoadError(str(message[1]))
    return message


def _window(configs: list[CacheConfig], start_ns: int) -> tuple[int, int | None]:
    """When the measured window opens and closes (None: when the last result is in)."""
    if all(c.test_time_s is not None for c in configs):
        opens = min(c.warmup_s for c in configs)
        closes = max(c.warmup_s + (c.test_time_s or 0) for c in configs)
        return start_ns + int(opens * 1e9), start_ns + int(closes * 1e9)
    # A count run may end before a busy collector wakes at start_ns; the meter then never
    # opened. So it opens now, before the workers start (its window has START_MARGIN_S more).
    return start_ns - int(START_MARGIN_S * 1e9), None


class _MeteredWindow:
    """Enters the meter when the window opens and exits it when it closes, as time passes."""

    def __init__(self, meter: Meter | None, opens_ns: int, closes_ns: int | None) -> None:
        self.meter = meter
        self.opens_ns = opens_ns
        self.closes_ns = closes_ns
        self.opened = self.closed = meter is None

    def advance(self) -> float | None:
        """Open or close the meter when due; seconds until the next change (None: none)."""
        now = time.perf_counter_ns()
        if not self.opened and now >= self.opens_ns:
            assert self.meter is not None
            self.meter.__enter__()
            self.opened = True
        if self.opened and not self.closed and self.closes_ns is not None \
                and now >= self.closes_ns:
            self._close()
        if not self.opened:
            return (self.opens_ns - now) / 1e9
        if not self.closed and self.closes_ns is not None:
            return max(self.closes_ns - now, 0) / 1e9
        return None

    def _close(self) -> None:
        assert self.meter is not None
        self.meter.__exit__(None, None, None)
        self.closed = True

    def __enter__(self) -> _MeteredWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.opened and not self.closed:  # a count run's end, or an error
            self._close()


def _collect(workers: list[_Worker], run_s: float,
             window: _MeteredWindow) -> list[tuple[int, WorkerReport]]:
    # A request-count run has no known length: wait as long as replies come (the workers
    # give up by themselves after their timeout without one).
    deadline = time.monotonic() + run_s + FINISH_GRACE_S
    running = {worker.pipe: worker for worker in workers}
    reports: list[tuple[int, WorkerReport]] = []
    while running:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and all(w.process.poll() is not None for w in running.values()):
            raise CacheLoadError("generator processes ended without a result")
        timeout = max(remaining, 1.0)
        next_change = window.advance()
        if next_change is not None:
            timeout = min(timeout, next_change)
        for pipe in wait(list(running), timeout):
            worker = running[pipe]  # type: ignore[index]
            kind, body = _receive(worker)
            if kind == "result":
                assert isinstance(body, WorkerReport)
                reports.append((worker.run, body))
                del running[pipe]  # type: ignore[arg-type]
    return reports


