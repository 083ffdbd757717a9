"""'socialbench demo': the README's main command in a few minutes (what 'make demo' runs).

Its options into :class:`socialbench.workloads.runs.demo.DemoOptions`, and the demo
(:func:`~socialbench.workloads.runs.demo.run_demo`) from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir, DriverCpus, placement, run
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.driver.placement import PlacementMode
from socialbench.workloads.runs.demo import (
    MAX_STEPS,
    STEP_PER_CPU,
    DemoOptions,
    choose_placement,
    run_demo,
)


def demo(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    results_dir: Annotated[Path, typer.Option(help="Where the bundle goes.")] = Path("results"),
    posts_per_user: Annotated[int, typer.Option(min=0, help="Each user composes 0..N posts.")]
    = 3,
    start_rate: Annotated[float | None, typer.Option(
        min=1, help=f"First step, req/s (default: {STEP_PER_CPU:.0f} per CPU of the stack).")]
    = None,
    step: Annotated[float | None, typer.Option(
        min=1, help=f"Added each step, req/s (default: {STEP_PER_CPU:.0f} per CPU of the stack)."
                    " The knee is then bisected to a quarter of a step and confirmed.")]
    = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Ramp steps at most.")] = MAX_STEPS,
    # 10-second steps are too short for an overload's backlog to reach the usual 2 s.
    sla: Annotated[str, typer.Option(help="The SLA, e.g. p99=2s.")] = "p99=500ms",
    keep_running: Annotated[bool, typer.Option(
        "--keep-running", help="Leave the stack running afterwards (default: stop it).")]
    = False,
    cpu_placement: Annotated[PlacementMode | None, typer.Option(
        "--cpu-placement", help="shared or split (default: the demo chooses, and says why).")]
    = None,
    driver_cpus: DriverCpus = None,
) -> None:
    """Fresh stack, seeded graph, a quick ramp of the mixed workload, and its report."""
    console = Console(highlight=False)
    placed = (choose_placement(usable_cpus()) if cpu_placement is None and not driver_cpus
              else placement(cpu_placement or PlacementMode.SPLIT, driver_cpus, "as asked"))
    options = DemoOptions(
        data_dir=data_dir, results_dir=results_dir, placement=placed,
        posts_per_user=posts_per_user, start_rate=start_rate, step=step, max_steps=max_steps,
        sla=sla, keep_running=keep_running)
    run(lambda: run_demo(options, console), console)
