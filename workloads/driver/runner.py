"""``run_load``: start the worker processes, start them together, collect and merge.

The parent sends no load itself: it starts P workers (``python -m
socialbench.workloads.driver``, each with R/P of the rate and its share of the
connections), waits until every one has connected, gives them one common start time
(``perf_counter_ns`` is the system-wide monotonic clock on Linux), merges their
per-second reports into the live timeline, and their final reports into a
:class:`LoadResult`. Workers are plain subprocesses talking over a socket pair, so the
caller's ``__main__`` is never re-imported and any caller (a CLI, a ramp, a test) works.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from typing import Protocol, TypeVar

from socialbench.errors import SocialbenchError
from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.hostload import HostSampler, usable_cpus
from socialbench.workloads.driver.result import (
    HostInfo,
    LoadResult,
    SecondStats,
    build_result,
    merge_seconds,
)
from socialbench.workloads.driver.worker import SecondReport, WorkerReport

START_MARGIN_S = 0.1  # between sending the start time and the start, for every worker to get it
READY_TIMEOUT_S = 60.0  # starting Python, importing and connecting
FINISH_GRACE_S = 30.0  # beyond warm-up + duration + timeout before workers count as hung
STOP_POLL_S = 0.2  # how soon a stop asked (``run_load``'s ``stop``) reaches the workers

SecondCallback = Callable[[SecondStats], None]


class DriverError(SocialbenchError, RuntimeError):
    """The driver could not run (a worker could not connect, failed, died or hung)."""


class StoppedBeforeWindow(SocialbenchError, RuntimeError):
    """The run was stopped (``run_load``'s ``stop``) before its measured window began."""


class WorkerProcess(Protocol):
    """A worker subprocess and the pipe to it (the driver's and the cache generator's)."""

    process: subprocess.Popen[bytes]
    pipe: Pipe


W = TypeVar("W", bound=WorkerProcess)


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    pipe: Pipe

    def describe_exit(self) -> str:
        try:
            code = self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        return f"driver process {self.index} closed its pipe (exit code {code})"


def run_load(
    config: LoadConfig, on_second: SecondCallback | None = None,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Run one open-loop load and return its merged result.

    Blocks for about ``warmup_s + duration_s`` (plus up to ``timeout_s`` while the last
    requests drain, plus about a second to start the processes). ``on_second`` is called
    in this process with each second's merged stats, for a live display. A ``seed`` of
    ``None`` is replaced by a random one, kept in ``result.config``. Raises
    :class:`DriverError` when the target refuses every connection at the start or a
    worker fails.

    ``stop`` (set from a signal handler, say) ends the run early: the workers send
    nothing more, the requests in flight drain as at the end, and the result is that of
    the shorter window (``stopped_early``); :class:`StoppedBeforeWindow` if it had not
    begun.
    """
    if config.seed is None:
        config = config.model_copy(update={"seed": secrets.randbits(32)})
    host = HostInfo.now()
    workers: list[_Worker] = []
    try:
        payload = config.model_dump_json()
        for index in range(config.processes):
            workers.append(_start_worker(index))
        for worker in workers:
            worker.pipe.send(("config", payload))
        await_ready(workers, _receive, DriverError, "driver")
        start_ns = time.perf_counter_ns() + int(START_MARGIN_S * 1e9)
        started_at = datetime.now(UTC) + timedelta(seconds=START_MARGIN_S)
        # /proc over the sending time (warm-up and window), on the CPUs the driver may use.
        sampler = HostSampler(list(config.cpus or usable_cpus()), time.monotonic() + START_MARGIN_S,
                              config.warmup_s + config.duration_s)
        for worker in workers:
            worker.pipe.send(("start", start_ns))
        with sampler:
            reports, timeline, stopped_ns = _collect(workers, config, on_second, sampler, stop)
        elapsed_s = (time.perf_counter_ns() - start_ns) / 1e9
    except BaseException:
        stop_workers(workers, wait_s=0.0)
        raise
    stop_workers(workers, wait_s=5.0)
    window_s = config.duration_s
    if stopped_ns is not None:
        window_start_ns = start_ns + int(config.warmup_s * 1e9)
        window_s = min(window_s, max(0, stopped_ns - window_start_ns) / 1e9)
        if window_s == 0:
            raise StoppedBeforeWindow(
                f"stopped {(stopped_ns - start_ns) / 1e9:.1f} s into the "
                f"{config.warmup_s:g} s warm-up: nothing was measured")
    host = host.model_copy(update={"loadavg_end": os.getloadavg()})
    return build_result(
        config, reports, timeline, started_at=started_at, elapsed_s=elapsed_s, host=host,
        host_load=sampler.load(), window_s=window_s,
    )


def _start_worker(index: int) -> _Worker:
    parent_end, child_end = socket.socketpair()
    with child_end:
        fd = child_end.fileno()
        process = subprocess.Popen(
            [sys.executable, "-m", "socialbench.workloads.driver", str(fd), str(index)],
            pass_fds=(fd,),
        )
    return _Worker(index, process, Pipe(parent_end.detach()))


def _receive(worker: _Worker) -> tuple[str, object]:
    try:
        message: tuple[str, object] = worker.pipe.recv()
    except (EOFError, ConnectionError):
        raise DriverError(worker.describe_exit()) from None
    if message[0] == "error":
        raise DriverError(str(message[1]))
    return message


def await_ready(workers: Sequence[W], receive: Callable[[W], tuple[str, object]],
                error: type[Exception], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until every worker said "ready"; ``error`` on a timeout or another message."""
    deadline = time.monotonic() + timeout_s
    waiting = {worker.pipe: worker for worker in workers}
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise error(f"{len(waiting)} {what} processes not ready in {timeout_s:g} s")
        for pipe in wait(list(waiting), remaining):
            kind, _ = receive(waiting[pipe])  # type: ignore[index]
            if kind != "ready":
                raise error(f"unexpected {kind!r} from a {what} process before the start")
            del waiting[pipe]  # type: ignore[arg-type]


def _collect(
    workers: list[_Worker], config: LoadConfig, on_second: SecondCallback | None,
    sampler: HostSampler, stop: threading.Event | None,
) -> tuple[list[WorkerReport], list[SecondStats], int | None]:
    """The workers' final reports, the merged timeline, and when a stop was sent (if one)."""
    run_s = config.warmup_s + config.duration_s + config.timeout_s + START_MARGIN_S
    deadline = time.monotonic() + run_s + FINISH_GRACE_S
    running = {worker.pipe: worker for worker in workers}
    reports: list[WorkerReport] = []
    pending: dict[int, list[SecondReport]] = {}
    timeline: list[SecondStats] = []
    stopped_ns: int | None = None

    def _emit(stats: SecondStats) -> None:
        stats.host_busy = sampler.last_second_busy
        timeline.append(stats)
        if on_second is not None:
            on_second(stats)

    while running:
        if stop is not None and stop.is_set() and stopped_ns is None:
            stopped_ns = time.perf_counter_ns()
            for worker in running.values():
                with contextlib.suppress(OSError):  # one that just finished has closed its end
                    worker.pipe.send(("stop", stopped_ns))
            sampler.end = min(sampler.end, time.monotonic())
            deadline = min(deadline, time.monotonic() + config.timeout_s + FINISH_GRACE_S)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DriverError(f"driver processes still running {FINISH_GRACE_S} s after the end")
        watching = stop is not None and stopped_ns is None
        for pipe in wait(list(running), min(remaining, STOP_POLL_S) if watching else remaining):
            kind, body = _receive(running[pipe])  # type: ignore[index]
            if kind == "result":
                assert isinstance(body, WorkerReport)
                reports.append(body)
                del running[pipe]  # type: ignore[arg-type]
            elif kind == "second":
                assert isinstance(body, SecondReport)
                seconds = pending.setdefault(body.second, [])
                seconds.append(body)
                if len(seconds) == len(workers):
                    _emit(merge_seconds(pending.pop(body.second), config.warmup_s))
    # The last second of a worker that finished draining earlier than the others.
    for second in sorted(pending):
        _emit(merge_seconds(pending[second], config.warmup_s))
    reports.sort(key=lambda r: r.worker)
    return reports, timeline, stopped_ns


def stop_workers(workers: Sequence[WorkerProcess], wait_s: float) -> None:
    """Let finished workers exit (up to ``wait_s``), terminate the rest."""
    deadline = time.monotonic() + wait_s
    for worker in workers:
        try:
            worker.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.terminate()
            try:
                worker.process.wait(5.0)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        worker.pipe.close()
