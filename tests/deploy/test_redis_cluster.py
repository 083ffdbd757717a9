"""The chart's Job command forms a Redis Cluster of real nodes given by name, once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from socialbench.deploy.redis_cluster import PASSWORD_ENV, form
from socialbench.stack.servers import (
    ServerCommand,
    ServerProcess,
    free_ports,
    redis_cluster_commands,
)

PASSWORD = "s3cretpassword"


@pytest.fixture
def unformed_nodes(tmp_path: Path) -> Iterator[list[ServerCommand]]:
    """Three cluster-enabled redis-servers with a password, not yet one cluster."""
    ports = free_ports(6)
    commands = redis_cluster_commands(ports[:3], tmp_path, bus_ports=ports[3:],
                                      node_timeout_ms=1000, password=PASSWORD)
    with ExitStack() as stops:
        for command in commands:
            server = ServerProcess(command, tmp_path / f"{command.name}.log")
            stops.callback(server.stop)
            server.wait_ready()
        yield commands


def cluster_info(command: ServerCommand) -> dict[str, str]:
    with redis.Redis(host=command.host, port=command.port, password=PASSWORD) as client:
        text = client.execute_command("CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def test_nodes_given_by_name_become_one_cluster_and_a_second_run_changes_nothing(
        unformed_nodes: list[ServerCommand], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    names = [f"localhost:{command.port}" for command in unformed_nodes]
    assert cluster_info(unformed_nodes[0])["cluster_state"] == "fail"
    assert form(names, 0, wait_s=30) == 0
    for command in unformed_nodes:
        info = cluster_info(command)
        assert (info["cluster_state"], info["cluster_known_nodes"]) == ("ok", "3")
    epochs = [cluster_info(command)["cluster_current_epoch"] for command in unformed_nodes]
    assert form(names, 0, wait_s=30) == 0
    assert [cluster_info(command)["cluster_current_epoch"] for command in unformed_nodes] == epochs
    assert "serves every slot" in capsys.readouterr().out


def test_a_node_that_never_answers_is_named_and_a_wrong_password_said(
        unformed_nodes: list[ServerCommand], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    names = [f"localhost:{command.port}" for command in unformed_nodes]
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert form([*names[:1], "no-such-node.invalid:6379"], 0, wait_s=0.5) == 1
    error = capsys.readouterr().err
    assert "do not answer: no-such-node.invalid:6379" in error and "localhost" not in error
    monkeypatch.setenv(PASSWORD_ENV, "wrong")
    assert form(names, 0, wait_s=30) == 1
    assert "refused the password (REDISCLI_AUTH)" in capsys.readouterr().err
    assert cluster_info(unformed_nodes[0])["cluster_state"] == "fail"
