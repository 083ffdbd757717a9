"""``socialbench merge``: the command line of :mod:`socialbench.workloads.driver.merge`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def merge(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILES", help="`socialbench load --json` results.")
    ],
    json_file: Annotated[Path, typer.Option("--json", help="Where to write the merged result.")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary.")] = False,
) -> None:
    """Merge the results of drivers that ran together into one (histograms merged exactly)."""
    from rich.console import Console

    from socialbench.workloads.driver.merge import merge_results, read_results
    from socialbench.workloads.driver.report import print_summary

    try:
        merged = merge_results(read_results(files))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="FILES") from None
    json_file.parent.mkdir(parents=True, exist_ok=True)
    json_file.write_text(merged.model_dump_json(indent=2))
    if not quiet:
        console = Console(highlight=False, soft_wrap=True)
        print_summary(merged, console)
        console.print(f"  {len(files)} results merged into {json_file}")
