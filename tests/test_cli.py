"""The one socialbench command: every command's help is plain, fits 80 columns, and its
defaults come from the config models."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from socialbench import registry
from socialbench.cli import app
from socialbench.cli.bench import parse_rates
from socialbench.cli.check import given_urls
from socialbench.cli.stack import parse_workers
from socialbench.registry import Store
from socialbench.stack.launcher import StackConfig
from socialbench.stack.up import describe_workers
from socialbench.workloads.check.contents import CHECKED_MONGODB
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS
from socialbench.workloads.driver.config import LoadConfig, driver_size

WIDTH = 80


def command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of ``command`` and of every command under it (groups and their commands)."""
    paths = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        paths += command_paths(sub, (*path, name))
    return paths


ROOT = typer.main.get_command(app)
COMMANDS = command_paths(ROOT)


def params(*path: str) -> dict[str, Any]:
    command = ROOT
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {param.name: param for param in command.params}


def test_the_walk_finds_the_commands_and_subcommands() -> None:
    for path in [("load",), ("ramp",), ("probe",), ("merge",), ("deploy", "generate"),
                 ("deploy", "check"), ("loadjob", "collect"), ("loadjob", "drive"),
                 ("bench", "driver"), ("bench", "stack"), ("up",), ("serve",)]:
        assert path in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "socialbench")
def test_help_is_plain_and_fits_80_columns(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)},
                                terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    text = result.output
    assert f"Usage: socialbench {' '.join(path)}".rstrip() in text
    assert "<bool>" not in text
    assert "``" not in text
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, wide


def test_users_default_to_the_workloads_default() -> None:
    assert params("load")["users"].default == DEFAULT_USERS
    assert params("ramp")["users"].default == DEFAULT_USERS
    assert LoadConfig.model_fields["users"].default == DEFAULT_USERS
    assert params("locust")["graph_users"].default == DEFAULT_USERS
    assert params("bench", "stack")["users"].default == DEFAULT_USERS


def test_load_defaults_are_the_config_models() -> None:
    load = params("load")
    fields = LoadConfig.model_fields
    # Connections: None, so that they follow the driver's processes (driver_size), the
    # model's when those are few.
    assert load["connections"].default is None and params("ramp")["connections"].default is None
    assert driver_size(1)[1] == fields["connections"].default
    assert load["distribution"].default == fields["distribution"].default
    assert load["absolute_form"].default == fields["absolute_form"].default
    assert load["workload"].default == fields["workload"].default
    assert load["timeout"].default == f"{fields['timeout_s'].default:g}s"


class FailingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request 500, keeping the connection."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FailingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_load_exits_1_with_the_reason_when_errors_pass_max_errors(failing_url: str) -> None:
    options = ["load", failing_url, "-R", "20", "-d", "1s", "-P", "1", "-c", "4", "-q"]
    result = CliRunner().invoke(app, options)
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("FAILED: ") and "above --max-errors 1%" in last, last

    tolerant = CliRunner().invoke(app, [*options, "--max-errors", "100%"])
    assert tolerant.exit_code == 0, tolerant.output


def test_up_chooses_workers_from_the_cpu_count_unless_told() -> None:
    assert params("up")["default_workers"].default is None
    assert StackConfig().default_workers is None


def test_up_says_which_workers_it_chose() -> None:
    assert describe_workers(StackConfig(cpus=[0, 1])) == "1 worker per service (for 2 CPUs)"
    on_16 = {spec.name: registry.default_workers(spec, 16) for spec in registry.SERVICES}
    named = ", ".join(f"{name} {count}" for name, count in on_16.items() if count > 1)
    assert named and describe_workers(StackConfig(cpus=list(range(16)))) == (
        f"Workers: {named}; 1 for every other service (for 16 CPUs)")
    assert describe_workers(StackConfig(default_workers=2)) == (
        "2 workers per service (as given)")
    assert describe_workers(StackConfig(default_workers=2, workers={"text": 1})).endswith(
        "; 1 for every other service (as given)")


def test_up_refuses_workers_of_an_unknown_service() -> None:
    assert parse_workers("text=2, home-timeline=3") == {"text": 2, "home-timeline": 3}
    for bad in ("text", "text=0", "nope=2"):
        with pytest.raises(typer.BadParameter):
            parse_workers(bad)


def test_bench_stack_takes_a_rate_per_workload_and_refuses_a_bad_one() -> None:
    assert parse_rates(["mixed=300", "compose-post=12.5"]) == {"mixed": 300.0,
                                                                "compose-post": 12.5}
    for bad in ("mixed", "=3", "mixed=0", "mixed=-1", "mixed=x", "mixed=nan", "mixed=inf"):
        with pytest.raises(typer.BadParameter):
            parse_rates([bad])
    result = CliRunner().invoke(app, ["bench", "stack", "--rate", "mixed=fast"])
    assert result.exit_code == 2 and "WORKLOAD=REQ/S" in result.output


def test_check_takes_one_url_for_every_service_or_one_per_instance() -> None:
    everyone = "mongodb://db:27017/?authSource=admin&tls=true"
    assert given_urls(Store.MONGODB, [everyone]) == dict.fromkeys(CHECKED_MONGODB, everyone)
    own = given_urls(Store.REDIS, ["home-timeline=redis://home:6379/0", "redis://all:6379/0"])
    assert own == {"home-timeline": "redis://home:6379/0", "user-timeline": "redis://all:6379/0"}
    each = [f"{name}=mongodb://{name}-mongodb:27017" for name in CHECKED_MONGODB]
    assert given_urls(Store.MONGODB, each) == {
        name: f"mongodb://{name}-mongodb:27017" for name in CHECKED_MONGODB}


@pytest.mark.parametrize(("values", "message"), [
    (["post-storage=mongodb://a:27017"], "no URL for social-graph, user-timeline, user"),
    (["media=mongodb://a:27017", "mongodb://b:27017"], "reads the mongodb of post-storage"),
    (["mongodb://a:27017", "mongodb://b:27017"], "two URLs for every service"),
    (["user=", "mongodb://b:27017"], "user=: no URL"),
])
def test_check_refuses_urls_that_leave_a_service_out_or_name_another(
    values: list[str], message: str,
) -> None:
    with pytest.raises(typer.BadParameter, match=message):
        given_urls(Store.MONGODB, values)
    argv = [arg for value in values for arg in ("--mongodb-url", value)]
    result = CliRunner().invoke(app, ["check", *argv, "--redis-url", "redis://127.0.0.1:1/0"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2 and message.split(",")[0] in result.output, result.output


def test_cache_protocol_takes_memtiers_names_and_short_ones() -> None:
    runner = CliRunner()
    for name in ("memcache_binary", "binary", "BINARY"):
        done = runner.invoke(app, ["cache", "run", "-P", name, "--preset", "memcached-yitian",
                                   "--plan"])
        assert done.exit_code == 0, done.output
        assert "1 deviation: --protocol memcache_binary (preset: memcache_text)" in done.output
    done = runner.invoke(app, ["cache", "run", "-P", "text", "--preset", "memcached-yitian",
                               "--plan"])
    assert done.exit_code == 0 and "no deviation" in done.output
    refused = [
        (["cache", "run", "--protocol", "ascii", "--plan"], "unknown protocol 'ascii': one of "
         "memcache_text, memcache_meta, memcache_binary, redis, text, meta, binary"),
        (["cache", "scale", "--kind", "redis", "-P", "binary", "--plan"],
         "redis does not speak memcache_binary"),
        (["cache", "scale", "--kind", "memcached", "-P", "redis", "--plan"],
         "memcached does not speak redis"),
        (["cache", "run", "-P", "binary", "--key-minimum", "5", "--key-maximum", "1",
          "--plan"], "Invalid value: key_maximum must be >= key_minimum"),
    ]
    for args, message in refused:
        done = runner.invoke(app, args)
        assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output


def test_the_cli_starts_without_matplotlib() -> None:
    # Every service container runs `socialbench serve`: matplotlib's import (and, in a new
    # container, its font cache: minutes under QEMU) is only for the commands that plot.
    import subprocess
    import sys

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, socialbench.cli, socialbench.cli.__main__; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"],
        capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert loaded == "[]"
