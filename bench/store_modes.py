"""What scaling the stores out costs on this machine: each store mode's max rate and CPU.

    socialbench bench store-modes [--repeats 2] [--mode shared --mode per-service ...]

Each mode (``shared``; ``per-service``: ``--stores per-service``; ``redis-cluster``: 3
masters and 3 replicas; ``memcached-pool``: ``--memcached-instances 3``) gets a stack of
its own (free ports, empty stores, the synthetic graph with 3 posts per user), ramped
with the mixed workload (``ramp --quick --refine``) to the highest rate at p99 <= 2 s.
The modes run back to back, their order reversed every other round (a host's speed
drifts: only modes measured side by side compare). Each row: the max rate and the
stack's CPU per request at the first step's rate, both as ratios to ``shared`` in the
same round. Bundles go to ``results/store-modes-<time>/``, the table to
``results/bench-store-modes-<time>.json``; what was measured: docs/stores.md.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from socialbench.bench.results import write_results
from socialbench.stack import launcher
from socialbench.stack.servers import free_port_block, free_ports
from socialbench.workloads.results.files import utc_stamp

MODES: dict[str, tuple[str, ...]] = {
    "shared": (),
    "per-service": ("--stores", "per-service"),
    "redis-cluster": ("--redis-mode", "cluster"),
    "memcached-pool": ("--memcached-instances", "3"),
}


@dataclass(frozen=True)
class StoreModesBench:
    """Which modes, how many rounds, and the ramp's steps."""

    modes: tuple[str, ...] = tuple(MODES)
    repeats: int = 2
    start_rate: float = 400.0
    step: float = 200.0
    graph: str = "synthetic"
    posts_per_user: int = 3
    results_dir: Path = Path("results")


@dataclass
class ModeRun:
    """One mode's ramp: its max rate, CPU per request, and where its bundle is."""

    mode: str
    round: int
    max_rate_rps: float | None
    cpu_ms_per_request: float | None  # at the first step's rate
    first_rate_rps: float | None
    check_passed: bool | None
    bundle: str
    error: str = ""
    ratios: dict[str, float] = field(default_factory=dict)


def socialbench(*args: str, timeout_s: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "socialbench.cli", *args],
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def run_mode(bench: StoreModesBench, mode: str, round_: int, root: Path) -> ModeRun:
    """Start ``mode``'s stack, seed it, ramp it, stop it."""
    data_dir = root / "stacks" / f"{round_}-{mode}"
    bundles = root / f"{round_}-{mode}"
    port, media = free_ports(2)
    first = free_port_block(40)
    up_args = ["--data-dir", str(data_dir), "--port", str(port), "--media-port", str(media),
               "--mongodb-port", str(first), "--redis-port", str(first + 8),
               "--memcached-port", str(first + 28),
               "--service-port-offset", str(launcher.free_service_offset()), *MODES[mode]]
    url = f"http://127.0.0.1:{port}"
    failed = ModeRun(mode, round_, None, None, None, None, str(bundles))
    try:
        for step, args in (
                ("up", ("up", "--fresh", *up_args)),
                ("seed", ("seed", "--url", url, "--graph", bench.graph,
                          "--posts-per-user", str(bench.posts_per_user))),
                ("ramp", ("ramp", url, "--workload", "mixed", "--quick", "--refine",
                          "--start-rate", f"{bench.start_rate:g}", "--step", f"{bench.step:g}",
                          "--data-dir", str(data_dir), "--label", f"store-mode-{mode}",
                          "--results-dir", str(bundles)))):
            print(f"  {mode} (round {round_}): {step}…", flush=True)
            result = socialbench(*args)
            if result.returncode != 0 and step != "ramp":  # a ramp that stops still reports
                failed.error = f"{step} failed: {(result.stderr or result.stdout)[-1500:]}"
                return failed
    finally:
        socialbench("down", "--data-dir", str(data_dir))
    return read_bundle(mode, round_, bundles)


def read_bundle(mode: str, round_: int, bundles: Path) -> ModeRun:
    """The row of the one bundle under ``bundles``."""
    found = sorted(path.parent for path in bundles.glob("*/summary.json"))
    if not found:
        return ModeRun(mode, round_, None, None, None, None, str(bundles), error="no bundle")
    bundle = found[-1]
    summary: dict[str, Any] = json.loads((bundle / "summary.json").read_text())
    with open(bundle / "steps.csv", newline="") as steps_file:
        first = next(csv.DictReader(steps_file), None)
    cpu = float(first["cpu_ms_per_request"]) if first and first["cpu_ms_per_request"] else None
    check = summary.get("check") or {}
    return ModeRun(mode, round_, summary.get("max_rate_rps"), cpu,
                   float(first["offered_rps"]) if first else None,
                   check.get("passed") if isinstance(check, dict) else None, str(bundle))


def with_ratios(runs: list[ModeRun]) -> list[ModeRun]:
    """Each run's max rate and CPU per request over ``shared``'s of the same round."""
    shared = {run.round: run for run in runs if run.mode == "shared"}
    for run in runs:
        base = shared.get(run.round)
        if base is None:
            continue
        if run.max_rate_rps and base.max_rate_rps:
            run.ratios["max_rate"] = run.max_rate_rps / base.max_rate_rps
        if run.cpu_ms_per_request and base.cpu_ms_per_request:
            run.ratios["cpu_per_request"] = run.cpu_ms_per_request / base.cpu_ms_per_request
    return runs


def run(bench: StoreModesBench) -> list[ModeRun]:
    unknown = sorted(set(bench.modes) - set(MODES))
    if unknown:
        raise ValueError(f"no store mode named {', '.join(unknown)}; modes: {', '.join(MODES)}")
    stamp = utc_stamp()
    root = (bench.results_dir / f"store-modes-{stamp}").resolve()
    runs: list[ModeRun] = []
    for round_ in range(1, bench.repeats + 1):
        order = bench.modes if round_ % 2 else tuple(reversed(bench.modes))
        for mode in order:
            runs.append(run_mode(bench, mode, round_, root))
    with_ratios(runs)
    print(f"{'mode':16} {'round':>5} {'max req/s':>10} {'x shared':>9} "
          f"{'CPU ms/req':>11} {'x shared':>9}  check")
    for row in sorted(runs, key=lambda r: (r.round, bench.modes.index(r.mode))):
        rate = f"{row.max_rate_rps:,.0f}" if row.max_rate_rps else "-"
        cpu = f"{row.cpu_ms_per_request:.2f}" if row.cpu_ms_per_request else "-"
        print(f"{row.mode:16} {row.round:>5} {rate:>10} "
              f"{row.ratios.get('max_rate', float('nan')):>9.2f} {cpu:>11} "
              f"{row.ratios.get('cpu_per_request', float('nan')):>9.2f}  "
              f"{row.check_passed}{'  ' + row.error if row.error else ''}")
    out = write_results(bench.results_dir, "store-modes", {
        "bench": asdict(bench), "load_average": os.getloadavg(),
        "runs": [asdict(r) for r in runs]}, stamp)
    print(f"written: {out}")
    return runs
