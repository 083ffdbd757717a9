"""Baseline of the stack: wrk (closed loop) against the front end, and CPU per request.

    .venv/bin/socialbench up --fresh && .venv/bin/socialbench seed --posts-per-user 5
    .venv/bin/python bench/stack.py [--connections 32] [--duration 20] [--data-dir .socialbench]

For each workload (read-home-timeline, read-user-timeline, compose-post) it writes the
requests of that workload's one definition (``socialbench.workloads``) into a wrk Lua
script that cycles through them, runs ``wrk --latency``, and measures the CPU seconds of
every process of the local stack over the run (psutil). Prints requests/s, latency
percentiles, and stack CPU per request, and writes them to
``results/bench-stack-<time>.json``. Not a test: numbers depend on the machine and on
what else runs on it (the load average is printed beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from socialbench.workloads.definitions.core import load_workload

from socialbench.stack.local import LocalStack

WORKLOADS = ("read-home-timeline", "read-user-timeline", "compose-post")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--data-dir", type=Path, default=Path(".socialbench"))
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--duration", type=int, default=20, help="seconds per workload")
    parser.add_argument("--users", type=int, default=962)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    for name in args.workloads:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(wrk_script(name, args.users, 5000, seed=len(rows) + 1))
        sampler = LocalStack(args.data_dir).sampler()
        if sampler is None:
            raise SystemExit(f"no local stack runs from {args.data_dir}: socialbench up first")
        load_before = os.getloadavg()[0]
        with sampler:
            wrk = subprocess.run(
                ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s",
                 "--latency", "-s", script.name, args.url],
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
    out = Path("results") / f"bench-stack-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"connections": args.connections, "threads": args.threads,
                               "duration_s": args.duration, "rows": rows}, indent=2))
    print(f"written {out}")


if __name__ == "__main__":
    main()
