"""'socialbench demo': the README's main command in a few minutes (what 'make demo' runs).

A fresh local stack, the default synthetic graph (socfb-Reed98's shape) seeded with a
few posts per user, a quick SLA ramp of the mixed workload against it, and the report.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.check import check_hook
from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir
from socialbench.cli.ramp import QUICK, SETUP_ERRORS
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import mongodb_flavour
from socialbench.workloads.definitions.seed import seed_graph
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS
from socialbench.workloads.driver import LoadConfig
from socialbench.workloads.driver.config import default_processes, parse_duration
from socialbench.workloads.ramp.bundle import Dataset
from socialbench.workloads.ramp.engine import RampConfig, Sla
from socialbench.workloads.ramp.job import RampJob, execute
from socialbench.workloads.ramp.live import print_headline

GRAPH = "synthetic"
USERS = DEFAULT_USERS  # the synthetic graph's default size
WORKLOAD = "mixed"


def demo(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    results_dir: Annotated[Path, typer.Option(help="Where the bundle goes.")] = Path("results"),
    posts_per_user: Annotated[int, typer.Option(min=0, help="Each user composes 0..N posts.")]
    = 3,
    start_rate: Annotated[float, typer.Option(min=1, help="First step, req/s.")] = 100.0,
    step: Annotated[float, typer.Option(min=1, help="Added each step, req/s.")] = 100.0,
    max_steps: Annotated[int, typer.Option(min=1, help="Ramp steps at most.")] = 8,
    # 10-second steps are too short for an overload's backlog to reach the usual 2 s.
    sla: Annotated[str, typer.Option(help="The SLA, e.g. p99=2s.")] = "p99=500ms",
    keep_running: Annotated[bool, typer.Option(
        "--keep-running", help="Leave the stack running afterwards (default: stop it).")]
    = False,
) -> None:
    """Fresh stack, seeded graph, a quick ramp of the mixed workload, and its report."""
    console = Console(highlight=False)
    started = time.monotonic()
    stack = LocalStack(data_dir)

    def stage(number: int, title: str) -> None:
        console.rule(f"[bold]{number}/4 {title}[/]  ({time.monotonic() - started:.0f} s)")

    try:
        stage(1, "starting the local stack with empty stores")
        config = stack.restart_fresh(on_progress=lambda m: console.print(f"  {m}"))
        stage(2, f"seeding the {GRAPH} graph ({USERS} users, up to {posts_per_user} posts each)")
        graph = seed_graph(config.url, GRAPH, posts_per_user, seed_value=1)
        stage(3, f"quick SLA ramp of the {WORKLOAD} workload")
        load = LoadConfig(
            url=config.url, workload=WORKLOAD, users=USERS, rate=start_rate,
            duration_s=parse_duration(QUICK["step_duration"]),
            warmup_s=parse_duration(QUICK["warmup"]), processes=min(default_processes(), 2),
            seed=secrets.randbits(32),
        )
        ramp_config = RampConfig(
            load=load, start_rate=start_rate, step_rate=step,
            step_duration_s=load.duration_s, warmup_s=load.warmup_s,
            slas=(Sla.parse(sla),), max_steps=max_steps,
            pause_s=parse_duration(QUICK["pause"]),
            # On a small machine the driver shares the cores with the stack; its
            # saturation is recorded and shown in the report rather than ending the demo.
            stop_on_saturation=False,
        )
        job = RampJob(
            config=ramp_config, label=f"demo-{WORKLOAD}", results_dir=results_dir,
            sampler=stack.sampler_factory(config.url),
            resources_source=stack.resources_source(config.url),
            mongodb_server=mongodb_flavour(), stack=stack.record(config.url),
            dataset=Dataset(fresh=True, graph=graph, users=USERS,
                            posts_per_user=posts_per_user, seed=1),
            check=check_hook(stack, config.url, console),
        )
        result = execute(job, console)
        stage(4, "result")
        print_headline(result, console)
        console.print(f"Took {time.monotonic() - started:.0f} s. Compare with another run: "
                      f"socialbench compare {result.directory} <other bundle>")
        check = result.summary.check
        if check is not None and not check.passed:
            console.print(f"[bold red]FAILED[/]: the check of the stores: {check.reason}",
                          soft_wrap=True)
            raise typer.Exit(1)
    except SETUP_ERRORS as exc:
        console.print(f"[bold red]error[/]: {exc}")
        raise typer.Exit(1) from None
    finally:
        if not keep_running:
            console.print("Stopping the stack (--keep-running leaves it up).")
            stack.stop()
