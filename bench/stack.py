"""Baseline of the stack: wrk (closed loop) against the front end, and CPU per request.

    socialbench up --fresh && socialbench seed --posts-per-user 5
    socialbench bench stack [--connections 32] [--duration 20] [--data-dir .socialbench]

For each workload (read-home-timeline, read-user-timeline, compose-post) it writes the
requests of that workload's one definition (``socialbench.workloads``) into a wrk Lua
script that cycles through them, runs ``wrk --latency``, and measures the CPU seconds of
every process of the local stack over the run (psutil). Prints requests/s, latency
percentiles, and stack CPU per request, and writes them to
``results/bench-stack-<time>.json`` (``--results-dir``). Not a test: numbers depend on
the machine and on what else runs on it (the load average is printed beside them).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socialbench.stack.local import LocalStack
from socialbench.workloads.definitions.core import load_workload
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS

WORKLOADS = ("read-home-timeline", "read-user-timeline", "compose-post")


class NoStack(RuntimeError):
    """No local stack runs from the data directory given."""


@dataclass(frozen=True)
class StackBench:
    """What to run: wrk's connections, threads and time per workload, against which stack."""

    url: str = "http://127.0.0.1:8080"
    data_dir: Path = field(default=Path(".socialbench"))
    connections: int = 32
    threads: int = 2
    duration_s: int = 20  # per workload
    users: int = DEFAULT_USERS
    workloads: tuple[str, ...] = WORKLOADS
    results_dir: Path = field(default=Path("results"))
LUA = """
local parts = {{
{requests}
}}
local requests = {{}}
local i = 0
-- Formatted in init(): wrk.format needs the thread's host, not known at load time.
function init(args)
  for n, p in ipairs(parts) do requests[n] = wrk.format(p[1], p[2], p[3], p[4]) end
end
request = function()
  i = i % #requests + 1
  return requests[i]
end
"""


def lua_string(data: bytes) -> str:
    return '"' + "".join(f"\\{b:03d}" if b < 32 or b in (34, 92) or b > 126 else chr(b)
                         for b in data) + '"'


def wrk_script(workload_name: str, users: int, count: int, seed: int) -> str:
    """Lua that cycles through ``count`` requests drawn from the workload definition."""
    workload = load_workload(workload_name, users=users)
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        request = workload.next_request(rng)
        headers = "{" + ", ".join(f"[{lua_string(k.encode())}] = {lua_string(v.encode())}"
                                  for k, v in request.headers) + "}"
        body = lua_string(request.body) if request.body is not None else "nil"
        lines.append(f"  {{{lua_string(request.method.encode())}, "
                     f"{lua_string(request.path.encode())}, {headers}, {body}}},")
    return LUA.format(requests="\n".join(lines))


def parse_wrk(output: str) -> dict[str, Any]:
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
    result: dict[str, Any] = {}
    for percentile in ("50", "75", "90", "99"):
        match = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.MULTILINE)
        if match:
            result[f"p{percentile}_ms"] = float(match.group(1)) * units[match.group(2)]
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(r"Socket errors: (.+)", output)
    result["requests_per_s"] = float(rate.group(1)) if rate else 0.0
    result["requests"] = float(total.group(1)) if total else 0.0
    result["non_2xx"] = float(errors.group(1)) if errors else 0.0
    result["socket_errors"] = socket_errors.group(1) if socket_errors else ""
    return result


def run(config: StackBench) -> Path:
    """wrk each workload against the running stack, print and write the rows; the file."""
    rows: list[dict[str, Any]] = []
    for name in config.workloads:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(wrk_script(name, config.users, 5000, seed=len(rows) + 1))
        sampler = LocalStack(config.data_dir).sampler()
        if sampler is None:
            raise NoStack(f"no local stack runs from {config.data_dir}: socialbench up first")
        load_before = os.getloadavg()[0]
        with sampler:
            wrk = subprocess.run(
                ["wrk", f"-t{config.threads}", f"-c{config.connections}", f"-d{config.duration_s}s",
                 "--latency", "-s", script.name, config.url],
                capture_output=True, text=True, check=True,
            )
        os.unlink(script.name)
        row = {"workload": name, **parse_wrk(wrk.stdout), "load_average_before": load_before}
        row["stack_cpu_s"] = sampler.total_cpu_seconds
        row["stack_cpu_ms_per_request"] = (
            1e3 * sampler.total_cpu_seconds / row["requests"] if row["requests"] else None
        )
        top = sorted(sampler.usage, key=lambda u: u.cpu_seconds, reverse=True)[:4]
        row["top_cpu"] = {u.name: round(u.cpu_seconds, 2) for u in top}
        rows.append(row)
        print(f"{name:20s} {row['requests_per_s']:8.0f} req/s  p50 {row.get('p50_ms', 0):7.1f} ms"
              f"  p99 {row.get('p99_ms', 0):7.1f} ms  non-2xx {row['non_2xx']:.0f}"
              f"  stack CPU {row['stack_cpu_ms_per_request'] or 0:.2f} ms/req"
              f"  top {row['top_cpu']}  (load avg before {load_before:.1f})", flush=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = config.results_dir / f"bench-stack-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"connections": config.connections, "threads": config.threads,
                               "duration_s": config.duration_s, "rows": rows}, indent=2))
    print(f"written {out}")
    return out
