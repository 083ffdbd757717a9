"""``socialbench load`` past its options: open-loop load at a fixed rate, printed.

Entry points: :class:`LoadOptions` (what the command parsed) and :func:`run_fixed_rate`
(the run, its summary and JSON; the exit status back). A driver that cannot run raises
:class:`socialbench.workloads.driver.runner.DriverError` (a ``SocialbenchError``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.placement import Placement, PlacementMode
from socialbench.workloads.driver.report import describe, live_line, print_summary
from socialbench.workloads.driver.result import SecondStats
from socialbench.workloads.driver.runner import StoppedBeforeWindow, run_load

Stoppable = Callable[[threading.Event], AbstractContextManager[object]]


@dataclass(frozen=True)
class LoadOptions:
    """What ``socialbench load`` was asked, parsed and checked."""

    config: LoadConfig
    placement: Placement
    data_dir: Path  # the local stack's: placed on the stack's CPUs with a split
    max_error_ratio: float  # exit 1 above it
    json_file: Path | None = None
    quiet: bool = False


def run_fixed_rate(options: LoadOptions, console: Console, stoppable: Stoppable) -> int:
    """The load, a live line a second, the summary; the exit status: 0, 1 (errors above
    ``max_error_ratio``) or 130 (stopped). ``stoppable(stop)`` guards the run: the CLI's
    ``signals_as_stop``, which sets ``stop`` at the first signal."""
    config, placed = options.config, options.placement
    console.print(describe(config))
    console.print(f"  CPU placement: {placed.describe()}")
    stop = threading.Event()
    stopping_told = False

    def on_second(second: SecondStats) -> None:
        nonlocal stopping_told
        if stop.is_set() and not stopping_told:
            stopping_told = True
            console.print(f"[yellow]Stopping[/]: nothing more is sent; the requests in flight "
                          f"get up to {config.timeout_s:g} s (signal again to end at once)")
        if not options.quiet:
            console.print(live_line(second))

    stack = LocalStack(options.data_dir)
    try:
        with (stack.placed(placed.stack_cpus if placed.mode is PlacementMode.SPLIT else None),
              stoppable(stop)):
            result = run_load(config, on_second, stop)
    except StoppedBeforeWindow as exc:
        console.print(f"[bold yellow]Stopped[/]: {exc}")
        return 130
    except KeyboardInterrupt:
        console.print("[bold yellow]Stopped[/] by a second signal: no result")
        return 130
    result = result.model_copy(update={"placement": placed})
    print_summary(result, console)
    if options.json_file is not None:
        options.json_file.parent.mkdir(parents=True, exist_ok=True)
        options.json_file.write_text(result.model_dump_json(indent=2))
        console.print(f"  Result written to {options.json_file}")
    if result.stopped_early:
        return 130
    if result.error_ratio > options.max_error_ratio:
        console.print(f"[bold red]FAILED[/]: {result.errors.total:,} errors, "
                      f"{result.error_ratio:.2%} of the requests, above --max-errors "
                      f"{100 * options.max_error_ratio:g}%")
        return 1
    return 0
