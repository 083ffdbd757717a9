"""The socialbench command line: one typer app, every command (their modules are beside)."""

from __future__ import annotations

from typing import Annotated

import typer

from socialbench import registry
from socialbench.cli import ab as ab_command
from socialbench.cli import deploy as deploy_commands
from socialbench.cli import ramp as ramp_command
from socialbench.cli import stack as stack_commands
from socialbench.cli.bench import bench_app
from socialbench.cli.cache import cache_app
from socialbench.cli.check import check_command
from socialbench.cli.demo import demo
from socialbench.cli.load import load
from socialbench.cli.locust import locust
from socialbench.cli.presets import presets_command
from socialbench.cli.seed import seed_command

app = typer.Typer(
    name="socialbench",
    help="The DeathStarBench social network in Python, and the tools to measure it.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    # Click's plain help: flags without a '<bool>' type (typer's rich panels show one on
    # every flag, --help too), and options wrapped to the terminal, not squeezed in a table.
    rich_markup_mode=None,
)


@app.command()
def serve(
    service: Annotated[str, typer.Argument(help="Service name, e.g. compose-post.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="Port (default: the registry's).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    unix: Annotated[str | None, typer.Option(
        help="Also listen on this Unix domain socket (callers on the same box).")] = None,
) -> None:
    """Run one service under the runtime's HTTP server; the same image runs every service."""
    from socialbench.runtime.app import serve_service

    try:
        registry.get(service)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0]), param_hint="SERVICE") from None
    _require_login_secret()
    serve_service(service, host=host, port=port, workers=workers, unix_path=unix)


def _require_login_secret() -> None:
    """Exit 2 with a clear message unless the environment gives a usable login secret.

    Every service of a deployment, and every worker of one, must check tokens with the
    same secret, so no process makes up its own.
    """
    from pydantic import ValidationError

    from socialbench.runtime.settings import LoginSecretMissing, Settings, require_login_secret

    try:
        require_login_secret(Settings())
    except LoginSecretMissing as exc:
        typer.echo(f"socialbench serve: {exc}", err=True)
        raise typer.Exit(2) from None
    except ValidationError as exc:
        messages = "; ".join(str(error["msg"]) for error in exc.errors())
        typer.echo(f"socialbench serve: bad settings: {messages}", err=True)
        raise typer.Exit(2) from None


for command in (stack_commands.up, stack_commands.down, stack_commands.status,
                stack_commands.logs, load, ramp_command.ramp, ramp_command.report,
                ramp_command.compare, demo, locust, deploy_commands.merge,
                deploy_commands.probe):
    app.command()(command)
app.command("seed")(seed_command)
app.command("ab")(ab_command.ab)
app.command("check")(check_command)
app.command("presets")(presets_command)
app.add_typer(deploy_commands.deploy_app)
app.add_typer(deploy_commands.loadjob_app)
app.add_typer(bench_app)
app.add_typer(cache_app)


if __name__ == "__main__":
    app()
