"""One generator process (memtier's thread): ``clients`` connections on one uvloop loop.

The parent (:mod:`socialbench.workloads.cache.runner`) starts ``threads`` of these per
server. Each connects, prefills its share of the key range (if asked), builds its
request stream, says it is ready, waits for the common start time, runs, and reports
its counts and HdrHistograms.

Closed loop (memtier's way): each connection keeps ``pipeline`` requests in flight and
sends one more for every reply; latency counts from the send. Open loop (``rate``):
requests are due on a fixed schedule (the HTTP driver's :class:`Schedule` and timerfd
:class:`Waker`), handed to a connection with fewer than ``pipeline`` in flight, queued
while none has room; latency counts from the intended time, whatever happened since.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import resource
import time
import traceback
from array import array
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe

import numpy as np
import uvloop

from socialbench.workloads.cache.client import CacheConnection, clock
from socialbench.workloads.cache.config import CacheConfig
from socialbench.workloads.cache.protocol import (
    CODE_BITS,
    ERROR,
    HIT,
    MAX_STREAM_BYTES,
    MISS,
    PARSERS,
    SET_OK,
    OpStream,
    build_prefill,
    build_stream,
    request_bytes,
)
from socialbench.workloads.driver.config import Distribution
from socialbench.workloads.driver.histogram import Recorder, encode, new_histogram, record_many
from socialbench.workloads.driver.schedule import NS_PER_S, Schedule
from socialbench.workloads.driver.timer import Waker, prefer_short_waits
from socialbench.workloads.driver.worker import receive_control, serve_as_worker

QUANTUM_NS = 100_000  # open loop: timer wake-ups at most every 100 µs
MAX_BATCH = 4096  # open loop: requests moved to the backlog per wake-up
FLUSH_S = 0.05
START_SPIN_NS = 2_000_000  # spin the last 2 ms before the start: every process starts together
STALL_S = 0.25  # how often a request-count run checks that replies still come


class PrefillFailed(RuntimeError):
    """The prefill got no replies, or a connection broke; the parent gets the message."""


class OpRecorder:
    """Samples ``(ns << 2) | code`` appended on the hot path; :meth:`flush` sorts them out."""

    def __init__(self) -> None:
        self._pending = array("q")
        self.record = self._pending.append
        self.set = new_histogram()
        self.get = new_histogram()
        self.all = new_histogram()
        self.counts = [0, 0, 0, 0]  # SET_OK, HIT, MISS, ERROR

    def flush(self) -> None:
        if not self._pending:
            return
        values = np.frombuffer(self._pending, dtype=np.int64).copy()
        del self._pending[:]
        codes = values & ((1 << CODE_BITS) - 1)
        micros = (values >> CODE_BITS) // 1000
        for code, count in enumerate(np.bincount(codes, minlength=4).tolist()):
            self.counts[code] += count
        record_many(micros[codes == SET_OK], self.set, self.all)
        record_many(micros[(codes == HIT) | (codes == MISS)], self.get, self.all)


@dataclass
class WorkerReport:
    """One process's totals over its measured requests (latencies in encoded histograms)."""

    index: int
    sets: int
    hits: int
    misses: int
    errors: int  # error replies (NOT_STORED, SERVER_ERROR, -ERR ...)
    lost: int  # in flight on a connection that closed or broke
    timeouts: int  # no reply within the timeout after the end, or never sent (open loop)
    scheduled: int  # open loop: requests due in the window
    elapsed_s: float  # request-count runs: start to last reply
    latency_set: str
    latency_get: str
    latency_all: str
    send_lag: str
    cpu_s: float
    precise_timer: bool
    prefill_keys: int
    prefill_s: float
    problems: list[str] = field(default_factory=list)


class Phase:
    """What the connections do now; the connections call back on replies and losses."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conns: list[CacheConnection],
                 recorder: OpRecorder, window_start_ns: int) -> None:
        self.conns = conns
        self.recorder = recorder
        self.record = recorder.record
        self.window_start_ns = window_start_ns
        self.done: asyncio.Future[None] = loop.create_future()
        self.active = 0
        self.replies = 0
        self.last_reply_ns = 0
        self.lost = 0
        self.problems: list[str] = []

    def attach(self, stream: OpStream, cursors: list[int]) -> None:
        for conn, cursor in zip(self.conns, cursors, strict=True):
            conn.use(self, stream, cursor)

    def on_replies(self, conn: CacheConnection, count: int, now: int) -> None:
        raise NotImplementedError

    def finish_connection(self, conn: CacheConnection) -> None:
        if not conn.done:
            conn.done = True
            self.active -= 1
            if self.active <= 0 and not self.done.done():
                self.done.set_result(None)

    def on_lost(self, conn: CacheConnection) -> None:
        if conn.times:
            self.lost += len(conn.times)
            conn.times.clear()
            self.problems.append(f"connection {conn.index} closed with requests in flight")
        self.finish_connection(conn)

    def on_broken(self, conn: CacheConnection, detail: str) -> None:
        self.problems.append(f"connection {conn.index}: {detail}")


class ClosedLoop(Phase):
    """``pipeline`` in flight per connection, one more per reply, until the end or the count."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conns: list[CacheConnection],
                 recorder: OpRecorder, window_start_ns: int, pipeline: int,
                 end_ns: int | None, counts: list[int] | None) -> None:
        super().__init__(loop, conns, recorder, window_start_ns)
        self.pipeline = pipeline
        self.end_ns = end_ns
        self.counts = counts

    def start(self) -> None:
        self.active = len(self.conns)
        for j, conn in enumerate(self.conns):
            if self.counts is not None:
                conn.remaining = self.counts[j]
                first = min(self.pipeline, conn.remaining)
                conn.remaining -= first
            else:
                first = self.pipeline
            if first:
                conn.send(first, clock())
            else:
                self.finish_connection(conn)

    def on_replies(self, conn: CacheConnection, count: int, now: int) -> None:
        self.replies += count
        self.last_reply_ns = now
        if self.end_ns is not None:
            if now < self.end_ns:
                conn.send(count, clock())
                return
        else:
            more = min(count, conn.remaining)
            if more:
                conn.remaining -= more
                conn.send(more, clock())
                return
        if not conn.times:
            self.finish_connection(conn)


class OpenLoop(Phase):
    """Requests due on a schedule go to connections with room; the rest wait in a backlog."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conns: list[CacheConnection],
                 recorder: OpRecorder, window_start_ns: int, window_end_ns: int,
                 pipeline: int, schedule: Schedule, lag: Recorder) -> None:
        super().__init__(loop, conns, recorder, window_start_ns)
        self.window_end_ns = window_end_ns
        self.pipeline = pipeline
        self.schedule = schedule
        self.lag = lag
        self.backlog: deque[int] = deque()
        self.scheduled = 0
        self.finished_sending = False
        self.next_ns = schedule.next()
        self.waker = Waker(loop, self._send_due)
        self.turn = 0

    def start(self) -> None:
        self.active = len(self.conns)
        self.waker.wake_by(self.next_ns)

    def _send_due(self) -> None:
        if self.finished_sending:
            return
        now = clock()
        due = self.next_ns
        backlog, schedule = self.backlog, self.schedule
        window_start, window_end = self.window_start_ns, self.window_end_ns
        record_lag, record_warmup_lag = self.lag.record, self.lag.record_unmeasured
        batch = 0
        while due <= now and batch < MAX_BATCH:
            backlog.append(due)
            if due >= window_start:
                self.scheduled += 1
                record_lag(now - due)
            else:
                record_warmup_lag(now - due)
            due = schedule.next()
            batch += 1
            if due >= window_end:
                self.finished_sending = True
                self.waker.close()
                break
        self.next_ns = due
        self.dispatch()
        if self.finished_sending:
            self._check_done()
        else:
            self.waker.wake_by(now if due <= now else max(due, now + QUANTUM_NS))

    def dispatch(self) -> None:
        backlog = self.backlog
        conns = self.conns
        count = len(conns)
        pipeline = self.pipeline
        popleft = backlog.popleft
        for step in range(count):
            if not backlog:
                break
            conn = conns[(self.turn + step) % count]
            if conn.lost:
                continue
            room = pipeline - len(conn.times)
            if room <= 0:
                continue
            take = min(room, -(-len(backlog) // (count - step)))
            conn.send_at([popleft() for _ in range(take)], take)
        self.turn = (self.turn + 1) % count

    def on_replies(self, conn: CacheConnection, count: int, now: int) -> None:
        self.replies += count
        self.last_reply_ns = now
        if self.backlog:
            self.dispatch()
        if self.finished_sending:
            self._check_done()

    def _check_done(self) -> None:
        if not self.backlog and all(not c.times for c in self.conns) \
                and not self.done.done():
            self.done.set_result(None)

    def on_lost(self, conn: CacheConnection) -> None:
        super().on_lost(conn)
        self.dispatch()


def main() -> None:
    """``python -m socialbench.workloads.cache FD INDEX``."""
    serve_as_worker(worker_main)


def worker_main(config_json: str, index: int, control: Pipe) -> None:
    """Run, then send ``("result", WorkerReport)`` or ``("error", text)`` to the parent."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    prefer_short_waits()
    try:
        config = CacheConfig.model_validate_json(config_json)
        if config.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {config.cpus[index % len(config.cpus)]})
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            report = runner.run(_run(config, index, control))
        control.send(("result", report))
    except PrefillFailed as exc:
        control.send(("error", f"cache generator process {index}: {exc}"))
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(exc)).strip()
        control.send(("error", f"cache generator process {index}: {detail}\n"
                               f"{traceback.format_exc()}"))
    finally:
        control.close()


def split(total: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` near-equal contiguous shares of ``range(total)``."""
    base, extra = divmod(total, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


async def _connect(loop: asyncio.AbstractEventLoop, config: CacheConfig) -> list[CacheConnection]:
    parse = PARSERS[config.protocol]
    conns = [CacheConnection(j, parse) for j in range(config.clients)]
    for conn in conns:
        await loop.create_connection(lambda c=conn: c, config.server, config.port)  # type: ignore[misc]
    return conns


async def _prefill(loop: asyncio.AbstractEventLoop, config: CacheConfig, index: int,
                   conns: list[CacheConnection]) -> tuple[int, float, list[str]]:
    """Set this process's share of the key range once, pipelined; nothing is recorded.

    In batches of at most MAX_STREAM_BYTES of requests (large values, many keys)."""
    first, last = split(config.key_count, config.threads, index)
    if last <= first:
        return 0, 0.0, []
    batch = max(MAX_STREAM_BYTES // request_bytes(config)[0], 1)
    started = clock()
    errors = 0
    for low in range(first, last, batch):
        high = min(low + batch, last)
        stream = build_prefill(config, config.key_minimum + low, config.key_minimum + high - 1)
        shares = [split(high - low, len(conns), j) for j in range(len(conns))]
        phase = ClosedLoop(loop, conns, OpRecorder(), window_start_ns=0,
                           pipeline=config.prefill_pipeline, end_ns=None,
                           counts=[b - a for a, b in shares])
        phase.attach(stream, [a for a, _ in shares])
        phase.start()
        await _await_progress(phase, config.timeout_s)
        speaks = f"does {config.address} speak {config.protocol.value}?"
        if phase.active:
            raise PrefillFailed(f"prefill stalled: no reply for {config.timeout_s} s ({speaks})")
        if phase.problems:  # a connection broke or the server answered gibberish
            raise PrefillFailed(f"prefill failed: {'; '.join(phase.problems[:3])} ({speaks})")
        phase.recorder.flush()
        errors += phase.recorder.counts[ERROR]
    problems = [f"prefill had {errors} error replies"] if errors else []
    return last - first, (clock() - started) / NS_PER_S, problems


async def _await_progress(phase: Phase, stall_s: float) -> None:
    """Until the phase is done, or no reply came for ``stall_s``."""
    last_seen, last_change = -1, time.monotonic()
    while not phase.done.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(phase.done), STALL_S)
        if phase.replies != last_seen:
            last_seen, last_change = phase.replies, time.monotonic()
        elif time.monotonic() - last_change > stall_s:
            return


async def _run(config: CacheConfig, index: int, control: Pipe) -> WorkerReport:
    loop = asyncio.get_running_loop()
    seed = config.seed or 0
    conns = await _connect(loop, config)
    prefill_keys, prefill_s = 0, 0.0
    problems: list[str] = []
    if config.prefill:
        prefill_keys, prefill_s, problems = await _prefill(loop, config, index, conns)
    for conn in conns:
        conn.times.clear()
    stream = build_stream(config, seed * 1000 + index)
    control.send(("ready", None))
    message, start_ns = await receive_control(loop, control)
    if message != "start":
        raise RuntimeError(f"expected a start time from the parent, got {message!r}")
    # Spread the connections of every process evenly over the stream, on block boundaries.
    total = config.threads * config.clients
    stride = max(stream.length // total // stream.period, 1) * stream.period
    cursors = [((index * config.clients + j) * stride) % stream.length
               for j in range(config.clients)]
    recorder, lag = OpRecorder(), Recorder()
    window_start = start_ns + int(config.warmup_s * NS_PER_S) if config.timed else start_ns
    window_end = window_start + int((config.test_time_s or 0) * NS_PER_S)
    phase: ClosedLoop | OpenLoop
    precise = True
    if config.rate is not None:
        schedule = Schedule(config.rate / config.threads, Distribution.CONSTANT, start_ns,
                            random.Random(f"schedule:{seed}:{index}"),
                            int(index * NS_PER_S / config.rate))
        phase = OpenLoop(loop, conns, recorder, window_start, window_end, config.pipeline,
                         schedule, lag)
        precise = phase.waker.precise
    elif config.timed:
        phase = ClosedLoop(loop, conns, recorder, window_start, config.pipeline,
                           end_ns=window_end, counts=None)
    else:
        phase = ClosedLoop(loop, conns, recorder, window_start, config.pipeline,
                           end_ns=None, counts=[config.requests_per_client] * len(conns))
    phase.attach(stream, cursors)
    gc.collect()
    gc.freeze()
    await asyncio.sleep(max(0.0, (start_ns - START_SPIN_NS - clock()) / NS_PER_S))
    while clock() < start_ns:
        pass
    flushing = loop.create_task(_flush(recorder, lag))
    cpu_start = time.process_time()
    phase.start()
    try:
        if config.timed:
            remaining_s = (window_end - clock()) / NS_PER_S + config.timeout_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(phase.done), max(remaining_s, 0.0))
        else:
            await _await_progress(phase, config.timeout_s)
    finally:
        flushing.cancel()
    cpu_s = time.process_time() - cpu_start
    timeouts = sum(len(c.times) for c in conns)
    if isinstance(phase, OpenLoop):
        timeouts += len(phase.backlog)
        phase.waker.close()
    for conn in conns:
        if conn.transport is not None:
            conn.phase = None
            conn.transport.abort()
    recorder.flush()
    lag.flush()
    counts = recorder.counts
    end_ns = phase.last_reply_ns or clock()
    return WorkerReport(
        index=index,
        sets=counts[SET_OK],
        hits=counts[HIT],
        misses=counts[MISS],
        errors=counts[ERROR],
        lost=phase.lost,
        timeouts=timeouts,
        scheduled=phase.scheduled if isinstance(phase, OpenLoop) else 0,
        elapsed_s=max(end_ns - start_ns, 1) / NS_PER_S,
        latency_set=encode(recorder.set),
        latency_get=encode(recorder.get),
        latency_all=encode(recorder.all),
        send_lag=encode(lag.total),
        cpu_s=cpu_s,
        precise_timer=precise,
        prefill_keys=prefill_keys,
        prefill_s=prefill_s,
        problems=problems + phase.problems[:10],
    )


async def _flush(recorder: OpRecorder, lag: Recorder) -> None:
    while True:
        await asyncio.sleep(FLUSH_S)
        recorder.flush()
        lag.flush()


