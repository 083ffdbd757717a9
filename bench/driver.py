"""How fast is the driver? Against nginx ``return 200`` on loopback, beside vegeta and wrk.

    socialbench bench driver [--duration 10] [--processes 1 --processes 2] [--rates 20000 ...]

For each driver process count, finds the highest rate at which the driver holds
achieved >= 99% of offered and send-lag p99 <= 1 ms (steps up, then bisects), then runs
vegeta (open loop, ~/go/bin/vegeta) at the same rate and wrk (closed loop: its ceiling)
with as many threads. ``--repeat N`` runs each rate N times and judges the median run
(by p99), since one stall of the machine can spoil one run. The table marks the runs that
also meet the issue's target, p99 <= 5 ms, and gives the CPU time the hypervisor stole
during each run (``/proc/stat``): a run with steal was not on a quiet machine. ``--pin``
puts a single driver process (and the tools compared beside it) on the first CPU and
nginx on the last. Prints a table with the load average seen, and writes it to
``results/bench-driver-<time>.json`` (``--results-dir``). Not a test: numbers depend on
the machine and on what else runs on it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from socialbench.bench.results import write_results
from socialbench.stack.servers import ServerCommand, ServerProcess, find_binary, free_port
from socialbench.workloads.driver import Distribution, LoadConfig, LoadResult, run_load

NGINX_CONF = """
daemon off;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{ return 200 "ok"; }}
    }}
}}
"""


TARGET_P99_MS = 5.0


@dataclass(frozen=True)
class DriverBench:
    """What to measure: per-process rates to try, how long, how often."""

    duration_s: float = 10.0
    warmup_s: float = 2.0
    connections: int = 128
    processes: tuple[int, ...] = (1, 2)
    rates: tuple[float, ...] = ()  # exact rates to try (no search)
    start: float = 30_000  # first rate per process
    step: float = 10_000  # step per process
    resolution: float = 2_500
    repeat: int = 1  # runs per rate; the median run (by p99) is judged
    distribution: Distribution = Distribution.EXPONENTIAL
    nginx_workers: int = 1
    pin: bool = False
    results_dir: Path = field(default=Path("results"))
    # What the driver sends (nginx answers every path): url, or a social network workload
    # such as mixed, whose requests cost the driver more to build.
    workload: str = "url"


@dataclass
class Row:
    tool: str
    processes: int
    offered_rps: float | None
    achieved_rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    send_lag_p99_ms: float | None
    cpu_percent: float | None
    ok: bool
    steal_percent: float | None = None
    note: str = ""

    @property
    def meets_target(self) -> bool:
        """The issue's target: held, with p99 <= 5 ms."""
        return self.ok and self.p99_ms <= TARGET_P99_MS


def start_nginx(workdir: Path, workers: int, cpus: set[int] | None) -> tuple[ServerProcess, str]:
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workers=workers, dir=workdir, port=port))
    nginx = find_binary("nginx")
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    command = ServerCommand("nginx", [*pin, nginx, "-p", str(workdir), "-c", str(conf), "-e",
                                      str(workdir / "error.log")], "127.0.0.1", port)
    server = ServerProcess(command, workdir / "nginx.out")
    server.wait_ready()
    return server, f"http://127.0.0.1:{port}/"


def drive(url: str, rate: float, processes: int, config: DriverBench) -> LoadResult:
    load = LoadConfig(
        url=url, rate=rate, duration_s=config.duration_s, warmup_s=config.warmup_s,
        workload=config.workload, distribution=config.distribution, processes=processes,
        connections=config.connections, seed=1,
    )
    return run_load(load)


def cpu_times() -> list[int]:
    """The machine's CPU time counters (``/proc/stat`` first line), empty where absent."""
    try:
        return [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except OSError:
        return []


def steal_percent(before: list[int], after: list[int]) -> float | None:
    """Share of all CPU time stolen by the hypervisor between two :func:`cpu_times`."""
    if len(before) < 8 or len(after) < 8:
        return None
    deltas = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(deltas[:8])  # user .. steal (guest time is already in user)
    return round(100 * deltas[7] / total, 2) if total else None


def holds(result: LoadResult) -> bool:
    """The driver kept its schedule: achieved >= 99% of offered, send-lag p99 <= 1 ms."""
    return (
        result.achieved_rps >= 0.99 * result.scheduled_rps
        and result.send_lag.percentiles_us["99"] <= 1000
        and result.errors.total == 0
    )


def row_of(result: LoadResult, processes: int) -> Row:
    window = result.config.warmup_s + result.window_s
    return Row(
        tool="socialbench", processes=processes, offered_rps=result.offered_rps,
        achieved_rps=round(result.achieved_rps, 1), p50_ms=result.latency.p50_ms,
        p99_ms=result.latency.p99_ms, max_ms=result.latency.max_ms,
        send_lag_p99_ms=result.send_lag.percentiles_us["99"] / 1000,
        cpu_percent=round(100 * result.driver_cpu_s / window / processes, 1),
        ok=holds(result),
    )


def measure(url: str, rate: float, processes: int, config: DriverBench) -> Row:
    """The median (by p99) of ``--repeat`` runs at ``rate``, each printed."""
    runs: list[Row] = []
    for _ in range(config.repeat):
        before = cpu_times()
        row = row_of(drive(url, rate, processes, config), processes)
        row.steal_percent = steal_percent(before, cpu_times())
        print(f"  {processes}P {rate:>9,.0f} req/s: {row}", flush=True)
        runs.append(row)
    runs.sort(key=lambda r: (not r.ok, r.p99_ms))
    median = runs[len(runs) // 2]
    if config.repeat > 1:
        median.note = (f"median of {config.repeat} runs; p99 of all: "
                       + ", ".join(f"{r.p99_ms:.2f}" for r in runs) + " ms")
    return median


def highest_rate(url: str, processes: int, config: DriverBench) -> list[Row]:
    """Rows of every rate tried; the highest passing rate is the last row with ok=True."""
    rows: list[Row] = []
    rates = list(config.rates) or None
    passed, failed = 0.0, None
    candidates = iter(rates or [config.start * processes + config.step * processes * i
                                for i in range(100)])
    for rate in candidates:
        row = measure(url, rate, processes, config)
        rows.append(row)
        if not row.ok:
            failed = rate
            break
        passed = rate
    if rates is None and failed is not None:
        while failed - passed > config.resolution:
            rate = (passed + failed) / 2
            row = measure(url, rate, processes, config)
            rows.append(row)
            passed, failed = (rate, failed) if row.ok else (passed, rate)
    return rows


def pinned(argv: list[str]) -> list[str]:
    """``argv`` run on the CPUs this process may use (the driver's, when pinned)."""
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    return ["taskset", "-c", cpus, *argv]


def run_vegeta(url: str, rate: float, config: DriverBench) -> Row | None:
    vegeta = shutil.which("vegeta", path=f"{os.environ.get('PATH', '')}:{Path.home()}/go/bin")
    if vegeta is None:
        return None
    attack = subprocess.run(
        # Workers bounded like our connections: unbounded, vegeta past its limit spawns
        # workers and connections until requests time out (30 s) and its rate collapses.
        pinned([vegeta, "attack", f"-rate={int(rate)}/s",
                f"-duration={int(config.duration_s)}s", f"-max-workers={config.connections}"]),
        input=f"GET {url}\n".encode(), capture_output=True, check=True,
    )
    report = subprocess.run([vegeta, "report", "-type=json"], input=attack.stdout,
                            capture_output=True, check=True)
    data = json.loads(report.stdout)
    latencies = data["latencies"]
    return Row(
        tool="vegeta", processes=1, offered_rps=rate, achieved_rps=round(data["throughput"], 1),
        p50_ms=latencies["50th"] / 1e6, p99_ms=latencies["99th"] / 1e6,
        max_ms=latencies["max"] / 1e6, send_lag_p99_ms=None, cpu_percent=None,
        ok=data["throughput"] >= 0.99 * rate, note="latency from its actual send",
    )


def run_wrk(url: str, threads: int, config: DriverBench) -> Row:
    """wrk, closed loop: its ceiling with the same connections (no rate to hold)."""
    out = subprocess.run(
        pinned(["wrk", f"-t{threads}", f"-c{config.connections}",
                f"-d{int(config.duration_s)}s", "--latency", url]),
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _wrk_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _wrk_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    return Row(tool="wrk (closed loop)", processes=threads, offered_rps=None,
               achieved_rps=rps, p50_ms=p50, p99_ms=p99, max_ms=float("nan"),
               send_lag_p99_ms=None, cpu_percent=None, ok=True, note="ceiling, not a rate")


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run(config: DriverBench) -> Path:
    """Measure, print the table, write it; the JSON file written."""
    all_cpus = os.sched_getaffinity(0)
    pin = config.pin and len(all_cpus) >= 2
    nginx_cpus = {max(all_cpus)} if pin else None

    load_start = os.getloadavg()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as tmp:
        nginx, url = start_nginx(Path(tmp), config.nginx_workers, nginx_cpus)
        try:
            for processes in config.processes:
                # One driver process on its own CPU, nginx on another; more share them all.
                os.sched_setaffinity(0, {min(all_cpus)} if pin and processes == 1 else all_cpus)
                found = highest_rate(url, processes, config)
                rows += found
                best = max((r for r in found if r.ok), key=lambda r: r.offered_rps or 0,
                           default=None)
                if best is not None and best.offered_rps:
                    before = cpu_times()
                    vegeta = run_vegeta(url, best.offered_rps, config)
                    if vegeta is not None:
                        vegeta.steal_percent = steal_percent(before, cpu_times())
                        rows.append(vegeta)
                before = cpu_times()
                wrk = run_wrk(url, processes, config)
                wrk.steal_percent = steal_percent(before, cpu_times())
                rows.append(wrk)
        finally:
            os.sched_setaffinity(0, all_cpus)
            nginx.stop()
    load_end = os.getloadavg()

    print(f"\nload average at start {load_start}, at end {load_end}, {os.cpu_count()} CPUs"
          + (f"; 1-process runs pinned to CPU {min(all_cpus)}, nginx to {max(all_cpus)}"
             if pin else ""))
    print("| tool | P | offered | achieved | p50 ms | p99 ms | max ms | lag p99 ms | CPU %/proc |"
          f" steal % | holds | p99 <= {TARGET_P99_MS:g} ms | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        offered = f"{r.offered_rps:,.0f}" if r.offered_rps else "-"
        lag = f"{r.send_lag_p99_ms:.3f}" if r.send_lag_p99_ms is not None else "-"
        cpu = f"{r.cpu_percent:.0f}" if r.cpu_percent is not None else "-"
        steal = f"{r.steal_percent:.1f}" if r.steal_percent is not None else "-"
        target = "-" if r.offered_rps is None else ("yes" if r.meets_target else "no")
        print(f"| {r.tool} | {r.processes} | {offered} | {r.achieved_rps:,.0f} | {r.p50_ms:.2f} |"
              f" {r.p99_ms:.2f} | {r.max_ms:.2f} | {lag} | {cpu} | {steal} |"
              f" {'yes' if r.ok else 'no'} | {target} | {r.note} |")
    out = write_results(config.results_dir, "driver", {
        "load_start": load_start, "load_end": load_end, "pinned": pin,
        "args": asdict(config), "rows": [asdict(r) for r in rows]})
    print(f"written to {out}")
    return out
