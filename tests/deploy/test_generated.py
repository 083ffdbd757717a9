"""The generated deployment files are what the registry gives today."""

from __future__ import annotations

from pathlib import Path

import pytest
from socialbench.gateway import nginx

from socialbench import registry
from socialbench.deploy import generate, stack


def test_generated_files_are_up_to_date() -> None:
    stale = [str(p.relative_to(stack.REPO_ROOT)) for p in generate.stale_files()]
    assert not stale, f"run `python -m socialbench.deploy generate`: {stale} are stale"


def test_compose_and_helm_get_the_same_gateway_as_local_mode() -> None:
    expected = generate.expected_files()
    compose_conf = expected[stack.COMPOSE_DIR / "nginx.conf"]
    assert compose_conf == expected[stack.CHART_DIR / "files" / "nginx.conf"]
    for route in nginx.routes():
        spec = registry.get(route.upstream)
        assert f"location = {route.path} {{" in compose_conf
        assert f"server {spec.name}:{spec.port};" in compose_conf


def test_check_names_a_stale_file_and_generate_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stack, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(stack, "COMPOSE_DIR", tmp_path / "compose")
    monkeypatch.setattr(stack, "CHART_DIR", tmp_path / "helm" / "socialnetwork")
    assert generate.main(["check"]) == 1
    assert "stale: compose/docker-compose.yml" in capsys.readouterr().err
    assert generate.main(["generate"]) == 0
    assert generate.main(["check"]) == 0
    assert (tmp_path / "helm/socialnetwork/files/registry.yaml").is_file()
