"""bench hop: every server started, called at the rate, their CPU per call measured."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from socialbench.bench.hop import HopBench, cpu_clock, cpu_seconds, measure, run, running


def test_every_server_gets_every_call_and_their_cpu_is_measured(tmp_path: Path) -> None:
    # Where there is no schedstat the kernel counts a process's CPU in 10 ms ticks: 40
    # calls of the bare server took less than one on a fast VM, so enough calls.
    config = HopBench(rates=(300.0,), duration_s=1.0, warmup_calls=5, results_dir=tmp_path)

    rows = measure(config)

    assert [(row.server, row.rate) for row in rows] == [
        ("unique-id", 300.0), ("bare", 300.0), ("protocol", 300.0), ("raw", 300.0),
        ("uvicorn", 300.0)]
    for row in rows:
        assert 285 <= row.calls <= 300, row
        assert row.server_cpu_ms_per_call > 0, row


def test_each_connection_bound_is_measured_on_the_same_server(tmp_path: Path) -> None:
    config = HopBench(rates=(300.0,), duration_s=1.0, warmup_calls=5, servers=("bare",),
                      connection_requests=(0, 5), results_dir=tmp_path)  # CPU ticks: above

    rows = measure(config)

    assert [(row.server, row.connection_requests) for row in rows] == [("bare", 0), ("bare", 5)]
    for row in rows:
        assert 285 <= row.calls <= 300, row
        assert row.server_cpu_ms_per_call > 0 and row.client_cpu_ms_per_call > 0, row


def test_the_results_say_how_the_cpu_was_counted(tmp_path: Path) -> None:
    config = HopBench(rates=(300.0,), duration_s=1.0, warmup_calls=5, servers=("raw",),
                      results_dir=tmp_path)

    written = json.loads(run(config).read_text())

    assert written["cpu_clock"] == cpu_clock()
    assert written["cpu_clock"] == ("schedstat" if os.path.exists("/proc/self/schedstat")
                                    else "ticks")
    assert [row["server"] for row in written["rows"]] == ["raw"]


def test_cpu_is_counted_in_nanoseconds_where_linux_gives_them() -> None:
    process = psutil.Process()
    if not os.path.exists(f"/proc/{process.pid}/schedstat"):
        pytest.skip("no schedstat here: ticks only")
    before = cpu_seconds(process)
    start = time.thread_time()
    while time.thread_time() - start < 0.002:  # 2 ms of this thread's CPU, however preempted
        pass
    time.sleep(0.01)  # a running thread's count is brought up to date when it sleeps
    used = cpu_seconds(process) - before
    assert 0.0015 < used < 0.5  # the 2 ms seen, not rounded to a 10 ms tick or to 0


def test_a_server_that_does_not_start_says_why(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="nope exited") as caught, running("nope", tmp_path):
        pass
    assert "nope" in str(caught.value).split(":", 1)[1]
