"""The commands of deployments: 'deploy generate|check|form-redis-cluster', 'probe',
'loadjob', 'merge'.

Their logic lives in socialbench.deploy (and socialbench.workloads.driver.merge); this
module is their command line only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from socialbench.cli.options import duration
from socialbench.deploy import loadjob as loadjob_defaults

deploy_app = typer.Typer(
    name="deploy", no_args_is_help=True,
    help="The compose and helm files generated from the registry.",
)
loadjob_app = typer.Typer(
    name="loadjob", no_args_is_help=True,
    help="The load Job on Kubernetes: N drivers started together, their results merged.",
)


@deploy_app.command()
def generate() -> None:
    """Rewrite the stale generated files (after editing the registry)."""
    from socialbench.deploy.generate import generate as write

    raise typer.Exit(write())


@deploy_app.command()
def check() -> None:
    """Exit 1, naming each generated file that the registry would change."""
    from socialbench.deploy.generate import check as check_files

    raise typer.Exit(check_files())


@deploy_app.command("form-redis-cluster")
def form_redis_cluster(
    nodes: Annotated[list[str], typer.Argument(
        metavar="NODE", help="host:port of every node, the masters first.")],
    replicas: Annotated[int, typer.Option(min=0, help="Replicas of each master.")] = 1,
    wait: Annotated[float, typer.Option(
        min=0, metavar="SECONDS", help="Wait this long for every node to answer.")] = 300.0,
) -> None:
    """Make the chart's Redis nodes one Redis Cluster (its Job; a formed one is left alone)."""
    from socialbench.deploy.redis_cluster import form

    raise typer.Exit(form(nodes, replicas, wait))


def probe(
    urls: Annotated[list[str], typer.Argument(
        metavar="URL", help="http://... (answers 200) or tcp://host:port (accepts).")],
    wait: Annotated[float, typer.Option(
        min=0, metavar="SECONDS", help="Keep trying this long (default: try once).")] = 0.0,
) -> None:
    """Health check of containers without curl: exit 0 when every URL is healthy."""
    from socialbench.deploy.probe import probe as check_urls

    raise typer.Exit(check_urls(urls, wait))


@loadjob_app.command()
def collect(
    drivers: Annotated[int, typer.Option(min=1, help="Drivers of the run.")],
    out: Annotated[Path, typer.Option(help="Bundle directory.")],
    run: Annotated[str, typer.Option(help="Name of the run.")] = "",
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = loadjob_defaults.DEFAULT_PORT,
    warmup: Annotated[str, typer.Option(help="The drivers' --warmup.")] = "0s",
    run_time: Annotated[str, typer.Option("--duration", help="The drivers' --duration.")]
    = "30s",
    ready_timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="Wait this long for every driver to be ready.")]
    = loadjob_defaults.READY_TIMEOUT_S,
    linger: Annotated[float, typer.Option(
        metavar="SECONDS", help="Serve the bundle this long after the merge.")]
    = loadjob_defaults.LINGER_S,
) -> None:
    """Run the collector: release the drivers together, merge their results."""
    from socialbench.deploy.loadjob import run_collector

    raise typer.Exit(run_collector(
        drivers=drivers, out_dir=out, run=run, host=host, port=port,
        warmup_s=duration(warmup, "--warmup"), duration_s=duration(run_time, "--duration"),
        ready_timeout_s=ready_timeout, linger_s=linger,
    ))


@loadjob_app.command()
def drive(
    collector: Annotated[str, typer.Option(metavar="URL", help="The collector, http://host:port.")],
    drivers: Annotated[int, typer.Option(min=1, help="Drivers of the run.")],
    rate: Annotated[float, typer.Option(help="Requests per second of all drivers together.")],
    index: Annotated[int, typer.Option(
        min=0, envvar="JOB_COMPLETION_INDEX",
        help="This driver's index (set by an Indexed Job).")],
    seed: Annotated[int | None, typer.Option(
        help="Driver i uses SEED + i (default: random).")] = None,
    ready_timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="Wait this long for the other drivers.")]
    = loadjob_defaults.READY_TIMEOUT_S,
    load_args: Annotated[list[str] | None, typer.Argument(
        metavar="LOAD_ARGS",
        help="After --: the target and more 'socialbench load' options, e.g. "
        "-- http://nginx:8080 --duration 60s.")] = None,
) -> None:
    """Run one driver: wait for the others, run 'socialbench load' at R/N, report."""
    from socialbench.deploy.loadjob import run_driver

    raise typer.Exit(run_driver(collector, drivers=drivers, rate=rate, index=index, seed=seed,
                                load_args=list(load_args or []),
                                ready_timeout_s=ready_timeout))


@loadjob_app.command()
def fetch(
    collector: Annotated[str, typer.Option(metavar="URL", help="The collector, http://host:port.")],
    results: Annotated[Path, typer.Option(help="Where bundles go.")] = Path("results"),
    wait: Annotated[float, typer.Option(
        min=0, metavar="SECONDS", help="Wait this long for the merge.")] = 0.0,
) -> None:
    """Copy the merged bundle into RESULTS/<UTC start>-<run>/ and print its summary."""
    from socialbench.deploy.loadjob import FetchError
    from socialbench.deploy.loadjob import fetch as fetch_bundle

    try:
        out = fetch_bundle(collector, results, wait_s=wait)
    except FetchError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    summary = out / "summary.txt"
    if summary.exists():
        typer.echo(summary.read_text().rstrip())
    typer.echo(f"Fetched: {out}")


def merge(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILES", help="'socialbench load --json' results.")
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
