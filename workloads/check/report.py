"""The check's result as printed: the counts, some examples, and the verdict last."""

from __future__ import annotations

from rich.console import Console

from socialbench.workloads.check.contents import CheckResult


def print_result(result: CheckResult, console: Console, examples: int | None = None) -> None:
    """The counts, the examples, and the verdict on the last line."""
    if result.error is None:
        console.print(
            f"Checked {result.posts:,} posts, {result.users:,} home timelines "
            f"({result.home_timeline_entries:,} entries), {result.user_timeline_entries:,} "
            f"user-timeline entries, {result.edges:,} follow edges and "
            f"{result.ended_follows:,} ended follows ({result.scope}) in "
            f"{result.elapsed_s:.1f} s")
        if result.sample is not None:
            console.print(f"Sampled {result.sample} (--full checks every user)",
                          soft_wrap=True)
        for kind, count in result.counts.items():
            console.print(f"  [red]{kind}[/]: {count:,}")
        for kind, count in result.tolerated.items():
            console.print(f"  [yellow]{kind}[/] (tolerated): {count:,}")
        shown = [p for p in result.problems if not p.tolerated] or result.problems
        for problem in shown[:examples]:
            console.print(f"    {problem}", markup=False, highlight=False, soft_wrap=True)
    if result.passed:
        console.print(f"[bold green]Check passed[/]: {result.reason}", soft_wrap=True)
    else:
        console.print(f"[bold red]Check FAILED[/]: {result.reason}", soft_wrap=True)
