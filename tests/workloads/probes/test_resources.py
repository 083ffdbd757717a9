from __future__ import annotations

import subprocess
import sys
import time

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
