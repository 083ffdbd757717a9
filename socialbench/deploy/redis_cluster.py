"""The chart's Redis Cluster made one: ``socialbench deploy form-redis-cluster NODE...``.

The chart (``stores.redis.mode: cluster``) starts each Redis instance as a StatefulSet of
cluster-enabled nodes; a Job then runs this command, which waits until every node's name
resolves and the node answers, and forms the cluster with the local launcher's code
(:func:`~socialbench.stack.servers.form_redis_cluster`: masters first, slots split evenly,
then the replicas, master by master). ``CLUSTER MEET`` takes addresses, not names, so the
nodes are met at the addresses their names resolve to; the services find them by name
(their seed URLs) and then by the addresses the cluster's slot map gives.

A cluster already formed is left as it is, so the Job runs again harmlessly after each
``helm upgrade``. The password, when the chart's Redis has one, comes from
``REDISCLI_AUTH`` (as for ``redis-cli``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence

from socialbench.stack.servers import form_redis_cluster

PASSWORD_ENV = "REDISCLI_AUTH"


def resolve(node: str) -> str:
    """``host:port`` with the host's IPv4 address (``OSError`` while it has none)."""
    host, _, port = node.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a Redis node is host:port, got {node!r}")
    address = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    return f"{address}:{port}"


def answers(address: str, password: str | None) -> bool:
    """Whether the Redis node at ``address`` answers PING (``ValueError`` if it refuses the
    password: waiting would not help)."""
    import redis

    host, _, port = address.rpartition(":")
    try:
        with redis.Redis(host=host, port=int(port), password=password,
                         socket_timeout=2.0, socket_connect_timeout=2.0) as client:
            return bool(client.ping())
    except (redis.AuthenticationError, redis.AuthenticationWrongNumberOfArgsError) as exc:
        raise ValueError(f"the Redis node at {address} refused the password "
                         f"({PASSWORD_ENV}): {exc}") from exc
    except redis.RedisError:
        return False


def wait_for_nodes(nodes: Sequence[str], password: str | None, wait_s: float,
                   interval_s: float = 1.0) -> list[str]:
    """The nodes' addresses, once every one resolves and answers; ``TimeoutError`` naming
    the ones that did not within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        addresses: dict[str, str] = {}
        for node in nodes:
            try:
                address = resolve(node)
            except OSError:
                continue
            if answers(address, password):
                addresses[node] = address
        missing = [node for node in nodes if node not in addresses]
        if not missing:
            return [addresses[node] for node in nodes]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"after {wait_s:g} s these Redis nodes still do not answer: "
                               f"{', '.join(missing)}")
        time.sleep(interval_s)


def form(nodes: Sequence[str], replicas_per_master: int, wait_s: float) -> int:
    """Form the cluster of ``nodes`` (masters first): 0, or 1 with the reason on stderr."""
    password = os.environ.get(PASSWORD_ENV) or None
    try:
        addresses = wait_for_nodes(nodes, password, wait_s)
        form_redis_cluster(addresses, replicas_per_master, password=password, timeout_s=120.0)
    except (TimeoutError, ValueError) as exc:
        print(f"form-redis-cluster: {exc}", file=sys.stderr)
        return 1
    print(f"a Redis Cluster of {len(nodes)} nodes serves every slot: {', '.join(nodes)}")
    return 0
