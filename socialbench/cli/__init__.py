"""The ``socialbench`` command line."""

from __future__ import annotations

from typing import Annotated

import typer

from socialbench import registry
from socialbench.cli import deploy as deploy_commands
from socialbench.cli import ramp as ramp_command
from socialbench.cli import stack as stack_commands
from socialbench.cli.demo import demo
from socialbench.cli.load import load
from socialbench.cli.locust import locust
from socialbench.cli.seed import seed_command

app = typer.Typer(
    name="socialbench",
    help="The DeathStarBench social network in Python, and the tools to measure it.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.command()
def serve(
    service: Annotated[str, typer.Argument(help="Service name, e.g. compose-post.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="Port (default: the registry's).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 1,
) -> None:
    """Run one service under uvicorn (uvloop, httptools); the same image runs every service."""
    import uvicorn

    try:
        spec = registry.get(service)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0]), param_hint="SERVICE") from None
    uvicorn.run(
        f"{spec.module}:create_app",
        factory=True,
        host=host,
        port=port or spec.port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        timeout_keep_alive=120,
        backlog=4096,
    )


app.command()(stack_commands.up)
app.command()(stack_commands.down)
app.command()(stack_commands.status)
app.command()(stack_commands.logs)
app.command("seed")(seed_command)


app.command()(load)
app.command()(ramp_command.ramp)
app.command()(ramp_command.report)
app.command()(ramp_command.compare)
app.command()(demo)
app.command()(locust)
app.command()(deploy_commands.merge)


if __name__ == "__main__":
    app()
