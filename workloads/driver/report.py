"""Human output: a live line each second and a wrk2-like summary at the end."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.result import PERCENTILES, LoadResult, SecondStats
from socialbench.workloads.driver.verdict import Contention


def duration(us: float) -> str:
    """Microseconds as wrk prints them: 850.00us, 1.23ms, 2.10s."""
    if us < 1000:
        return f"{us:.2f}us"
    if us < 1_000_000:
        return f"{us / 1000:.2f}ms"
    return f"{us / 1_000_000:.2f}s"


def describe(config: LoadConfig) -> str:
    """One line saying what is about to run."""
    pool = (
        f"{config.connections}..{config.max_connections} connections (growing)"
        if config.max_connections
        else f"{config.connections} connections"
    )
    return (
        f"Running {config.duration_s:g}s test @ {config.url}\n"
        f"  workload {config.workload}, {config.rate:,.0f} req/s {config.distribution.value} "
        f"arrivals, {config.processes} processes, {pool}, warm-up {config.warmup_s:g}s, "
        f"timeout {config.timeout_s:g}s, seed {config.seed}"
    )


def live_line(second: SecondStats) -> str:
    """The line printed each second."""
    phase = " (warm-up)" if second.warmup else ""
    return (
        f"[{second.second:>4}s] sent {second.sent:>8,}/s  done {second.completed:>8,}/s  "
        f"p99 {duration(second.latency_p99_us):>9}  errors {second.errors:>6,}  "
        f"lag p99 {duration(second.send_lag_p99_us):>9}  conns {second.connections:,}  "
        f"in flight {second.in_flight:,}  queued {second.queued:,}  "
        f"driver CPU {second.driver_cpu_max:.0%}{phase}"
    )


def print_summary(result: LoadResult, console: Console) -> None:
    """The end-of-run summary: latency spectra, counts, rates, and any warning, loudly."""
    latency, service, lag = result.latency, result.service_time, result.send_lag
    table = Table(box=None, padding=(0, 2), show_edge=False)
    table.add_column("percentile", justify="right")
    table.add_column("latency (from intended)", justify="right")
    table.add_column("service time (from send)", justify="right")
    for p in PERCENTILES:
        key = f"{p:g}"
        table.add_row(
            f"{p:.3f}%",
            duration(latency.percentiles_us[key]),
            duration(service.percentiles_us[key]),
        )
    table.add_row("mean", duration(latency.mean_us), duration(service.mean_us))
    table.add_row("stdev", duration(latency.stdev_us), duration(service.stdev_us))
    if result.stopped_early:
        console.print(f"  [bold yellow]Stopped early[/]: the window measured is "
                      f"{result.window_s:.1f} s of the {result.config.duration_s:g} s asked; "
                      "every figure below is of it")
    console.print("  Latency distribution (HdrHistogram, from the intended send time = wrk2's)")
    console.print(table)
    console.print(
        f"  Send lag (driver): p50 {duration(lag.percentiles_us['50'])}, "
        f"p99 {duration(lag.percentiles_us['99'])}, max {duration(lag.max_us)}"
    )
    errors = result.errors
    statuses = ", ".join(f"{code}: {count:,}" for code, count in errors.status.items())
    console.print(
        f"  {result.scheduled:,} requests in {result.window_s:g}s: {result.ok:,} ok, "
        f"{errors.total:,} errors (connect {errors.connect:,}, read {errors.read:,}, "
        f"timeout {errors.timeout:,}, dropped {errors.dropped:,}"
        + (f", status {statuses}" if statuses else "")
        + ")"
    )
    console.print(
        f"  Offered {result.offered_rps:,.1f} req/s, scheduled {result.scheduled_rps:,.1f} "
        f"req/s, achieved {result.achieved_rps:,.1f} req/s"
    )
    cpu_share = result.driver_cpu_s / max(result.config.warmup_s + result.window_s, 1e-9)
    load = result.host.loadavg_start
    console.print(
        f"  Connections peak {result.peak_connections:,}, queued {result.queued:,}; "
        f"driver CPU {cpu_share:.0%} of a core; load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} at start on {result.host.cpus} CPUs"
        + (f" ({result.host.architecture}"
           + (", emulated" if result.host.emulated else "") + ")"
           if result.host.architecture else "")
    )
    driver = result.driver
    if driver is not None:
        colour = {Contention.CLEAN: "green", Contention.HOST_CONTENDED: "yellow",
                  Contention.DRIVER_CPU: "red"}[driver.verdict]
        console.print(f"  Driver verdict: [bold {colour}]{driver.verdict.value}[/] — "
                      f"{driver.explanation}" + (f". {driver.advice}" if driver.advice else ""))
        host = driver.host
        if host is not None:
            console.print(
                f"  Host over the run (CPU {','.join(map(str, host.cpus))}): "
                f"{host.busy_share:.0%} busy, {host.steal_share:.0%} steal, "
                f"{host.runnable_mean:.1f} runnable tasks on {host.online_cpus} CPUs; "
                "driver processes at " + ", ".join(
                    f"{w.cpu_share:.0%}" for w in driver.workers) + " of a core")
    for warning in result.warnings:
        console.print(f"[bold red]WARNING[/]: {warning}")
    if result.saturated:
        console.print("[bold red]The result is not to be trusted (saturated = true).[/]")
