"""The stack on the original's store layout (``up --stores per-service``, memcached given
``--memcached-memory``) and on a Redis Cluster (``up --redis-mode cluster``, 3 masters and
3 replicas): seeded, loaded and checked, each service's data in its own instances. A stack
of its own for each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pymongo
import pytest
import redis

from socialbench import registry
from socialbench.registry import Store, StoreLayout
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_ports
from socialbench.stack.store_stats import memcached_stats
from tests.conftest import store_options
from tests.support import socialbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USERS = 40
MEMCACHED_MB = 64


@pytest.fixture(scope="module")
def per_service_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from own_stack(tmp_path_factory.mktemp("per-service"), "per-service",
                         "--memcached-memory", str(MEMCACHED_MB))


@pytest.fixture(scope="module")
def redis_cluster_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from own_stack(tmp_path_factory.mktemp("redis-cluster"), "shared",
                         "--redis-mode", "cluster")


def own_stack(data_dir: Path, layout: str, *options: str) -> Iterator[Path]:
    port, media = free_ports(2)
    up = socialbench("up", "--data-dir", str(data_dir), "--port", str(port),
                     "--media-port", str(media), *store_options(layout), *options,
                     "--service-port-offset", str(launcher.free_service_offset()),
                     "--nginx-workers", "1", "--default-workers", "1")
    try:
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
        yield data_dir
    finally:
        state = launcher.StackState.read(data_dir)
        down = socialbench("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stderr
        if state is not None:
            left = [c.name for c in state.components if launcher.pid_alive(c.pid)]
            assert not left, f"processes left running after down: {left}"


def seed_load_and_check(data_dir: Path) -> launcher.StackConfig:
    """Seed a small graph, send a mixed load with no error allowed, and check the stores."""
    config = launcher.StackConfig.from_json((data_dir / launcher.CONFIG_FILE).read_text())
    seed = socialbench("seed", "--url", config.url, "--graph", f"synthetic:{USERS}:4",
                       "--posts-per-user", "2", "--seed", "3", "--concurrency", "4")
    assert seed.returncode == 0, f"{seed.stdout}\n{seed.stderr}"
    load = socialbench("load", config.url, "--workload", "mixed", "--rate", "40",
                       "--duration", "8s", "--users", str(USERS), "--processes", "1",
                       "--seed", "5", "--max-errors", "0", "--quiet")
    assert load.returncode == 0, f"{load.stdout}\n{load.stderr}"

    check = socialbench("check", "--data-dir", str(data_dir))
    assert check.returncode == 0, f"{check.stdout}\n{check.stderr}"
    assert "Check passed" in check.stdout
    return config


def test_seeded_loaded_and_checked_on_the_originals_layout(per_service_stack: Path) -> None:
    state = launcher.StackState.read(per_service_stack)
    assert state is not None
    stores = {c.name for c in state.components if c.kind == "store"}
    assert stores == {i.name for i in registry.store_instances(StoreLayout.PER_SERVICE)}
    config = seed_load_and_check(per_service_stack)
    memcached = [c for c in state.components if c.name.endswith("-memcached")]
    assert len(memcached) == 2  # user's and post-storage's
    assert {int(memcached_stats("127.0.0.1", c.port)["limit_maxbytes"]) for c in memcached} == {
        MEMCACHED_MB * 2**20}

    # Each service's data is in its own instances and nowhere else.
    def mongodb(owner: str) -> pymongo.MongoClient[dict[str, object]]:
        spec = registry.get(owner)
        return pymongo.MongoClient(config.store_address(spec, Store.MONGODB),
                                   serverSelectionTimeoutMS=5000)

    databases = {owner: set(mongodb(owner).list_database_names()) - {"admin", "local", "config"}
                 for owner in ("user", "social-graph", "post-storage", "user-timeline",
                               "url-shorten")}
    assert databases["post-storage"] == {"post"}
    assert databases["user"] == {"user"}
    assert databases["social-graph"] == {"social-graph"}
    assert databases["user-timeline"] == {"user-timeline"}
    assert "post" not in databases["url-shorten"]

    def redis_keys(owner: str) -> list[bytes]:
        url = config.store_address(registry.get(owner), Store.REDIS)
        with redis.Redis.from_url(url) as client:
            return list(client.scan_iter(count=1000))

    home = redis_keys("home-timeline")
    assert home and all(key.endswith(b":home-timeline") for key in home)
    assert not any(key.endswith(b":home-timeline") for key in redis_keys("user-timeline"))
    assert not any(key.endswith(b":home-timeline") for key in redis_keys("social-graph"))

    # As another deployment's would be checked: each instance's URL given (SERVICE=URL).
    def urls(store: Store, services: tuple[str, ...]) -> list[str]:
        return [arg for name in services for arg in (
            f"--{store}-url", f"{name}={config.store_address(registry.get(name), store)}")]

    mongodb_urls = urls(Store.MONGODB, ("post-storage", "social-graph", "user-timeline", "user"))
    redis_urls = urls(Store.REDIS, ("user-timeline", "home-timeline"))
    given = socialbench("check", *mongodb_urls, *redis_urls)
    assert given.returncode == 0 and "Check passed" in given.stdout, given.stdout + given.stderr
    # post-storage's MongoDB for every service: no user there, no follow, no timeline.
    post_storage = config.store_address(registry.get("post-storage"), Store.MONGODB)
    one = socialbench("check", *redis_urls, "--mongodb-url", post_storage)
    assert one.returncode == 1 and "Check FAILED" in one.stdout, one.stdout + one.stderr


def test_seeded_loaded_and_checked_on_a_redis_cluster(redis_cluster_stack: Path) -> None:
    config = seed_load_and_check(redis_cluster_stack)
    nodes = config.instance_ports(registry.StoreInstance(Store.REDIS))
    assert len(nodes) == 6
    # The timelines are spread over the three masters, each key where its slot is.
    keys_per_master = []
    for port in nodes:
        with redis.Redis(port=port) as node:
            if node.info("replication")["role"] == "master":
                keys_per_master.append(node.dbsize())
    assert len(keys_per_master) == 3 and all(keys > 0 for keys in keys_per_master)
    # A manifest of this stack says which client and topology each service ran.
    record = LocalStack(redis_cluster_stack).record(config.url)
    assert record is not None
    assert record.store_clients["home-timeline"]["redis"] == {
        "client": "socialbench, with redis-py's slot map and redirects",
        "topology": "cluster of 3 masters"}
    assert set(record.store_clients["post-storage"]) == {"memcached", "mongodb"}
