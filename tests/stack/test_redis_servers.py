"""The commands that start Redis replicas and Redis Cluster nodes refuse what cannot work;
the servers themselves run in tests/runtime/test_redis_cluster.py and
test_redis_replicated.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from socialbench.stack.servers import (
    form_redis_cluster,
    redis_cluster_commands,
    redis_replica_command,
)


def test_cluster_nodes_are_cluster_enabled_with_a_bus_port_each(tmp_path: Path) -> None:
    nodes = redis_cluster_commands([7000, 7001], tmp_path, bus_ports=[17100, 17101])
    assert [node.address for node in nodes] == ["127.0.0.1:7000", "127.0.0.1:7001"]
    for node, bus in zip(nodes, ("17100", "17101"), strict=True):
        argv = " ".join(node.argv)
        assert "--cluster-enabled yes" in argv and f"--cluster-port {bus}" in argv
        assert f"--dir {tmp_path / str(node.port)}" in argv
    assert "--cluster-port 17000" in " ".join(redis_cluster_commands([7000], tmp_path)[0].argv)


def test_what_cannot_be_a_cluster_or_a_replica_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distinct ports"):
        redis_cluster_commands([7000, 7000], tmp_path)
    with pytest.raises(ValueError, match="beyond 65535"):
        redis_cluster_commands([60000], tmp_path)
    with pytest.raises(ValueError, match="5 nodes cannot be masters with 1 replicas each"):
        form_redis_cluster([f"127.0.0.1:{7000 + n}" for n in range(5)], 1)
    with pytest.raises(ValueError, match="host:port"):
        redis_replica_command(7000, tmp_path, "7001")
