"""The generated deployment files are what the registry gives today."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench import registry
from socialbench.cli import app
from socialbench.deploy import GENERATE_COMMAND, generate
from socialbench.deploy import stack_spec as stack
from socialbench.gateway import nginx


def test_generated_files_are_up_to_date() -> None:
    stale = [str(p.relative_to(stack.REPO_ROOT)) for p in generate.stale_files()]
    assert not stale, f"run `{GENERATE_COMMAND}`: {stale} are stale"


def test_compose_and_helm_get_the_same_gateway_as_local_mode() -> None:
    expected = generate.expected_files()
    compose_conf = expected[stack.COMPOSE_DIR / "nginx.conf"]
    assert compose_conf == expected[stack.CHART_DIR / "files" / "nginx.conf"]
    for route in nginx.routes():
        spec = registry.get(route.upstream)
        assert f"location = {route.path} {{" in compose_conf
        assert f"server {spec.name}:{spec.port};" in compose_conf


def test_check_names_a_stale_file_and_generate_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(stack, "COMPOSE_DIR", tmp_path / "compose")
    monkeypatch.setattr(stack, "CHART_DIR", tmp_path / "helm" / "socialnetwork")
    runner = CliRunner()
    check = runner.invoke(app, ["deploy", "check"])
    assert check.exit_code == 1
    assert "stale: compose/docker-compose.yml (run: socialbench deploy generate)" in check.output
    written = runner.invoke(app, ["deploy", "generate"])
    assert written.exit_code == 0, written.output
    assert "wrote helm/socialnetwork/files/registry.yaml" in written.output
    assert runner.invoke(app, ["deploy", "check"]).exit_code == 0
    assert (tmp_path / "helm/socialnetwork/files/registry.yaml").is_file()


def test_generated_files_name_the_command_that_writes_them() -> None:
    for path, text in generate.expected_files().items():
        if path.suffix in (".yml", ".yaml", ".env"):
            assert f"by `{GENERATE_COMMAND}`" in text, path
    assert GENERATE_COMMAND.split()[1:] == ["deploy", "generate"]
    assert CliRunner().invoke(app, [*GENERATE_COMMAND.split()[1:], "--help"]).exit_code == 0
