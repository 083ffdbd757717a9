"""The host's speed, measured with fixed work: how fast this machine is right now.

A ramp's number is the stack's and the host's together, and a host's speed drifts.
:func:`calibrate` times three parts, about 0.2 s on a quiet host: ``cpu`` (a pure-Python
loop, one process per CPU at once), ``loopback`` (256-byte round trips over TCP to an
echo process, both ends polling their sockets, so no CPU idles between messages) and
``memory`` (64 MiB copies); :func:`calibrate_start`, the run's reference, is the median
of three. A speed against a reference is the geometric mean of the parts' ratios (1.0
unchanged, 0.8 a fifth slower). The parts are processes started with ``python -S``, not
forked (the ramp has threads). How much a host moves: docs/performance.md, "The host's
speed".
"""

from __future__ import annotations

import math
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from socialbench.errors import SocialbenchError

CPU_ROUNDS = 90_000  # iterations of the CPU loop per process: about 60 ms on a 2020s core
# Each part is timed in blocks and the median block counts: a blip of another process
# moves one block, a lasting load moves them all.
CPU_BLOCKS = 3
LOOPBACK_BLOCKS = 3
ROUND_TRIPS = 1_500
MESSAGE_BYTES = 256
MEMORY_BYTES = 64 * 1024 * 1024
MEMORY_COPIES = 4
START_TIMEOUT_S = 10.0
START_CALIBRATIONS = 3  # the run's reference is the median of this many
PARTS = ("cpu", "loopback", "memory")

# The CPU loop: the same in every process and every run (changing it changes the unit).
# argv: the iterations per block, and the blocks.
_CPU_CHILD = """
import sys, time
def work(rounds):
    table = {}
    total = 0
    for i in range(rounds):
        key = "k%d" % (i & 1023)
        table[key] = table.get(key, 0) + i
        total += len(key) + (i ^ (i >> 3)) % 7
    return total
work(200)
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
rounds, blocks = int(sys.argv[1]), int(sys.argv[2])
times = []
for _ in range(blocks):
    started = time.perf_counter_ns()
    work(rounds)
    times.append(time.perf_counter_ns() - started)
sys.stdout.write(" ".join(map(str, times)) + "\\n"); sys.stdout.flush()
"""

_ECHO_CHILD = """
import socket, sys
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
sys.stdout.write("%d\\n" % server.getsockname()[1]); sys.stdout.flush()
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
conn.setblocking(False)
while True:
    try:
        data = conn.recv(65536)
    except BlockingIOError:
        continue
    if not data:
        break
    conn.sendall(data)
"""


class CalibrationError(SocialbenchError, RuntimeError):
    """The calibration could not run (a child process failed or hung)."""


class Calibration(BaseModel):
    """One measurement of the host's speed with fixed work (higher is faster)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    measured_at: datetime
    cpu_rounds_per_s: float = Field(description="The CPU loop's iterations per second, per "
                                                "process, mean over one process per CPU.")
    cpu_processes: int = Field(description="CPU loop processes run at once (the machine's CPUs).")
    loopback_round_trips_per_s: float = Field(
        description=f"{MESSAGE_BYTES}-byte request/answer round trips per second over TCP "
                    "on 127.0.0.1.")
    memory_bytes_per_s: float = Field(description="Bytes copied per second (64 MiB buffers).")
    seconds: float = Field(description="Wall time the calibration took, processes included.")

    def parts(self) -> dict[str, float]:
        return {"cpu": self.cpu_rounds_per_s, "loopback": self.loopback_round_trips_per_s,
                "memory": self.memory_bytes_per_s}

    def ratios_to(self, reference: Calibration) -> dict[str, float]:
        """Each part's speed over the reference's (1.1: 10% faster)."""
        mine, theirs = self.parts(), reference.parts()
        return {part: mine[part] / theirs[part] for part in PARTS}

    def speed_relative_to(self, reference: Calibration) -> float:
        """The host's speed over the reference's: the geometric mean of the parts' ratios."""
        ratios = self.ratios_to(reference).values()
        return math.exp(sum(math.log(r) for r in ratios) / len(PARTS))


def _child(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-S", "-c", code, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _read_line(process: subprocess.Popen[str], what: str) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    line = process.stdout.readline() if ready else ""
    if not line:
        process.kill()
        raise CalibrationError(f"the calibration's {what} process gave no answer "
                               f"(exit code {process.poll()})")
    return line.strip()


def measure_cpu(processes: int) -> float:
    """The CPU loop in ``processes`` processes at once: mean iterations per second each."""
    children = [_child(_CPU_CHILD, CPU_ROUNDS // CPU_BLOCKS, CPU_BLOCKS)
                for _ in range(processes)]
    try:
        for child in children:
            _read_line(child, "CPU")
        for child in children:  # all start within microseconds of each other
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        blocks_ns = [[int(ns) for ns in _read_line(child, "CPU").split()] for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    rounds = CPU_ROUNDS // CPU_BLOCKS
    return statistics.mean(rounds * 1e9 / statistics.median(ns) for ns in blocks_ns)


def measure_loopback() -> float:
    """Round trips per second of a small request and its answer over loopback TCP."""
    echo = _child(_ECHO_CHILD)
    try:
        port = int(_read_line(echo, "echo"))
        with socket.create_connection(("127.0.0.1", port), timeout=START_TIMEOUT_S) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setblocking(False)  # both ends poll: no CPU goes idle between messages
            message = b"x" * MESSAGE_BYTES
            buffer = bytearray(MESSAGE_BYTES)
            view = memoryview(buffer)
            per_block = ROUND_TRIPS // LOOPBACK_BLOCKS
            blocks_ns = []
            for _ in range(LOOPBACK_BLOCKS):
                started = time.perf_counter_ns()
                for _ in range(per_block):
                    conn.sendall(message)
                    got = 0
                    while got < MESSAGE_BYTES:
                        try:
                            n = conn.recv_into(view[got:])
                        except BlockingIOError:
                            continue
                        if not n:
                            raise CalibrationError("the calibration's echo process hung up")
                        got += n
                blocks_ns.append(time.perf_counter_ns() - started)
    except OSError as exc:
        raise CalibrationError(f"the calibration's loopback part failed: {exc}") from exc
    finally:
        echo.kill()
        echo.wait()
    return per_block * 1e9 / statistics.median(blocks_ns)


def measure_memory() -> float:
    """Bytes copied per second between two 64 MiB buffers (pages touched beforehand)."""
    source = bytearray(b"\x5a") * MEMORY_BYTES
    target = bytearray(MEMORY_BYTES)
    target[:] = source
    started = time.perf_counter_ns()
    for _ in range(MEMORY_COPIES):
        target[:] = source
    elapsed_ns = time.perf_counter_ns() - started
    return MEMORY_BYTES * MEMORY_COPIES * 1e9 / elapsed_ns


def machine_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def median_of(calibrations: list[Calibration]) -> Calibration:
    """One calibration of each part's median (the time of the last; the seconds of all)."""
    return Calibration(
        measured_at=calibrations[-1].measured_at,
        cpu_rounds_per_s=statistics.median(c.cpu_rounds_per_s for c in calibrations),
        cpu_processes=calibrations[-1].cpu_processes,
        loopback_round_trips_per_s=statistics.median(
            c.loopback_round_trips_per_s for c in calibrations),
        memory_bytes_per_s=statistics.median(c.memory_bytes_per_s for c in calibrations),
        seconds=sum(c.seconds for c in calibrations),
    )


def calibrate_start(times: int = START_CALIBRATIONS) -> Calibration:
    """The reference of a run: the median of ``times`` calibrations, so that one disturbed
    measurement does not move every later step's speed."""
    return median_of([calibrate() for _ in range(times)])


def calibrate(cpu_processes: int | None = None) -> Calibration:
    """Measure the host's speed now (about 0.2 s on a quiet host)."""
    started = time.perf_counter()
    processes = cpu_processes or machine_cpus()
    cpu = measure_cpu(processes)
    loopback = measure_loopback()
    memory = measure_memory()
    return Calibration(
        measured_at=datetime.now(UTC), cpu_rounds_per_s=cpu, cpu_processes=processes,
        loopback_round_trips_per_s=loopback, memory_bytes_per_s=memory,
        seconds=time.perf_counter() - started,
    )
