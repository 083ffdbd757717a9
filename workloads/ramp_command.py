"""``socialbench ramp``, ``socialbench report DIR`` and ``socialbench compare DIR...``.

Also the pieces ``socialbench demo`` reuses: the live view, the local stack's reset
(``--fresh``) and resource sampling, and :func:`execute` (ramp, bundle, report).
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from socialbench import __version__
from socialbench.stack import launcher
from socialbench.workloads.bundle import Dataset, StackRecord, Summary
from socialbench.workloads.driver import Distribution, LoadConfig, SecondStats
from socialbench.workloads.driver.cli import parse_duration
from socialbench.workloads.driver.config import DEFAULT_CONNECTIONS, DEFAULT_TIMEOUT_S, Target
from socialbench.workloads.ramp import (
    Ramp,
    RampConfig,
    RampObserver,
    RampOutcome,
    RampRun,
    ResetHook,
    SamplerFactory,
    Sla,
    StepPlan,
    StepRun,
    StopReason,
    format_ms,
)

QUICK = {"step_duration": "10s", "warmup": "3s", "pause": "1s"}
FULL = {"step_duration": "5m", "warmup": "30s", "pause": "2s"}
LOCAL_HOSTS = ("127.0.0.1", "localhost")
PSUTIL_SOURCE = (
    "psutil: CPU seconds (user + system) and peak RSS (sampled each second) of each "
    "component's process tree, found from the local stack's state file"
)
NO_LOCAL_STACK = (
    "per-process CPU and memory need the local stack (socialbench up); they are not "
    "measured for other targets (the Docker SDK variant for compose is not implemented)"
)

DataDir = Annotated[
    Path, typer.Option("--data-dir", envvar="SOCIALBENCH_DATA_DIR",
                       help="The local stack's directory (for --fresh and CPU/memory).")
]


class SetupError(RuntimeError):
    """The ramp could not be prepared (stack not starting, seeding failed)."""


def parse_ratio(text: str) -> float:
    """``1%`` -> 0.01; ``0.01`` -> 0.01."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a ratio like 1% or 0.01")
    value = float(match.group(1)) / (100 if match.group(2) else 1)
    if value > 1:
        raise typer.BadParameter(f"{text!r} is more than 100%")
    return value


# ---------------------------------------------------------------- the local stack


def _stack_config(data_dir: Path) -> launcher.StackConfig:
    path = data_dir / launcher.CONFIG_FILE
    if path.exists():
        return launcher.StackConfig.from_json(path.read_text())
    return launcher.StackConfig(data_dir=data_dir)


def restart_fresh(data_dir: Path) -> launcher.StackConfig:
    """Stop the local stack, empty its stores, start it again with its last configuration."""
    from socialbench.stack import commands as stack_commands

    config = _stack_config(data_dir.resolve())
    try:
        stack_commands.up(
            data_dir=data_dir, fresh=True, port=config.gateway_port,
            media_port=config.media_port,
            workers=",".join(f"{name}={n}" for name, n in config.workers.items()),
            default_workers=config.default_workers, nginx_workers=config.nginx_workers,
            redis_port=config.redis_port, memcached_port=config.memcached_port,
            mongodb_port=config.mongodb_port, service_port_offset=config.service_port_offset,
            tracing=config.tracing, trace_ratio=config.trace_sample_ratio,
            jaeger_port=config.jaeger_ui_port, jaeger_otlp_port=config.jaeger_otlp_port,
        )
    except typer.Exit as exc:
        raise SetupError(f"the local stack did not start (see {config.log_dir})") from exc
    return config


SEED_CONCURRENCY = 32  # enough to keep a small stack busy; 200 timed out composes on 2 cores


def seed_graph(url: str, graph_spec: str, posts_per_user: int, seed_value: int,
               show_progress: bool = True) -> str:
    """Seed the stack at ``url``; the graph's name. Raises SetupError on any failure."""
    from socialbench.workloads import graph as graphs
    from socialbench.workloads.seed import seed
    from socialbench.workloads.socialnetwork import compose_post_body

    social_graph = graphs.load(graph_spec, seed=seed_value)

    def compose_body(rng: random.Random, user_id: int) -> str:
        return compose_post_body(rng, user_id, social_graph.node_count)

    report = asyncio.run(seed(
        url, social_graph, posts_per_user=posts_per_user,
        compose_body=compose_body if posts_per_user else None,
        concurrency=SEED_CONCURRENCY, seed_value=seed_value, show_progress=show_progress,
    ))
    if report.failures:
        counts = {phase: dict(c) for phase, c in report.counts.items()}
        raise SetupError(f"seeding {social_graph.name} had {report.failures} failures: {counts}")
    return social_graph.name


def fresh_reset(data_dir: Path, graph_spec: str, posts_per_user: int, seed_value: int,
                console: Console) -> ResetHook:
    """Before each repeat: empty stores, restarted stack, the graph seeded again."""

    def reset(repeat: int) -> None:
        console.print(f"[bold]Repeat {repeat}[/]: restarting the local stack with empty "
                      "stores and seeding it (--fresh)")
        config = restart_fresh(data_dir)
        seed_graph(config.url, graph_spec, posts_per_user, seed_value)

    return reset


def is_local_front_end(data_dir: Path, url: str) -> bool:
    """Whether ``url`` is the front end of the local stack configured in ``data_dir``."""
    target = Target.parse(url)
    config = _stack_config(data_dir.resolve())
    return target.host in LOCAL_HOSTS and target.port == config.gateway_port


def local_stack_record(data_dir: Path, url: str) -> StackRecord | None:
    """The local stack's configuration for the manifest, when ``url`` is its front end."""
    if not is_local_front_end(data_dir, url):
        return None
    config = _stack_config(data_dir.resolve())
    return StackRecord(
        default_workers=config.default_workers, workers=dict(config.workers),
        nginx_workers=config.nginx_workers, tracing=config.tracing,
        trace_sample_ratio=config.trace_sample_ratio if config.tracing else None,
    )


def local_stack_sampler(data_dir: Path, url: str) -> SamplerFactory:
    """Each step's sampler of the local stack's processes, when ``url`` is its front end."""
    from socialbench.workloads.resources import ResourceSampler

    data_dir = data_dir.resolve()

    def factory() -> tuple[ResourceSampler | None, str]:
        if not is_local_front_end(data_dir, url):
            return None, f"{url} is not the local stack's front end; {NO_LOCAL_STACK}"
        sampler = ResourceSampler.for_local_stack(data_dir)
        if sampler is None:
            return None, f"no local stack runs from {data_dir}; {NO_LOCAL_STACK}"
        return sampler, ""

    return factory


def energy_source(power_cmd: str | None) -> str:
    """How energy will be measured, or why it will not."""
    from socialbench.workloads.energy import rapl_domains

    if power_cmd:
        return f"--power-cmd {power_cmd!r}, sampled each second and integrated"
    domains = rapl_domains()
    if domains:
        return "RAPL counters: " + ", ".join(d.name for d in domains)
    return "unavailable: no RAPL counters under /sys/class/powercap and no --power-cmd"


# ---------------------------------------------------------------- the live view


def _step_line(step: StepRun) -> str:
    result = step.result
    mark = "[green]pass[/]" if step.passed else "[red]FAIL[/]"
    cpu = step.usage.cpu_seconds
    cpu_text = (f", stack CPU {cpu * 1000 / step.responses_in_span:.2f} ms/req"
                if cpu is not None and step.responses_in_span else "")
    line = (
        f"  {mark} r{step.repeat} step {step.index:>2} {step.phase.value:<7} "
        f"{step.rate:>10,.6g} req/s: achieved {result.achieved_rps:,.1f}, "
        f"p50 {format_ms(result.latency.p50_ms)}, p99 {format_ms(result.latency.p99_ms)}, "
        f"errors {result.errors.total:,} ({result.error_ratio:.2%}){cpu_text}"
    )
    if result.saturated:
        line += " [yellow](driver saturated)[/]"
    if not step.passed:
        line += "\n         " + "; ".join(step.verdict.reasons)
    return line


class LiveView(RampObserver):
    """A live panel of the running step (on a terminal) and one line per finished step."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.plan: StepPlan | None = None
        self.seconds: list[SecondStats] = []
        self.started = 0.0
        self.live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal and not self.quiet:
            self.live = Live(self, console=self.console, refresh_per_second=2, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def repeat_started(self, repeat: int, repeats: int) -> None:
        if repeats > 1:
            self.console.rule(f"repeat {repeat} of {repeats}")

    def step_started(self, plan: StepPlan) -> None:
        self.plan, self.seconds, self.started = plan, [], time.monotonic()
        if self.live is None and not self.quiet:
            self.console.print(
                f"  … r{plan.repeat} step {plan.index:>2} {plan.phase.value:<7} "
                f"{plan.load.rate:>10,.6g} req/s for {plan.load.duration_s:g} s after "
                f"{plan.load.warmup_s:g} s warm-up"
            )

    def second(self, stats: SecondStats) -> None:
        self.seconds.append(stats)

    def step_finished(self, step: StepRun) -> None:
        self.plan = None
        self.console.print(_step_line(step))

    def repeat_finished(self, run: RampRun) -> None:
        answer = "no tested rate held the SLA"
        if run.stop_reason is StopReason.INTERRUPTED:
            answer = f"interrupted after {len(run.steps)} steps"
        elif run.answer is not None:
            p99 = format_ms(run.answer.result.latency.p99_ms)
            answer = f"{run.answer.rate:,.6g} req/s, p99 {p99}"
        self.console.print(f"  Repeat {run.repeat}: {answer}; stopped: [bold]"
                           f"{run.stop_reason.value}[/] ({run.stop_detail})")

    def note(self, message: str) -> None:
        self.console.print(message)

    def __rich__(self) -> RenderableType:
        plan = self.plan
        if plan is None:
            return Text("")
        load = plan.load
        elapsed = time.monotonic() - self.started
        left = max(0.0, plan.expected_s - elapsed)
        window_end = load.warmup_s + load.duration_s
        measured = [s for s in self.seconds if not s.warmup and s.second <= window_end]
        last = self.seconds[-1] if self.seconds else None
        phase = "starting" if last is None else "warm-up" if last.warmup else "measuring"
        if last is not None and last.second > window_end:
            phase = "draining"
        achieved = sum(s.completed for s in measured) / len(measured) if measured else 0.0
        errors = sum(s.errors for s in self.seconds)
        worst = max((s.latency_p99_us for s in measured), default=0)
        more = f" (+{plan.runs_left} more runs)" if plan.runs_left else ""
        head = Text.from_markup(
            f"[bold]repeat {plan.repeat}/{plan.repeats} · {plan.phase.value} step {plan.index}"
            f" · offered {load.rate:,.6g} req/s[/] · {phase} · "
            f"{elapsed:.0f} s of ~{plan.expected_s:.0f} s · step time left {left:.0f} s{more}"
        )
        if last is None:
            return head
        body = Text(
            f"achieved {achieved:,.1f} req/s · p50 {format_ms(last.latency_p50_us / 1000)} · "
            f"p99 {format_ms(last.latency_p99_us / 1000)} (worst second "
            f"{format_ms(worst / 1000) if worst else '—'}) · errors {errors:,} · send lag p99 "
            f"{format_ms(last.send_lag_p99_us / 1000)} · in flight {last.in_flight:,}"
        )
        return Group(head, body)


# ---------------------------------------------------------------- running


@dataclass
class RampJob:
    """Everything a ramp run needs besides its configuration."""

    config: RampConfig
    label: str
    results_dir: Path
    sampler: SamplerFactory
    resources_source: str
    dataset: Dataset
    stack: StackRecord | None = None
    power_cmd: str | None = None
    reset: ResetHook | None = None
    quiet: bool = False


@dataclass
class RampReport:
    directory: Path
    report: Path
    outcome: RampOutcome
    summary: Summary


def execute(job: RampJob, console: Console) -> RampReport:
    """Run the ramp, writing its bundle as it goes, then its plots and report."""
    from socialbench.workloads import machine
    from socialbench.workloads.bundle import BundleWriter, Manifest, bundle_dir
    from socialbench.workloads.report import build_report

    described = machine.describe()
    manifest = Manifest(
        socialbench_version=__version__,
        created_at=datetime.now(UTC),
        label=job.label,
        command_line=described["command_line"],
        git=described["git"],
        config=job.config,
        dataset=job.dataset,
        stack=job.stack,
        hardware=described["hardware"],
        software=described["software"],
        resources_source=job.resources_source,
        energy_source=energy_source(job.power_cmd),
    )
    ramp = Ramp(job.config, sampler=job.sampler, power_cmd=job.power_cmd, reset=job.reset)
    directory = bundle_dir(job.results_dir, job.label)
    writer = BundleWriter(directory, manifest.model_copy(update={"config": ramp.config}))
    config = ramp.config
    slas = ", ".join(str(s) for s in config.slas)
    console.print(
        f"Ramp of [bold]{config.load.workload}[/] at {config.load.url}: from "
        f"{config.start_rate:,.6g} req/s by {config.step_rate:,.6g}, steps of "
        f"{config.step_duration_s:g} s after {config.warmup_s:g} s warm-up; SLA {slas}; "
        f"stop below {config.min_achieved_ratio:.0%} achieved or above "
        f"{config.max_error_ratio:.1%} errors"
        + (", or when the driver is saturated" if config.stop_on_saturation else "")
        + (f"; refine to {config.resolution:g} req/s" if config.refine else "")
        + (f"; {config.repeat} repeats" if config.repeat > 1 else "")
    )
    console.print(f"Bundle: {directory}")
    view = LiveView(console, quiet=job.quiet)
    ramp.observers = [view, writer]
    with view:
        outcome = ramp.run()
    summary = writer.finish(outcome)
    report = build_report(directory)
    return RampReport(directory, report, outcome, summary)


def print_headline(result: RampReport, console: Console) -> None:
    """The number, its p99, how it was found, and where the report is."""
    summary = result.summary
    sla = ", ".join(summary.sla)
    if not summary.completed:
        console.print(f"[bold yellow]Interrupted[/] in repeat {len(summary.repeats)}: its "
                      f"{len(result.outcome.runs[-1].steps)} steps are in the bundle, and no "
                      "answer is claimed from it.")
    if summary.best is not None and summary.p99_ms is not None:
        console.print(
            f"[bold green]Max {summary.best.max_rate_rps:,.6g} req/s with {sla}[/]: p99 "
            f"{format_ms(summary.p99_ms)}, achieved {summary.best.achieved_rps:,.1f} req/s"
            + (f" (best of {len(summary.repeats)}; median {summary.median_max_rate_rps:,.6g}, "
               f"CV {summary.coefficient_of_variation or 0:.1%})"
               if len(summary.repeats) > 1 else "")
        )
    elif summary.completed:
        console.print(f"[bold red]No tested rate held {sla}[/]; try a lower --start-rate.")
    if summary.stop_reason is not None:
        console.print(f"Stopped: {summary.stop_reason.value} — {summary.repeats[0].stop_detail}"
                      if len(summary.repeats) == 1 else f"Stopped: {summary.stop_reason.value}")
    if summary.saturated_steps:
        console.print(f"[yellow]{summary.saturated_steps} step(s) with the driver saturated "
                      "(see the report's warnings).[/]")
    console.print(f"Report: [bold]{result.report}[/]")


# ---------------------------------------------------------------- commands


def ramp(
    url: Annotated[str, typer.Argument(help="Target (the stack's front end).")] = (
        "http://127.0.0.1:8080"),
    workload: Annotated[str, typer.Option("--workload", "-w", help=(
        "compose-post, read-home-timeline, read-user-timeline, mixed, url, or path.py:Name."))]
    = "mixed",
    start_rate: Annotated[float, typer.Option(min=0.001, help="Offered req/s of step 1.")]
    = 1000.0,
    step: Annotated[float, typer.Option(min=0.001, help="Added to the rate each step.")]
    = 500.0,
    step_duration: Annotated[str | None, typer.Option(
        help="Measured time per step (default 5m; --quick 10s).")] = None,
    warmup: Annotated[str | None, typer.Option(
        help="Warm-up before each step's window (default 30s; --quick 3s).")] = None,
    sla: Annotated[list[str] | None, typer.Option(
        help="pNN=TIME, e.g. p99=2s or p99.9=50ms; repeat for several (all must hold).")]
    = None,
    max_errors: Annotated[str, typer.Option(help="Stop above this share of errors.")] = "1%",
    min_achieved: Annotated[str, typer.Option(
        help="Stop when achieved falls below this share of offered.")] = "95%",
    ignore_driver_saturation: Annotated[bool, typer.Option(
        help="Do not stop when the driver judges itself saturated (still recorded).")]
    = False,
    max_rate: Annotated[float | None, typer.Option(help="Never offer more than this.")] = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Ramp steps per repeat at most.")] = 50,
    refine: Annotated[bool, typer.Option(
        help="Bisect between the last pass and the first failure, then confirm.")] = False,
    resolution: Annotated[float | None, typer.Option(
        help="Bisection resolution in req/s (default: step / 10).")] = None,
    confirm_duration: Annotated[str | None, typer.Option(
        help="Measured time of the confirmation run (default: 2 steps).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Run the whole ramp N times.")] = 1,
    quick: Annotated[bool, typer.Option(help="Short steps (10 s, 3 s warm-up): demos, CI.")]
    = False,
    pause: Annotated[str | None, typer.Option(help="Idle time between steps.")] = None,
    fresh: Annotated[bool, typer.Option(
        help="Before each repeat: restart the local stack with empty stores and seed it.")]
    = False,
    graph: Annotated[str, typer.Option(help="With --fresh: the graph to seed.")] = "synthetic",
    posts_per_user: Annotated[int, typer.Option(
        min=0, help="With --fresh: each user composes 0..N posts.")] = 3,
    graph_seed: Annotated[int, typer.Option(help="With --fresh: seed of graph and posts.")] = 1,
    data_dir: DataDir = Path(".socialbench"),
    power_cmd: Annotated[str | None, typer.Option(
        help="A command printing the machine's watts (when there is no RAPL).")] = None,
    label: Annotated[str | None, typer.Option(help="Names the bundle (default: workload).")]
    = None,
    results_dir: Annotated[Path, typer.Option(help="Where bundles go.")] = Path("results"),
    connections: Annotated[int, typer.Option("--connections", "-c")] = DEFAULT_CONNECTIONS,
    max_connections: Annotated[int | None, typer.Option()] = None,
    processes: Annotated[int | None, typer.Option("--processes", "-P")] = None,
    timeout: Annotated[str, typer.Option(help="Per request.")] = f"{DEFAULT_TIMEOUT_S:g}s",
    distribution: Annotated[Distribution, typer.Option("--distribution", "-D")] = (
        Distribution.EXPONENTIAL),
    users: Annotated[int | None, typer.Option(
        help="Users the workload draws from (default: the seeded graph's, else 962).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the driver's random draws.")] = None,
    absolute_form: Annotated[bool, typer.Option("--absolute-form/--origin-form")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live view.")] = False,
) -> None:
    """Find the highest rate that holds the SLA: step the load up until it breaks."""
    from pydantic import ValidationError

    from socialbench.workloads.core import WorkloadError, load_workload
    from socialbench.workloads.driver.config import default_processes

    console = Console(highlight=False)
    profile = QUICK if quick else FULL
    step_s = parse_duration(step_duration or profile["step_duration"])
    graph_users = None
    if fresh:
        from socialbench.workloads import graph as graphs

        try:
            graph_users = graphs.load(graph, seed=graph_seed).node_count
        except (graphs.GraphFormatError, OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--graph") from None
    try:
        load = LoadConfig(
            url=url, rate=start_rate, duration_s=step_s,
            warmup_s=parse_duration(warmup or profile["warmup"]), workload=workload,
            users=users or graph_users or 962, distribution=distribution,
            connections=connections, max_connections=max_connections,
            processes=processes or min(default_processes(), connections),
            timeout_s=parse_duration(timeout), seed=seed if seed is not None
            else secrets.randbits(32), absolute_form=absolute_form,
        )
        load_workload(load.workload, users=load.users, path=load.target.path)
        config = RampConfig(
            load=load, start_rate=start_rate, step_rate=step, step_duration_s=step_s,
            warmup_s=load.warmup_s, slas=tuple(Sla.parse(s) for s in sla or ["p99=2s"]),
            max_error_ratio=parse_ratio(max_errors), min_achieved_ratio=parse_ratio(min_achieved),
            stop_on_saturation=not ignore_driver_saturation, max_rate=max_rate,
            max_steps=max_steps, refine=refine, resolution_rps=resolution,
            confirm_duration_s=parse_duration(confirm_duration) if confirm_duration else None,
            repeat=repeat, pause_s=parse_duration(pause or profile["pause"]),
        )
    except (ValidationError, WorkloadError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    local = is_local_front_end(data_dir, url)
    if fresh and not local:
        raise typer.BadParameter(f"--fresh resets the local stack in {data_dir}, and {url} is "
                                 "not its front end", param_hint="--fresh")
    dataset = (
        Dataset(fresh=True, graph=graph, users=load.users, posts_per_user=posts_per_user,
                seed=graph_seed)
        if fresh else
        Dataset(fresh=False, users=load.users,
                note="the target's data as found (not reset by the ramp; use --fresh)")
    )
    job = RampJob(
        config=config, label=label or workload.replace("/", "-"), results_dir=results_dir,
        sampler=local_stack_sampler(data_dir, url),
        resources_source=PSUTIL_SOURCE if local else f"unavailable: {NO_LOCAL_STACK}",
        dataset=dataset, stack=local_stack_record(data_dir, url), power_cmd=power_cmd,
        reset=fresh_reset(data_dir, graph, posts_per_user, graph_seed, console) if fresh
        else None,
        quiet=quiet,
    )
    try:
        result = execute(job, console)
    except SetupError as exc:
        console.print(f"[bold red]error[/]: {exc}")
        raise typer.Exit(1) from None
    print_headline(result, console)
    if result.outcome.interrupted:
        raise typer.Exit(130)
    if any(run.stop_reason is StopReason.DRIVER_ERROR and run.answer is None
           for run in result.outcome.runs):
        raise typer.Exit(1)


def report(
    directory: Annotated[Path, typer.Argument(help="A bundle (results/<time>-<label>).")],
) -> None:
    """Rebuild a bundle's plots and report.html from its files."""
    from socialbench.workloads.bundle import BundleError
    from socialbench.workloads.report import build_report

    try:
        path = build_report(directory)
    except BundleError as exc:
        raise typer.BadParameter(str(exc), param_hint="DIRECTORY") from None
    Console().print(f"Report: {path}")


def compare(
    directories: Annotated[list[Path], typer.Argument(
        help="Bundles to compare; the first is the baseline.")],
    out: Annotated[Path | None, typer.Option(
        help="Where to render compare.html (default: results/compare-<UTC time>).")] = None,
) -> None:
    """Runs side by side: max rate at the SLA, p99 at common rates, energy, and ratios."""
    from socialbench.workloads.bundle import BundleError
    from socialbench.workloads.compare import compare as compare_bundles
    from socialbench.workloads.compare import print_comparison, render_comparison

    if len(directories) < 2:
        raise typer.BadParameter("give at least two bundles", param_hint="DIRECTORIES")
    try:
        comparison = compare_bundles(directories)
    except BundleError as exc:
        raise typer.BadParameter(str(exc), param_hint="DIRECTORIES") from None
    console = Console(highlight=False, width=max(Console().width, 140))
    print_comparison(comparison, console)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = render_comparison(comparison, out or Path("results") / f"compare-{stamp}")
    console.print(f"Rendered: {path}")

