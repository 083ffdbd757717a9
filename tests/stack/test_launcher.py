"""The local launcher's plan: which processes, in which order, with which environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from socialbench import registry
from socialbench.stack import launcher
from socialbench.stack.launcher import StackConfig
from socialbench.stack.servers import find_binary, go_bin_dirs, mongodb_flavour
from tests.support import socialbench


def test_tracing_puts_jaeger_before_the_services_and_points_them_at_it(
    tmp_path: Path,
) -> None:
    config = StackConfig(data_dir=tmp_path, tracing=True, trace_sample_ratio=0.25,
                         jaeger_otlp_port=24318, jaeger_ui_port=26686)
    components = launcher.plan(config)
    names = [c.name for c in components]
    assert names.index("jaeger") < min(names.index(s.name) for s in registry.SERVICES)
    jaeger = components[names.index("jaeger")]
    assert jaeger.health_url == "http://127.0.0.1:26686/api/services"
    assert "127.0.0.1:24318" in (tmp_path / "jaeger.yaml").read_text()
    for component in components:
        if component.kind == "service":
            assert component.env["SOCIALBENCH_TRACING_ENDPOINT"] == (
                "http://127.0.0.1:24318/v1/traces")
            assert component.env["SOCIALBENCH_TRACING_SAMPLE_RATIO"] == "0.25"


def test_without_tracing_there_is_no_jaeger_and_no_endpoint(tmp_path: Path) -> None:
    components = launcher.plan(StackConfig(data_dir=tmp_path))
    assert "jaeger" not in [c.name for c in components]
    assert not any("SOCIALBENCH_TRACING_ENDPOINT" in c.env for c in components)


def test_up_with_tracing_but_no_jaeger_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every server but Jaeger stays findable (FerretDB is a Go binary too).
    servers = tmp_path / "bin"
    servers.mkdir()
    if mongodb_flavour() == "ferretdb":
        (servers / "ferretdb").symlink_to(find_binary("ferretdb", *go_bin_dirs()))
    go_bin = str(Path.home() / "go" / "bin")
    path = [str(servers), *(p for p in os.environ["PATH"].split(os.pathsep)
                            if not p.startswith(go_bin))]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    monkeypatch.setenv("GOPATH", str(tmp_path / "no-go"))
    monkeypatch.delenv("GOBIN", raising=False)
    result = socialbench("up", "--data-dir", str(tmp_path / "stack"), "--tracing")
    assert result.returncode == 2
    assert "jaeger is not installed" in result.stderr
    assert "scripts/build-jaeger.sh" in result.stderr
    assert not (tmp_path / "stack" / launcher.STATE_FILE).exists()


def test_restart_backoff_doubles_and_resets_after_a_healthy_run() -> None:
    backoff = launcher.RestartBackoff(first_s=1, most_s=8, healthy_after_s=60)
    # Quick deaths: 1, 2, 4, 8, then capped.
    delays = []
    now = 0.0
    for _ in range(5):
        delays.append(backoff.delay(now))
        now += delays[-1]
        backoff.started(now)
        now += 1  # dies a second after its restart
    assert delays == [1, 2, 4, 8, 8]
    # A run of 60 s or more since the last restart: back to the first delay.
    assert backoff.delay(now + 60) == 1
    backoff.started(now + 61)
    assert backoff.delay(now + 62) == 2  # and doubling again on a quick death
