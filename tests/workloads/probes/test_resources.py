from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from socialbench.stack.servers import ServerProcess, free_port, memcached_command, redis_command
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.probes.resources import ResourceSampler

BUSY_PARENT_AND_CHILD = """
import subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "x = bytearray(64 << 20); import time; time.sleep(30)"]
)
end = time.time() + 30
while time.time() < end:
    pass
"""


def test_cpu_and_peak_memory_of_a_process_tree_are_measured() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY_PARENT_AND_CHILD])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)  # let the child allocate
        with ResourceSampler({"busy": ("service", busy.pid), "idle": ("store", idle.pid)},
                             interval_s=0.2) as sampler:
            time.sleep(1.5)
        usage = {u.name: u for u in sampler.usage}
    finally:
        busy.kill()
        idle.kill()
    assert usage["busy"].processes == 2
    assert usage["busy"].cpu_seconds > 0.5
    assert usage["idle"].cpu_seconds < 0.2
    assert usage["busy"].peak_rss_bytes > 64 << 20
    assert sampler.total_cpu_seconds == usage["busy"].cpu_seconds + usage["idle"].cpu_seconds


def test_busy_cores_is_the_cpu_a_process_tree_uses_now() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY_PARENT_AND_CHILD])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        busy_cores = ResourceSampler({"busy": ("service", busy.pid)}).busy_cores(0.5)
        idle_cores = ResourceSampler({"idle": ("store", idle.pid)}).busy_cores(0.5)
    finally:
        busy.kill()
        idle.kill()
    # One process spinning (its child sleeps): at most a core, however busy the machine.
    assert busy_cores < 1.3
    assert idle_cores < 0.05 and busy_cores > max(0.05, 5 * idle_cores)


def _hammer(port: int, command: bytes, times: int) -> None:
    """Send ``command`` ``times`` times on one connection, each answer read before the next."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(times):
            sock.sendall(command)
            sock.recv(65536)


def test_the_units_of_redis_and_memcached_are_their_serving_threads(tmp_path: Path) -> None:
    redis = ServerProcess(redis_command(free_port(), tmp_path / "redis"), tmp_path / "r.log")
    memcached = ServerProcess(memcached_command(free_port(), memory_mb=16, threads=3),
                              tmp_path / "m.log")
    try:
        redis.wait_ready()
        memcached.wait_ready()
        with ResourceSampler({"redis": ("store", redis.process.pid),
                              "memcached": ("store", memcached.process.pid)}) as sampler:
            _hammer(redis.command.port, b"PING\r\n", 3000)
            _hammer(memcached.command.port, b"version\r\n", 3000)
        usage = {u.name: u for u in sampler.usage}
    finally:
        redis.stop()
        memcached.stop()
    [command_thread] = usage["redis"].units
    assert command_thread.role == "command thread" and command_thread.capacity_cores == 1
    assert command_thread.unit == f"pid {redis.process.pid} (redis-server) command thread"
    # memcached: its 3 worker threads and the main thread that accepts, one core each.
    roles = sorted(u.role for u in usage["memcached"].units)
    assert roles == ["thread", "worker thread", "worker thread", "worker thread"]
    # One connection is served by one worker: it did the work.
    busiest = max(usage["memcached"].units, key=lambda u: u.cpu_seconds)
    assert busiest.role == "worker thread" and busiest.cpu_seconds > 0
    assert sum(u.cpu_seconds for u in usage["memcached"].units) <= (
        usage["memcached"].cpu_seconds + 0.02)


def test_a_python_process_is_one_unit_of_one_core() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY_PARENT_AND_CHILD])
    try:
        time.sleep(0.3)
        with ResourceSampler({"busy": ("service", busy.pid)}, interval_s=0.2) as sampler:
            time.sleep(1.0)
    finally:
        busy.kill()
    [usage] = sampler.usage
    parent, child = usage.units
    assert parent.unit.startswith(f"pid {busy.pid} (")
    assert (parent.role, parent.capacity_cores, child.role) == ("process", 1.0, "process")
    assert parent.cpu_seconds > child.cpu_seconds  # the parent spins, the child sleeps
    assert parent.cpu_seconds + child.cpu_seconds <= usage.cpu_seconds + 0.02


def test_the_cpus_the_processes_may_use_and_how_busy_they_were() -> None:
    cpu = usable_cpus()[0]
    busy = subprocess.Popen([sys.executable, "-c", BUSY_PARENT_AND_CHILD])
    try:
        os.sched_setaffinity(busy.pid, [cpu])
        time.sleep(0.3)
        with ResourceSampler({"busy": ("service", busy.pid)}, interval_s=0.2) as sampler:
            time.sleep(1.0)
    finally:
        busy.kill()
    assert sampler.cpus == [cpu]
    # Its one CPU: busy with the spinning process at least (and whatever else ran there).
    assert sampler.cpus_busy_cores is not None and 0.3 < sampler.cpus_busy_cores <= 1.0
