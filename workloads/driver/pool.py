"""The connection pool: hands each due request to a free connection, or queues or drops it.

Fixed mode (wrk2's ``-c``): ``size`` connections; a request due while all are busy waits
in a FIFO queue (still timed from its intended time). Growing mode: starts at ``size``,
opens another connection whenever a request finds none free, up to ``max_size``; a request
that finds the pool full is dropped and counted. Idle connections are used in turn
(FIFO), so load spreads over all of them and over the server's workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from socialbench.workloads.driver.config import Target
from socialbench.workloads.driver.http import Connection, State
from socialbench.workloads.driver.stats import OK_BELOW, Failure, RunStats

clock = time.perf_counter_ns
# Module constants, not ``State.BUSY`` on the hot path: an Enum member lookup through its
# class costs about 0.1 µs on Python 3.11, ten times a global's.
BUSY, IDLE = State.BUSY, State.IDLE


class RequestQueue:
    """Requests waiting for a connection, oldest first: intended times and bytes.

    Two deques of untracked objects (ints, bytes) rather than one of tuples: a backlog of
    hundreds of thousands of tuples would make every full garbage collection scan them
    all, stalling the loop for tens of milliseconds again and again.
    """

    __slots__ = ("_data", "intended")

    def __init__(self) -> None:
        self.intended: deque[int] = deque()
        self._data: deque[bytes] = deque()

    def __len__(self) -> int:
        return len(self.intended)

    def append(self, intended_ns: int, data: bytes) -> None:
        self.intended.append(intended_ns)
        self._data.append(data)

    def popleft(self) -> tuple[int, bytes]:
        return self.intended.popleft(), self._data.popleft()

    def clear(self) -> None:
        self.intended.clear()
        self._data.clear()


class PoolConnectError(ConnectionError):
    """Not one connection could be made at the start; the message says why."""


class Pool:
    """Connections to one target, and the requests waiting for them."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: Target,
        stats: RunStats,
        *,
        size: int,
        max_size: int | None,
        timeout_ns: int,
    ) -> None:
        self.loop = loop
        self.target = target
        self.stats = stats
        self.size = size
        self.max_size = max_size or size
        self.growing = max_size is not None
        self.timeout_ns = timeout_ns
        self.slots: list[Connection] = []
        self.down: list[Connection] = []
        self.idle: deque[Connection] = deque()
        self.queue = RequestQueue()
        self.connecting = 0
        self.busy = 0
        self.peak_open = 0
        self.closing = False
        self.drained: asyncio.Event | None = None  # set once nothing is left in flight or queued
        # The sender's: called after a response once its next request is due.
        self.after_response: Callable[[int], None] = _nothing
        self.next_due_ns = 0
        self._record_latency = stats.latency.record
        self._record_service = stats.service.record

    @property
    def open(self) -> int:
        return len(self.slots) - len(self.down) - self.connecting

    async def start(self) -> None:
        """Open the first ``size`` connections; an error if none of them could be made."""
        for _ in range(self.size):
            self._open_one()
        tasks = [c.connect_task for c in self.slots if c.connect_task is not None]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        if not self.idle:
            errors = [r for r in results if isinstance(r, BaseException)]
            reason = f": {errors[0]}" if errors else ""
            raise PoolConnectError(
                f"cannot connect to {self.target.host}:{self.target.port}{reason}"
            )

    def submit(self, intended_ns: int, data: bytes, measured: bool, now_ns: int) -> None:
        """Send ``data`` now on a free connection, or queue it, or drop it (growing mode, full)."""
        if not self.idle:
            self._wait_for_connection(intended_ns, data, measured)
            return
        self._send(self.idle.popleft(), data, intended_ns, measured, now_ns)

    def sweep(self, now_ns: int) -> None:
        """Time out requests and connect attempts older than the timeout."""
        limit = now_ns - self.timeout_ns
        for conn in self.slots:
            if conn.state is BUSY and conn.sent_ns < limit:
                self.busy -= 1
                self.stats.on_failure(Failure.TIMEOUT, conn.measured)
                conn.abort()
            elif conn.state is State.CONNECTING and conn.started_ns < limit:
                conn.connect_task.cancel()  # type: ignore[union-attr]
        self._check_drained()

    async def drain(self, until_ns: int) -> None:
        """Wait until every sent or queued request has an outcome, or until ``until_ns``."""
        self.drained = asyncio.Event()
        self._check_drained()
        timeout_s = max(0.0, (until_ns - clock()) / 1e9)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained.wait(), timeout_s)

    def finish(self) -> None:
        """End of run: whatever is still unanswered or unsent counts as a timeout; close all."""
        self.closing = True
        window_start = self.stats.window_start_ns
        for intended_ns in self.queue.intended:
            self.stats.on_failure(Failure.TIMEOUT, intended_ns >= window_start)
        self.queue.clear()
        for conn in self.slots:
            if conn.state is BUSY:
                self.busy -= 1
                self.stats.on_failure(Failure.TIMEOUT, conn.measured)
            if conn.state is State.CONNECTING:
                conn.connect_task.cancel()  # type: ignore[union-attr]
            conn.abort()
        self.idle.clear()

    # connection events

    def on_connected(self, conn: Connection) -> None:
        self.connecting -= 1
        self.peak_open = max(self.peak_open, self.open)
        if self.closing:
            conn.abort()
            return
        self._next_or_idle(conn, clock())

    def on_response(self, conn: Connection, status: int, keep_alive: bool) -> None:
        # The hot path: RunStats.on_response is inlined here.
        now = clock()
        if conn.state is not BUSY:  # an answer nobody asked for
            conn.abort()
            return
        self.busy -= 1
        conn.served += 1
        stats = self.stats
        stats.second_completed += 1
        if stats.window_start_ns <= now < stats.window_end_ns:
            stats.completed_in_window += 1
        if conn.measured:
            self._record_latency(now - conn.intended_ns)
            self._record_service(now - conn.sent_ns)
            if status < OK_BELOW:
                stats.ok += 1
            else:
                stats.on_status_error(status)
        else:
            stats.latency.record_unmeasured(now - conn.intended_ns)
            stats.service.record_unmeasured(now - conn.sent_ns)
            if status >= OK_BELOW:
                stats.second_errors += 1
        if keep_alive:
            self._next_or_idle(conn, now)
        else:
            conn.close()
        if now >= self.next_due_ns:
            self.after_response(now)
        if self.drained is not None:
            self._check_drained()

    def on_broken(self, conn: Connection) -> None:
        """An unparsable response: a read error for the request in flight."""
        if conn.state is BUSY:
            self.busy -= 1
            self.stats.on_failure(Failure.READ, conn.measured)
        conn.abort()
        self._check_drained()

    def on_lost(self, conn: Connection) -> None:
        if conn.state is BUSY:  # closed or reset under a request
            self.busy -= 1
            self.stats.on_failure(Failure.READ, conn.measured)
        elif conn.state is IDLE:
            self.idle.remove(conn)
        conn.state = State.DOWN
        self.down.append(conn)
        # Reconnect at once when there is work, or to keep a connection that served;
        # not after one that never served, so a server that closes on accept is no busy loop.
        if not self.closing and (self.queue or conn.served):
            self._open_one()
        self._check_drained()

    # internals

    def _wait_for_connection(self, intended_ns: int, data: bytes, measured: bool) -> None:
        # Every queued request should have a connection on its way, if the pool allows one.
        if self.connecting <= len(self.queue) and (self.down or len(self.slots) < self.max_size):
            self._open_one()
        if self.growing and self.connecting <= len(self.queue):
            self.stats.on_failure(Failure.DROPPED, measured)
            return
        if measured:
            self.stats.queued += 1
        self.queue.append(intended_ns, data)

    def _send(
        self, conn: Connection, data: bytes, intended_ns: int, measured: bool, now_ns: int
    ) -> None:
        self.busy += 1
        stats = self.stats
        stats.second_sent += 1
        if measured:
            stats.sent += 1
        conn.state = BUSY
        conn.intended_ns = intended_ns
        conn.measured = measured
        conn.sent_ns = now_ns
        conn.transport.write(data)  # type: ignore[union-attr]

    def _next_or_idle(self, conn: Connection, now_ns: int) -> None:
        if self.queue:
            intended_ns, data = self.queue.popleft()
            self._send(conn, data, intended_ns, intended_ns >= self.stats.window_start_ns, now_ns)
        else:
            conn.state = IDLE
            self.idle.append(conn)

    def _open_one(self) -> bool:
        if self.down:
            conn = self.down.pop()
        elif len(self.slots) < self.max_size:
            conn = Connection(self)
            self.slots.append(conn)
        else:
            return False
        conn.state = State.CONNECTING
        conn.started_ns = clock()
        self.connecting += 1
        connect = self.loop.create_connection(lambda: conn, self.target.host, self.target.port)
        task = self.loop.create_task(connect)
        task.add_done_callback(partial(self._on_connect_done, conn))
        conn.connect_task = task
        return True

    def _on_connect_done(self, conn: Connection, task: asyncio.Task[object]) -> None:
        conn.connect_task = None
        if not task.cancelled() and task.exception() is None:
            return  # on_connected has run
        self.connecting -= 1
        conn.state = State.DOWN
        self.down.append(conn)
        if self.closing:
            return
        # The request at the head of the queue was waiting for this connection.
        if self.queue and self.connecting < len(self.queue):
            intended_ns, _ = self.queue.popleft()
            self.stats.on_failure(Failure.CONNECT, intended_ns >= self.stats.window_start_ns)
        if self.queue and self.connecting < len(self.queue):
            self._open_one()
        self._check_drained()

    def _check_drained(self) -> None:
        if self.drained is not None and not self.busy and not self.queue:
            self.drained.set()


def _nothing(now_ns: int) -> None:
    return None
