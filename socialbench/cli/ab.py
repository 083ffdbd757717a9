"""'socialbench ab A_DIR B_DIR': two running local stacks measured alternately."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.interrupts import signals_as_interrupt
from socialbench.cli.options import duration, load_default, model_default, run
from socialbench.stack.local import LocalStack
from socialbench.workloads.driver import Distribution, LoadConfig
from socialbench.workloads.runs.ab import AbConfig
from socialbench.workloads.runs.ab_run import AbOptions, run_ab


def _running(name: str, data_dir: Path) -> LocalStack:
    stack = LocalStack(data_dir)
    if stack.running_state() is None:
        raise typer.BadParameter(
            f"no stack runs from {data_dir}: start it first (socialbench up --data-dir "
            f"{data_dir} with its own --port, --media-port, store ports and "
            "--service-port-offset)", param_hint=f"{name}_DIR")
    return stack


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

    console = Console(highlight=False)
    url_a = _running("A", a_dir).config.url
    url_b = _running("B", b_dir).config.url
    if url_a == url_b:
        raise typer.BadParameter(f"A and B are the same stack ({url_a})")
    try:
        load = LoadConfig(
            url=url_a, rate=rate[0], duration_s=duration(step_duration, "--step-duration"),
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
    options = AbOptions(config=config, a_dir=a_dir, b_dir=b_dir, label=label,
                        results_dir=results_dir)
    run(lambda: run_ab(options, console, signals_as_interrupt), console)
