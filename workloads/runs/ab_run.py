"""``socialbench ab`` past its options: two running local stacks measured alternately.

Entry points: :class:`AbOptions` (what the command parsed), :func:`local_arm` (an arm of
a running local stack) and :func:`run_ab` (the A/B run, its bundle and its table; the exit
status back). The A/B mode itself is :mod:`socialbench.workloads.runs.ab`; a run that
cannot go on raises its :class:`~socialbench.workloads.runs.ab.AbError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.stack.servers import mongodb_flavour
from socialbench.workloads.results.files import bundle_dir
from socialbench.workloads.runs.ab import (
    AbBundle,
    AbConfig,
    AbRunner,
    Arm,
    print_result,
    write_bundle,
)

Interruptible = Callable[[], AbstractContextManager[object]]


@dataclass(frozen=True)
class AbOptions:
    """What ``socialbench ab`` was asked, parsed and checked (both stacks running)."""

    config: AbConfig  # its load's URL is A's
    a_dir: Path  # the data directory of stack A (the baseline)
    b_dir: Path  # of stack B
    label: str = "ab"
    results_dir: Path = Path("results")


def local_arm(name: str, stack: LocalStack) -> Arm:
    """The arm ``name`` of the running local ``stack``: its front end, its workers, its
    processes' sampler."""
    url = stack.config.url
    config = stack.config
    workers = ", ".join(f"{service}={n}" for service, n in config.service_workers().items()
                        if n != 1) or "1 worker each"
    return Arm(name, url, f"{stack.data_dir}: {workers}", stack.sampler_factory(url))


def run_ab(options: AbOptions, console: Console,
           interruptible: Interruptible = contextlib.nullcontext) -> int:
    """The A/B run, printed, and its bundle; the exit status: 0, or 130 (interrupted: the
    pairs measured are in the bundle)."""
    from socialbench.workloads.probes import machine

    config = options.config
    stack_a, stack_b = LocalStack(options.a_dir), LocalStack(options.b_dir)
    arm_a, arm_b = local_arm("A", stack_a), local_arm("B", stack_b)
    steps = len(config.rates) * config.pairs * 2
    console.print(
        f"A/B of [bold]{config.load.workload}[/]: {steps} steps of {config.step_duration_s:g} s "
        f"after {config.warmup_s:g} s warm-up (about "
        f"{steps * (config.step_duration_s + config.warmup_s + 3) / 60:.0f} min), "
        f"{config.pairs} pairs at each of {', '.join(f'{r:,.6g}' for r in config.rates)} "
        "req/s, A then B, then B then A")
    runner = AbRunner(config, (arm_a, arm_b), note=console.print)
    with interruptible():
        result = runner.run()
    described = machine.describe(mongodb_flavour())
    bundle = AbBundle(
        label=options.label, created_at=datetime.now(UTC),
        command_line=described["command_line"], git=described["git"],
        hardware=described["hardware"], software=described["software"],
        stacks={"A": _record(stack_a), "B": _record(stack_b)}, result=result,
    )
    directory = write_bundle(bundle_dir(options.results_dir, options.label), bundle)
    print_result(result, console)
    console.print(f"Bundle: {directory}")
    return 0 if result.completed else 130


def _record(stack: LocalStack) -> dict[str, object] | None:
    record = stack.record(stack.config.url)
    return record.model_dump(mode="json") if record is not None else None
