"""``socialbench seed``: load a social graph into a running stack.

Its options (the graph read, the progress file, ``<data dir>/seed-state.json`` unless
``--state``) into :class:`socialbench.workloads.runs.seed_run.SeedOptions`, and the seeding
(:func:`~socialbench.workloads.runs.seed_run.run_seed`) from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir, duration, run
from socialbench.stack.local import LocalStack
from socialbench.workloads.runs.seed_run import SeedOptions, run_seed
from socialbench.workloads.seeding import graph as graphs
from socialbench.workloads.seeding.patience import DEFAULT_RETRY_FOR_S
from socialbench.workloads.seeding.seed import (
    DEFAULT_CONCURRENCY,
    STATE_FILE,
    SeedPath,
    default_state_path,
)

console = Console()
DEFAULT_RETRY_FOR = f"{DEFAULT_RETRY_FOR_S:g}s"


def seed_command(
    graph: Annotated[str, typer.Option(
        help="synthetic[:USERS[:EDGES_PER_USER]] (default: shaped like socfb-Reed98), "
             "twitter[:USERS[:MEAN_FOLLOWS]] (directed, Twitter's heavy-tailed "
             "followers), a .mtx file, or the original's <name>.nodes/.edges pair.")]
    = "synthetic",
    url: Annotated[str | None, typer.Option(
        help="Front end of the stack (default: the local stack's in --data-dir).")] = None,
    posts_per_user: Annotated[int, typer.Option(
        min=0, help="Each user composes 0..N posts (0: none).")] = 0,
    path: Annotated[SeedPath, typer.Option(
        "--path", help="api: through the front end, a request per item. bulk: the "
        "services' own logic in this process on the local stack's stores, many items per "
        "call (for 100k+ users and millions of posts).")] = SeedPath.API,
    concurrency: Annotated[int, typer.Option(
        min=1, help="Requests in flight (--path api).")] = DEFAULT_CONCURRENCY,
    retry_for: Annotated[str, typer.Option(
        help="--path api: an item the front end answers 'not yet' (502, 503, 504, "
             "connection refused: a stack still coming up) is sent again, with backoff, "
             "for up to this long; when nothing else is answered for this long the "
             "seeding stops.")] = DEFAULT_RETRY_FOR,
    seed_value: Annotated[int, typer.Option("--seed", help="RNG seed (graph and posts).")] = 1,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    state: Annotated[Path | None, typer.Option(
        help=f"Progress file: an interrupted seeding run again with the same arguments "
             f"continues from it (default: <data dir>/{STATE_FILE}).")] = None,
    restart: Annotated[bool, typer.Option(
        "--restart", help="Ignore the progress file: seed everything again.")] = False,
) -> None:
    """Register users 0..N-1, follow every edge (both ways unless directed), optionally
    compose posts; resumable, with progress."""
    stack = LocalStack(data_dir)
    target = (url or stack.config.url).rstrip("/")
    state_path = state or default_state_path(data_dir)
    if path is SeedPath.BULK and stack.running_state() is None:
        raise typer.BadParameter(f"--path bulk writes the stores of the local stack in "
                                 f"{data_dir}, which is not running (socialbench up)",
                                 param_hint="--path")
    if path is SeedPath.BULK and not stack.serves(target):
        raise typer.BadParameter(f"--path bulk seeds the local stack in {data_dir}, and "
                                 f"{target} is not its front end", param_hint="--path/--url")
    try:
        social_graph = graphs.load(graph, seed=seed_value)
    except (graphs.GraphFormatError, OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--graph") from None
    options = SeedOptions(
        target=target, graph=social_graph, source=graph, data_dir=data_dir,
        state_path=state_path, posts_per_user=posts_per_user, path=path,
        concurrency=concurrency, seed_value=seed_value, restart=restart,
        retry_for_s=duration(retry_for, "--retry-for"))
    run(lambda: run_seed(options, console), console, soft_wrap=True)
