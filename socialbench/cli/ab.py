"""'socialbench ab A_DIR B_DIR': two running local stacks measured alternately."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_interrupt
from socialbench.cli.options import duration, load_default, model_default
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import mongodb_flavour
from socialbench.workloads.driver import Distribution, LoadConfig
from socialbench.workloads.results.files import bundle_dir
from socialbench.workloads.runs.ab import (
    AbBundle,
    AbConfig,
    AbError,
    AbRunner,
    Arm,
    print_result,
    write_bundle,
)


def _arm(name: str, data_dir: Path) -> tuple[Arm, LocalStack]:
    stack = LocalStack(data_dir)
    if stack.running_state() is None:
        raise typer.BadParameter(
            f"no stack runs from {data_dir}: start it first (socialbench up --data-dir "
            f"{data_dir} with its own --port, --media-port, store ports and "
            "--service-port-offset)", param_hint=f"{name}_DIR")
    url = stack.config.url
    config = stack.config
    workers = ", ".join(f"{service}={n}" for service, n in config.service_workers().items()
                        if n != 1) or "1 worker each"
    return Arm(name, url, f"{stack.data_dir}: {workers}", stack.sampler_factory(url)), stack


def ab(
    a_dir: Annotated[Path, typer.Argument(
        metavar="A_DIR", help="Data directory of the running stack A (the baseline).")],
    b_dir: Annotated[Path, typer.Argument(
        metavar="B_DIR", help="Data directory of the running stack B.")],
    rate: Annotated[list[float], typer.Option(
        "--rate", "-R", min=0.001, help="Offered req/s; repeat for several rates.")],
    workload: Annotated[str, typer.Option("--workload", "-w", help=(
        "compose-post, read-home-timeline, read-user-timeline, mixed, url, or path.py:Name."))]
    = "mixed",
    pairs: Annotated[int, typer.Option(min=2, help="A-B pairs per rate (ABBA order).")]
    = model_default(AbConfig, "pairs"),
    step_duration: Annotated[str, typer.Option(help="Measured time of each step.")] = "20s",
    warmup: Annotated[str, typer.Option(help="Load sent before each step's window.")] = "5s",
    users: Annotated[int, typer.Option(min=2, help="Users the workload draws ids from.")]
    = load_default("users"),
    connections: Annotated[int, typer.Option("--connections", "-c")]
    = load_default("connections"),
    processes: Annotated[int | None, typer.Option(
        "--processes", "-P", help="Driver processes (default: 1).")] = None,
    distribution: Annotated[Distribution, typer.Option("--distribution", "-D")]
    = load_default("distribution"),
    seed: Annotated[int | None, typer.Option(help="Seed of the driver's draws.")] = None,
    label: Annotated[str, typer.Option(help="Names the bundle.")] = "ab",
    results_dir: Annotated[Path, typer.Option(help="Where bundles go.")] = Path("results"),
) -> None:
    """Measure two running stacks alternately, step by step at the same rates: B / A paired."""
    from pydantic import ValidationError

    from socialbench.workloads.definitions.core import WorkloadError, load_workload
    from socialbench.workloads.probes import machine

    console = Console(highlight=False)
    arm_a, stack_a = _arm("A", a_dir)
    arm_b, stack_b = _arm("B", b_dir)
    if arm_a.url == arm_b.url:
        raise typer.BadParameter(f"A and B are the same stack ({arm_a.url})")
    try:
        load = LoadConfig(
            url=arm_a.url, rate=rate[0], duration_s=duration(step_duration, "--step-duration"),
            warmup_s=duration(warmup, "--warmup"), workload=workload, users=users,
            distribution=distribution, connections=connections,
            processes=processes or 1,
            seed=seed if seed is not None else secrets.randbits(32),
        )
        load_workload(load.workload, users=load.users, path=load.target.path)
        config = AbConfig(load=load, rates=tuple(rate), pairs=pairs,
                          step_duration_s=load.duration_s, warmup_s=load.warmup_s)
    except (ValidationError, WorkloadError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    steps = len(config.rates) * config.pairs * 2
    console.print(
        f"A/B of [bold]{workload}[/]: {steps} steps of {config.step_duration_s:g} s after "
        f"{config.warmup_s:g} s warm-up (about "
        f"{steps * (config.step_duration_s + config.warmup_s + 3) / 60:.0f} min), "
        f"{config.pairs} pairs at each of {', '.join(f'{r:,.6g}' for r in config.rates)} "
        "req/s, A then B, then B then A")
    runner = AbRunner(config, (arm_a, arm_b), note=console.print)
    try:
        with signals_as_interrupt():
            result = runner.run()
    except AbError as exc:
        console.print(f"[bold red]error[/]: {exc}")
        raise typer.Exit(1) from None
    described = machine.describe(mongodb_flavour())
    bundle = AbBundle(
        label=label, created_at=datetime.now(UTC), command_line=described["command_line"],
        git=described["git"], hardware=described["hardware"], software=described["software"],
        stacks={"A": _record(stack_a), "B": _record(stack_b)}, result=result,
    )
    directory = write_bundle(bundle_dir(results_dir, label), bundle)
    print_result(result, console)
    console.print(f"Bundle: {directory}")
    if not result.completed:
        raise typer.Exit(130)


def _record(stack: LocalStack) -> dict[str, object] | None:
    record = stack.record(stack.config.url)
    return record.model_dump(mode="json") if record is not None else None
