"""'socialbench ramp', 'socialbench report DIR' and 'socialbench compare DIR...'."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_interrupt
from socialbench.cli.options import (
    DEFAULT_DATA_DIR,
    CpuFamily,
    CpuPlacement,
    DataDir,
    DriverCpus,
    PowerCmd,
    PowerCoefficients,
    PowerMeter,
    duration,
    energy_options,
    load_default,
    model_default,
    percent,
    placement,
    placement_for,
    preset_values,
    ratio,
    require_extra,
    run,
    seconds_text,
)
from socialbench.stack.local import LocalStack
from socialbench.workloads.driver import Distribution, LoadConfig
from socialbench.workloads.driver.config import driver_size
from socialbench.workloads.driver.placement import PlacementMode
from socialbench.workloads.probes.energy import MeterChoice
from socialbench.workloads.ramp.engine import DEFAULT_SLA, RampConfig, Sla
from socialbench.workloads.ramp.plan import plan_ramp
from socialbench.workloads.runs.local import found_dataset
from socialbench.workloads.runs.ramp_run import FULL, QUICK, RampOptions, run_ramp


def default(field: str) -> Any:
    """The default of a RampConfig field."""
    return model_default(RampConfig, field)


def grow_levels(text: str, stack: LocalStack, url: str, fresh: bool,
                other_target: str | None) -> list[int]:
    """--grow's levels, when the local stack can be grown to them."""
    from socialbench.workloads.runs.grow_levels import parse_levels

    try:
        levels = parse_levels(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--grow") from None
    if other_target is not None or not stack.serves(url):
        raise typer.BadParameter(f"--grow adds posts to the local stack in {stack.data_dir}, "
                                 f"and {url} is not its front end", param_hint="--grow")
    if not fresh and stack.running_state() is None:
        raise typer.BadParameter(f"--grow adds posts to the local stack in {stack.data_dir}, "
                                 "which is not running (socialbench up, or --fresh)",
                                 param_hint="--grow")
    return levels


def ramp(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(metavar="URL", help="Target (the stack's front end).")]
    = "http://127.0.0.1:8080",
    workload: Annotated[str, typer.Option("--workload", "-w", help=(
        "compose-post, read-home-timeline, read-user-timeline, mixed, url, or path.py:Name."))]
    = "mixed",
    start_rate: Annotated[float, typer.Option(min=0.001, help="Offered req/s of step 1.")]
    = default("start_rate"),
    step: Annotated[float, typer.Option(min=0.001, help="Added to the rate each step.")]
    = default("step_rate"),
    step_duration: Annotated[str | None, typer.Option(
        help="Measured time per step (default 5m; --quick 10s).")] = None,
    warmup: Annotated[str | None, typer.Option(
        help="Warm-up before each step's window (default 30s; --quick 3s).")] = None,
    sla: Annotated[list[str] | None, typer.Option(
        help="pNN=TIME, e.g. p99=2s or p99.9=50ms; repeat for several (all must hold; "
        f"default: {DEFAULT_SLA}).")] = None,
    max_errors: Annotated[str, typer.Option(help="Stop above this share of errors.")]
    = percent(default("max_error_ratio")),
    min_achieved: Annotated[str, typer.Option(
        help="Stop when achieved falls below this share of offered.")]
    = percent(default("min_achieved_ratio")),
    ignore_driver_saturation: Annotated[bool, typer.Option(
        "--ignore-driver-saturation",
        help="Do not stop when the driver judges itself saturated (still recorded).")]
    = False,
    max_rate: Annotated[float | None, typer.Option(help="Never offer more than this.")] = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Ramp steps per repeat at most.")]
    = default("max_steps"),
    refine: Annotated[bool, typer.Option(
        "--refine", help="Bisect between the last pass and the first failure, then confirm.")]
    = default("refine"),
    resolution: Annotated[float | None, typer.Option(
        help="Bisection resolution in req/s (default: step / 10).")] = None,
    confirm_duration: Annotated[str | None, typer.Option(
        help="Measured time of the confirmation run (default: 2 steps).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Run the whole ramp N times.")]
    = default("repeat"),
    quick: Annotated[bool, typer.Option(
        "--quick", help="Short steps (10 s, 3 s warm-up): demos, CI.")] = False,
    preset: Annotated[str | None, typer.Option(
        metavar="NAME", help="A published procedure's parameters (socialbench presets); an "
        "option it names given beside it overrides it, recorded as a deviation.")] = None,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Print the steps, the repeats and the time the run will take, then "
        "exit without sending load.")] = False,
    stop_after_declines: Annotated[int | None, typer.Option(
        min=1, help="Stop after N steps in a row whose achieved req/s fell, not at a failed "
        "step (PerfKit's rule); the answer is the highest step that passed.")] = None,
    pause: Annotated[str | None, typer.Option(help="Idle time between steps.")] = None,
    settle_cores: Annotated[float, typer.Option(
        min=0.0, help="Before each step, wait until the target's processes use less CPU "
        "than this, in cores: a failed step can leave work queued in them (0: no wait).")]
    = default("settle_cores"),
    settle_max: Annotated[str | None, typer.Option(
        help="Wait at most this long for that (default 2m, 30s with --quick).")] = None,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate/--no-calibrate",
        help="Measure the host's speed with fixed work before each step and after the last "
        "(about 0.2 s each), and flag the steps around which it moved.")]
    = default("calibrate"),
    host_drift: Annotated[str, typer.Option(
        help="Flag a step when the host's speed moved more than this share from the run's "
        "start; a number that rests on a flagged step is not comparable.")]
    = percent(default("host_drift")),
    fresh: Annotated[bool, typer.Option(
        "--fresh",
        help="Before each repeat: restart the local stack with empty stores and seed it.")]
    = False,
    graph: Annotated[str, typer.Option(help="With --fresh: the graph to seed.")] = "synthetic",
    posts_per_user: Annotated[int, typer.Option(
        min=0, help="With --fresh: each user composes 0..N posts.")] = 3,
    graph_seed: Annotated[int, typer.Option(help="With --fresh: seed of graph and posts.")] = 1,
    grow: Annotated[str | None, typer.Option(
        metavar="POSTS,...", help="Ramp at each of these numbers of posts stored, rising "
        "(e.g. 10k,100k,1M): the local stack's posts are brought up to each with seed's bulk "
        "path, on the graph seeded, then the ramp runs; one bundle with the curve. With "
        "--fresh: the stack emptied and --graph seeded (bulk, --posts-per-user only if "
        "given) once, first.")] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    power_cmd: PowerCmd = None,
    power_meter: PowerMeter = MeterChoice.AUTO,
    power_coefficients: PowerCoefficients = None,
    cpu_family: CpuFamily = None,
    label: Annotated[str | None, typer.Option(help="Names the bundle (default: workload).")]
    = None,
    results_dir: Annotated[Path, typer.Option(help="Where bundles go.")] = Path("results"),
    connections: Annotated[int | None, typer.Option(
        "--connections", "-c", help=(
        "Connections (the start, if growing; default: 64, or 32 a driver process when "
        "that is more)."))] = None,
    max_connections: Annotated[int | None, typer.Option(
        help="Grow the pool on demand up to this many; beyond, drop and count.")] = None,
    processes: Annotated[int | None, typer.Option(
        "--processes", "-P", help="Driver processes (default: the cores available).")] = None,
    timeout: Annotated[str, typer.Option(help="Per request.")] = (
        seconds_text(load_default("timeout_s"))),
    distribution: Annotated[Distribution, typer.Option(
        "--distribution", "-D", help="Inter-arrival times.")] = load_default("distribution"),
    users: Annotated[int, typer.Option(
        min=2, help="Users the workload draws from (with --fresh and no --users: the "
        "seeded graph's).")] = load_default("users"),
    seed: Annotated[int | None, typer.Option(help="Seed of the driver's random draws.")] = None,
    absolute_form: Annotated[bool, typer.Option(
        "--absolute-form/--origin-form",
        help="Request line with http://host:port/path or /path.")]
    = load_default("absolute_form"),
    trace_ratio: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Trace this share of the requests (e.g. 0.01) and record each "
        "service's latency per step; restarts the local stack traced, and back after.")]
    = None,
    containers: Annotated[str | None, typer.Option(
        metavar="PROJECT", help="Per-container CPU and memory of this compose project (as "
        "`docker compose -p PROJECT`; default project: compose), through the Docker API at "
        "DOCKER_HOST, instead of the local stack's processes.")] = None,
    pods: Annotated[str | None, typer.Option(
        metavar="RELEASE", help="Per-pod CPU and memory of this helm release's stack, from "
        "the kubelets' stats through the Kubernetes API of KUBECONFIG, instead of the local "
        "stack's processes.")] = None,
    namespace: Annotated[str, typer.Option(help="With --pods: the release's namespace.")]
    = "default",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live view.")] = False,
    cpu_placement: CpuPlacement = PlacementMode.SHARED,
    driver_cpus: DriverCpus = None,
) -> None:
    """Find the highest rate that holds the SLA: step the load up until it breaks."""
    from pydantic import ValidationError

    from socialbench.workloads.definitions.core import WorkloadError, load_workload

    if containers is not None and pods is not None:
        raise typer.BadParameter("measure either a compose project's containers or a "
                                 "release's pods, not both", param_hint="--containers/--pods")
    if containers is not None:
        require_extra("docker", "ramp --containers")
    if pods is not None:
        require_extra("k8s", "ramp --pods")
    followed = None
    if preset is not None:
        if quick:
            raise typer.BadParameter("--quick changes the steps a preset sets: shorten them "
                                     "with --step-duration and --warmup, recorded as "
                                     "deviations", param_hint="--quick")
        values, followed = preset_values(ctx, preset, "ramp")
        workload, connections = values.get("workload", workload), values.get(
            "connections", connections)
        start_rate, step = values.get("start_rate", start_rate), values.get("step", step)
        step_duration, repeat = values.get("step_duration", step_duration), values.get(
            "repeat", repeat)
        sla, max_errors = values.get("sla", sla), values.get("max_errors", max_errors)
        stop_after_declines = values.get("stop_after_declines", stop_after_declines)
    if refine and stop_after_declines:
        raise typer.BadParameter("--refine bisects below the first failed step, and with "
                                 "--stop-after-declines no failed step stops the ramp",
                                 param_hint="--refine")
    console = Console(highlight=False)
    profile = QUICK if quick else FULL
    step_s = duration(step_duration or profile["step_duration"], "--step-duration")
    stack = LocalStack(data_dir)
    pinned = stack.pinned_cpus(url)
    placed = placement_for(placement(cpu_placement, driver_cpus, stack_cpus=pinned),
                           stack.serves(url))
    source = ctx.get_parameter_source("users")
    users_given = source is not None and source.name != "DEFAULT"
    graph_users = None
    levels = None if grow is None else grow_levels(grow, stack, url, fresh,
                                                   containers or pods)
    if levels is not None and not fresh:
        record = found_dataset(stack, url, users).seeded
        graph_users = record.dataset.users if record is not None else None
    if fresh:
        from socialbench.workloads.seeding import graph as graphs

        try:
            graph_users = graphs.load(graph, seed=graph_seed).node_count
        except (graphs.GraphFormatError, OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--graph") from None
    processes, connections = driver_size(len(placed.driver_cpus), processes, connections)
    try:
        load = LoadConfig(
            url=url, rate=start_rate, duration_s=step_s,
            warmup_s=duration(warmup or profile["warmup"]), workload=workload,
            users=users if users_given or graph_users is None else graph_users,
            distribution=distribution,
            connections=connections, max_connections=max_connections,
            processes=processes,
            timeout_s=duration(timeout), seed=seed if seed is not None
            else secrets.randbits(32), absolute_form=absolute_form,
            cpus=placed.driver_affinity,
        )
        load_workload(load.workload, users=load.users, path=load.target.path)
        config = RampConfig(
            load=load, start_rate=start_rate, step_rate=step, step_duration_s=step_s,
            warmup_s=load.warmup_s, slas=tuple(Sla.parse(s) for s in sla or [DEFAULT_SLA]),
            max_error_ratio=ratio(max_errors), min_achieved_ratio=ratio(min_achieved),
            stop_on_saturation=not ignore_driver_saturation, max_rate=max_rate,
            max_steps=max_steps, refine=refine, resolution_rps=resolution,
            confirm_duration_s=duration(confirm_duration) if confirm_duration else None,
            repeat=repeat, pause_s=duration(pause or profile["pause"]),
            settle_cores=settle_cores,
            settle_max_s=duration(settle_max or profile["settle_max"], "--settle-max"),
            calibrate=calibrate, host_drift=ratio(host_drift),
            stop_after_declines=stop_after_declines,
        )
    except (ValidationError, WorkloadError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if plan:
        if followed is not None:
            console.print(f"[bold]{followed.headline()}[/]", soft_wrap=True)
        for line in plan_ramp(config).lines():
            console.print(line, soft_wrap=True)
        return
    if fresh and not stack.serves(url):
        raise typer.BadParameter(f"--fresh resets the local stack in {data_dir}, and {url} is "
                                 "not its front end", param_hint="--fresh")
    if trace_ratio is not None and (not stack.serves(url) or stack.running_state() is None):
        raise typer.BadParameter(f"--trace-ratio restarts the local stack in {data_dir} "
                                 f"traced, and {url} is not its running front end",
                                 param_hint="--trace-ratio")
    ppu_source = ctx.get_parameter_source("posts_per_user")
    kinds = None
    if containers is not None:
        from socialbench.deploy.compose import component_kinds

        kinds = component_kinds()
    options = RampOptions(
        config=config, label=label or workload.replace("/", "-"), results_dir=results_dir,
        data_dir=data_dir, placement=placed, fresh=fresh, graph=graph,
        posts_per_user=posts_per_user, graph_seed=graph_seed,
        grow_levels=tuple(levels) if levels is not None else None,
        grow_posts_per_user=posts_per_user if ppu_source is not None
        and ppu_source.name != "DEFAULT" else 0,
        trace_ratio=trace_ratio, containers=containers, container_kinds=kinds,
        pods=pods, namespace=namespace,
        energy=energy_options(power_cmd, power_meter, power_coefficients, cpu_family),
        quiet=quiet, preset=followed)
    run(lambda: run_ramp(options, console, signals_as_interrupt), console)


def report(
    directory: Annotated[Path, typer.Argument(help="A bundle (results/<time>-<label>).")],
) -> None:
    """Rebuild a bundle's plots and report.html from its files (a ramp's, or a growth's:
    ramp --grow)."""
    from socialbench.workloads.reports.growth_report import build_grow_report
    from socialbench.workloads.reports.ramp_report import build_report
    from socialbench.workloads.results.files import BundleError
    from socialbench.workloads.results.growth import GROW_JSON

    if (directory / GROW_JSON).exists():
        Console().print(f"Report: {build_grow_report(directory)}")
        return
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
    force: Annotated[bool, typer.Option(
        "--force", help="Compare runs at different SLAs or of different workloads.")] = False,
) -> None:
    """Runs side by side: max rate at the SLA, p99 at common rates, energy, and ratios."""
    from socialbench.workloads.reports.compare import compare as compare_bundles
    from socialbench.workloads.reports.compare import print_comparison, render_comparison
    from socialbench.workloads.results.files import BundleError

    if len(directories) < 2:
        raise typer.BadParameter("give at least two bundles", param_hint="DIRECTORIES")
    try:
        comparison = compare_bundles(directories, force=force)
    except BundleError as exc:
        raise typer.BadParameter(str(exc), param_hint="DIRECTORIES") from None
    console = Console(highlight=False, width=max(Console().width, 140))
    print_comparison(comparison, console)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = render_comparison(comparison, out or Path("results") / f"compare-{stamp}")
    console.print(f"Rendered: {path}")

