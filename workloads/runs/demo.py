"""'socialbench demo' past its options: the README's main command in a few minutes.

A fresh local stack, the default synthetic graph (socfb-Reed98's shape) seeded with a
few posts per user, a quick SLA ramp of the mixed workload against it, and the report.
Entry points: :class:`DemoOptions` (what the command parsed), :func:`run_demo` (the four
stages, the exit status back) and :func:`choose_placement` (the demo's own CPU placement).

The ramp's steps are sized by the CPUs the stack has (:data:`STEP_PER_CPU` each), so its
:data:`MAX_STEPS` reach past the knee of a machine like the 2-core one measured (about
900 mixed req/s per core), and the knee found is bisected and confirmed: the demo's
number is the machine's, not where the demo stopped.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.stack.servers import mongodb_flavour
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS
from socialbench.workloads.driver import LoadConfig
from socialbench.workloads.driver.config import driver_size, parse_duration
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.driver.placement import Placement, PlacementMode, plan_placement
from socialbench.workloads.ramp.engine import RampConfig, Sla
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.runs.local import check_hook
from socialbench.workloads.runs.ramp_job import RampJob, execute
from socialbench.workloads.runs.ramp_run import QUICK
from socialbench.workloads.seeding.seed import seed_graph

GRAPH = "synthetic"
USERS = DEFAULT_USERS  # the synthetic graph's default size
WORKLOAD = "mixed"
SPLIT_FROM_CPUS = 4  # from here the stack keeps 3/4 of the CPUs or more when the driver leaves
STEP_PER_CPU = 100.0  # req/s of the first step, and added each step, per CPU of the stack
MAX_STEPS = 12
REFINE_STEPS = 4  # the knee is bisected to a quarter of a step


@dataclass(frozen=True)
class DemoOptions:
    """What ``socialbench demo`` was asked, parsed."""

    data_dir: Path
    results_dir: Path
    placement: Placement
    posts_per_user: int = 3
    start_rate: float | None = None  # default: STEP_PER_CPU per CPU of the stack
    step: float | None = None  # the same
    max_steps: int = MAX_STEPS
    sla: str = "p99=500ms"
    keep_running: bool = False


def choose_placement(cpus: list[int]) -> Placement:
    """The demo's placement on ``cpus``, and why, in words for the reader."""
    if len(cpus) >= SPLIT_FROM_CPUS:
        plan = plan_placement(PlacementMode.SPLIT, available=cpus)
        return plan.model_copy(update={"reason": (
            f"with {len(cpus)} CPUs the driver can have {len(plan.driver_cpus)} of its own and "
            f"the stack keeps {len(plan.stack_cpus or [])}, so the driver's send lag is its "
            "own, not the stack's")})
    if len(cpus) == 1:
        return plan_placement(PlacementMode.SHARED, available=cpus,
                              reason="one CPU: there is nothing to split")
    return plan_placement(PlacementMode.SHARED, available=cpus, reason=(
        f"on {len(cpus)} CPUs a split would leave the stack {len(cpus) - 1}, cutting the "
        "capacity being measured, while the driver needs under half a core at the "
        "demo's rates; so they share the CPUs, and each step's driver verdict says whether "
        "the host was contended (a caveat: the latencies then include the driver's waits)"))


def run_demo(options: DemoOptions, console: Console) -> int:
    """The demo's four stages, printed; the exit status (1: the stores' check failed).
    The stack is stopped at the end, unless ``keep_running``; a
    :class:`socialbench.errors.SocialbenchError` if it could not be set up."""
    started = time.monotonic()
    stack = LocalStack(options.data_dir)
    placed = options.placement
    stack_cpus = placed.stack_cpus if placed.mode is PlacementMode.SPLIT else None
    per_cpu = STEP_PER_CPU * len(stack_cpus or usable_cpus())
    start_rate = options.start_rate or per_cpu
    step = options.step or per_cpu
    posts_per_user = options.posts_per_user

    def stage(number: int, title: str) -> None:
        console.rule(f"[bold]{number}/4 {title}[/]  ({time.monotonic() - started:.0f} s)")

    try:
        stage(1, "starting the local stack with empty stores")
        console.print(f"  CPU placement: {placed.describe()}.")
        config = stack.restart_fresh(on_progress=lambda m: console.print(f"  {m}"),
                                     cpus=stack_cpus)
        stage(2, f"seeding the {GRAPH} graph ({USERS} users, up to {posts_per_user} posts each)")
        graph = seed_graph(config.url, GRAPH, posts_per_user, seed_value=1)
        stage(3, f"quick SLA ramp of the {WORKLOAD} workload")
        processes, connections = driver_size(len(placed.driver_cpus))
        load = LoadConfig(
            url=config.url, workload=WORKLOAD, users=USERS, rate=start_rate,
            duration_s=parse_duration(QUICK["step_duration"]),
            warmup_s=parse_duration(QUICK["warmup"]),
            processes=processes, connections=connections, seed=secrets.randbits(32),
            cpus=placed.driver_affinity,
        )
        ramp_config = RampConfig(
            load=load, start_rate=start_rate, step_rate=step,
            step_duration_s=load.duration_s, warmup_s=load.warmup_s,
            slas=(Sla.parse(options.sla),), max_steps=options.max_steps,
            refine=True, resolution_rps=step / REFINE_STEPS,
            pause_s=parse_duration(QUICK["pause"]),
            settle_max_s=parse_duration(QUICK["settle_max"]),
        )
        job = RampJob(
            config=ramp_config, label=f"demo-{WORKLOAD}", results_dir=options.results_dir,
            sampler=stack.sampler_factory(config.url),
            resources_source=stack.resources_source(config.url),
            mongodb_server=mongodb_flavour(), stack=stack.record(config.url),
            dataset=Dataset(fresh=True, graph=graph, users=USERS,
                            posts_per_user=posts_per_user, seed=1),
            check=check_hook(stack, config.url, console), placement=placed,
        )
        with stack.placed(stack_cpus):
            result = execute(job, console)
        stage(4, "result")
        print_headline(result, console)
        console.print(f"Took {time.monotonic() - started:.0f} s. Compare with another run: "
                      f"socialbench compare {result.directory} <other bundle>")
        check = result.summary.check
        if check is not None and not check.passed:
            console.print(f"[bold red]FAILED[/]: the check of the stores: {check.reason}",
                          soft_wrap=True)
            return 1
        return 0
    finally:
        if not options.keep_running:
            console.print("Stopping the stack (--keep-running leaves it up).")
            stack.stop()
