"""One driver process: its share of the rate and connections, on its own uvloop event loop.

The parent (:mod:`socialbench.workloads.driver.runner`) starts P of these, waits for each
to connect, then sends them one start time; each sends a :class:`SecondReport` every
second and a :class:`WorkerReport` at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe

import uvloop

from socialbench.workloads.definitions.core import Workload, load_workload
from socialbench.workloads.driver.config import Distribution, LoadConfig, share
from socialbench.workloads.driver.histogram import encode
from socialbench.workloads.driver.hostload import run_queue_wait_s
from socialbench.workloads.driver.http import RequestEncoder
from socialbench.workloads.driver.pool import Pool
from socialbench.workloads.driver.schedule import NS_PER_S, Schedule
from socialbench.workloads.driver.stats import RunStats
from socialbench.workloads.driver.timer import Waker, prefer_short_waits

clock = time.perf_counter_ns

QUANTUM_NS = 100_000  # timer wake-ups at most every 100 µs; requests due in between wait for it
MAX_BATCH = 256  # requests handed over per wake-up before responses get a turn
FLUSH_S = 0.05  # how often samples go into histograms (many short pauses, not one long)


@dataclass
class SecondReport:
    """One worker's second: counts, and the second's latency and send-lag histograms."""

    worker: int
    second: int  # 1 = the first second after the start (warm-up included)
    sent: int
    completed: int
    errors: int
    latency: str  # encoded HdrHistogram, µs, from the intended send time
    send_lag: str
    connections: int
    in_flight: int
    queued: int
    cpu_s: float = 0.0  # CPU time of the worker during the second


@dataclass
class WorkerReport:
    """One worker's totals for its measured requests."""

    worker: int
    scheduled: int
    sent: int
    ok: int
    status_errors: dict[int, int]
    failures: dict[str, int]
    queued: int
    completed_in_window: int
    in_flight_at_start: int  # sent and unanswered when the window opened (from the warm-up)
    in_flight_at_end: int  # sent and unanswered when it closed
    peak_connections: int
    latency: str
    service_time: str
    send_lag: str
    cpu_s: float  # over its sending time (warm-up and window)
    precise_timer: bool
    sending_s: float = 0.0  # wall time from the start to the end of the window (cpu_s too)
    wait_s: float | None = None  # time in a run queue meanwhile (None: not measurable)
    cpus: list[int] | None = None  # the CPUs it could run on


class Sender:
    """Hands each request to the pool at its intended time; never moves the schedule."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: Pool,
        stats: RunStats,
        workload: Workload,
        rng: random.Random,
        encoder: RequestEncoder,
        schedule: Schedule,
    ) -> None:
        self.pool = pool
        self.stats = stats
        self.workload = workload
        self.rng = rng
        self.encoder = encoder
        self.schedule = schedule
        self.fixed = encoder(workload.next_request(rng)) if workload.fixed else None
        self.next_ns = pool.next_due_ns = schedule.next()
        self.done: asyncio.Future[None] = loop.create_future()
        self.finished = False
        self.waker = Waker(loop, self._wake)
        pool.after_response = self._send_due  # called once a response finds a request due

    def start(self) -> None:
        self.waker.wake_by(self.next_ns)

    def stop(self, end_ns: int) -> None:
        """End the measured window at ``end_ns`` (the parent was told to stop early, its
        warm-up included): what is due before it is still sent, nothing after."""
        stats = self.stats
        stats.window_end_ns = max(stats.window_start_ns, min(stats.window_end_ns, end_ns))
        if not self.finished and self.next_ns >= stats.window_end_ns:
            self._finish()

    def _finish(self) -> None:
        self.finished = True
        self.waker.close()
        self.done.set_result(None)

    def _wake(self) -> None:
        self._send_due(clock())

    def _send_due(self, now: int) -> None:
        if self.finished:
            return
        stats, pool, schedule = self.stats, self.pool, self.schedule
        window_start, window_end = stats.window_start_ns, stats.window_end_ns
        record_lag, record_warmup_lag = stats.send_lag.record, stats.send_lag.record_unmeasured
        due = self.next_ns
        batch = 0
        while due <= now:
            data = self.fixed or self.encoder(self.workload.next_request(self.rng))
            now = clock()
            if due >= window_start:
                if not stats.scheduled:
                    stats.in_flight_at_start = pool.busy
                stats.scheduled += 1
                record_lag(now - due)
                pool.submit(due, data, True, now)
            else:
                record_warmup_lag(now - due)
                pool.submit(due, data, False, now)
            due = schedule.next()
            if due >= window_end:
                self.next_ns = pool.next_due_ns = due
                self._finish()
                return
            batch += 1
            if batch == MAX_BATCH:
                break
        self.next_ns = pool.next_due_ns = due
        self.waker.wake_by(now if due <= now else max(due, now + QUANTUM_NS))


def serve_as_worker(run: Callable[[str, int, Pipe], None]) -> None:
    """A worker process's entry (argv: FD INDEX, FD the parent's socket): the config, then run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    fd, index = int(sys.argv[1]), int(sys.argv[2])
    control = Pipe(fd)
    kind, config_json = control.recv()
    if kind != "config":
        raise SystemExit(f"expected the run's config first, got {kind!r}")
    run(config_json, index, control)


def main() -> None:
    """``python -m socialbench.workloads.driver FD INDEX``."""
    serve_as_worker(worker_main)


def worker_main(config_json: str, index: int, control: Pipe) -> None:
    """Run, then send ``("result", WorkerReport)`` or ``("error", text)`` to the parent."""
    _raise_open_files_limit()
    prefer_short_waits()
    try:
        config = LoadConfig.model_validate_json(config_json)
        if config.cpus:  # before the loop starts any thread: they all inherit it
            os.sched_setaffinity(0, config.cpus)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            report = runner.run(_run(config, index, control))
        control.send(("result", report))
    except Exception as exc:  # reported to the parent, which raises it
        detail = "".join(traceback.format_exception_only(exc)).strip()
        with contextlib.suppress(OSError):  # a parent that is gone hears nothing
            control.send(("error", f"driver process {index}: {detail}\n{traceback.format_exc()}"))
    finally:
        control.close()


async def _run(config: LoadConfig, index: int, control: Pipe) -> WorkerReport:
    loop = asyncio.get_running_loop()
    processes = config.processes
    target = config.target
    seed = config.seed or 0
    workload = load_workload(config.workload, users=config.users, path=target.path)
    stats = RunStats(0, 0)
    max_size = config.max_connections
    pool = Pool(
        loop,
        target,
        stats,
        size=share(config.connections, processes, index),
        max_size=share(max_size, processes, index) if max_size else None,
        timeout_ns=int(config.timeout_s * NS_PER_S),
    )
    await pool.start()
    control.send(("ready", None))
    message, start_ns = await receive_control(loop, control)
    if message != "start":
        raise RuntimeError(f"expected a start time from the parent, got {message!r}")

    stats.window_start_ns = start_ns + int(config.warmup_s * NS_PER_S)
    stats.window_end_ns = stats.window_start_ns + int(config.duration_s * NS_PER_S)
    # Constant arrivals of the P processes interleave evenly; Poisson streams just add up.
    phase_ns = 0
    if config.distribution is Distribution.CONSTANT:
        phase_ns = int(index * NS_PER_S / config.rate)
    schedule = Schedule(
        config.rate / processes,
        config.distribution,
        start_ns,
        random.Random(f"schedule:{seed}:{index}"),
        phase_ns,
    )
    sender = Sender(
        loop,
        pool,
        stats,
        workload,
        random.Random(f"workload:{seed}:{index}"),
        RequestEncoder(target, config.absolute_form),
        schedule,
    )
    gc.freeze()  # start-up objects never need scanning again: shorter collections mid-run
    ticker = SecondTicker(index, start_ns, pool, stats, control)
    ticking = loop.create_task(ticker.run())
    maintaining = loop.create_task(_maintain(pool, stats))
    cpu_start, wait_start, wall_start = time.process_time(), run_queue_wait_s(), clock()
    parent_gone = _watch_parent(loop, control, sender)
    sender.start()
    try:
        await asyncio.wait([sender.done, parent_gone], return_when=asyncio.FIRST_COMPLETED)
        if not sender.done.done():
            parent_gone.result()  # a message out of place raises here
            raise ParentGone("the parent closed the control socket: load stopped")
        in_flight_at_end = pool.busy
        cpu_s = time.process_time() - cpu_start
        sending_s = (clock() - wall_start) / NS_PER_S
        wait_end = run_queue_wait_s()
        wait_s = wait_end - wait_start if wait_start is not None and wait_end is not None else None
        await pool.drain(until_ns=stats.window_end_ns + pool.timeout_ns)
    finally:
        loop.remove_reader(control.fileno())
        ticking.cancel()
        maintaining.cancel()
        pool.finish()
    ticker.send()
    report = _report(index, stats, pool, in_flight_at_end, cpu_s, sender.waker.precise)
    report.sending_s, report.wait_s = sending_s, wait_s
    return report


def _report(
    index: int, stats: RunStats, pool: Pool, in_flight_at_end: int, cpu_s: float, precise: bool
) -> WorkerReport:
    for recorder in (stats.latency, stats.service, stats.send_lag):
        recorder.flush()
    return WorkerReport(
        worker=index,
        scheduled=stats.scheduled,
        sent=stats.sent,
        ok=stats.ok,
        status_errors=dict(stats.status_errors),
        failures={str(kind): count for kind, count in stats.failures.items()},
        queued=stats.queued,
        completed_in_window=stats.completed_in_window,
        in_flight_at_start=stats.in_flight_at_start,
        in_flight_at_end=in_flight_at_end,
        peak_connections=pool.peak_open,
        latency=encode(stats.latency.total),
        service_time=encode(stats.service.total),
        send_lag=encode(stats.send_lag.total),
        cpu_s=cpu_s,
        precise_timer=precise,
        cpus=sorted(os.sched_getaffinity(0)),
    )


class ParentGone(RuntimeError):
    """The parent went away mid-run (killed, say): nobody is left to stop this load."""


def _watch_parent(
    loop: asyncio.AbstractEventLoop, control: Pipe, sender: Sender
) -> asyncio.Future[None]:
    """Done when the parent's end of the control socket closes (it was killed: the load
    must stop). Mid-run the parent sends only ``("stop", end_ns)``, to end the window early."""
    gone: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        try:
            kind, value = control.recv()
        except (EOFError, OSError):
            kind, value = "gone", None
        if kind == "stop" and isinstance(value, int):
            sender.stop(value)
            return
        loop.remove_reader(control.fileno())
        if not gone.done():
            if kind == "gone":
                gone.set_result(None)
            else:
                gone.set_exception(RuntimeError(f"unexpected {kind!r} from the parent mid-run"))

    loop.add_reader(control.fileno(), on_readable)
    return gone


async def receive_control(loop: asyncio.AbstractEventLoop, control: Pipe) -> tuple[str, int]:
    """The parent's next message, without blocking the loop."""
    readable: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(control.fileno(), on_readable)
    try:
        await readable
    finally:
        loop.remove_reader(control.fileno())
    message: tuple[str, int] = control.recv()
    return message


class SecondTicker:
    """Sends a :class:`SecondReport` at each whole second after the start, and a last one."""

    def __init__(
        self, index: int, start_ns: int, pool: Pool, stats: RunStats, control: Pipe
    ) -> None:
        self.index = index
        self.start_ns = start_ns
        self.pool = pool
        self.stats = stats
        self.control = control
        self.second = 1
        self.cpu_s = time.process_time()

    async def run(self) -> None:
        while True:
            due_ns = self.start_ns + self.second * NS_PER_S
            await asyncio.sleep(max(0.0, (due_ns - clock()) / NS_PER_S))
            self.send()

    def send(self) -> None:
        """Report the time since the last report as the next second."""
        stats, pool = self.stats, self.pool
        sent, completed, errors = stats.take_second()
        cpu_s, self.cpu_s = self.cpu_s, time.process_time()
        report = SecondReport(
            worker=self.index,
            second=self.second,
            sent=sent,
            completed=completed,
            errors=errors,
            latency=encode(stats.latency.take_interval()),
            send_lag=encode(stats.send_lag.take_interval()),
            connections=pool.open,
            in_flight=pool.busy,
            queued=len(pool.queue),
            cpu_s=self.cpu_s - cpu_s,
        )
        self.control.send(("second", report))
        self.second += 1


async def _maintain(pool: Pool, stats: RunStats) -> None:
    """Move samples into histograms in small steps; time out what waited too long.

    The timeout sweep visits every connection, so it runs only every 1/20 of the timeout
    (timeouts are that precise), not to pause a pool of thousands every few milliseconds.
    """
    sweep_every_ns = int(min(max(pool.timeout_ns / 20, FLUSH_S * NS_PER_S), NS_PER_S))
    next_sweep_ns = clock() + sweep_every_ns
    while True:
        await asyncio.sleep(FLUSH_S)
        for recorder in (stats.latency, stats.service, stats.send_lag):
            recorder.flush()
        now = clock()
        if now >= next_sweep_ns:
            pool.sweep(now)
            next_sweep_ns = now + sweep_every_ns


def _raise_open_files_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
