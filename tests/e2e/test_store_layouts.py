"""The stack on the original's store layout (``up --stores per-service``, memcached given
``--memcached-memory``) and on the scaled layout ``up`` plans for 128 CPUs (per-service,
each Redis it names a Redis Cluster, here of 3 masters and 3 replicas, memcached in
several processes), the latter on one CPU (``up --cpus 1``): seeded, loaded and checked,
each service's data in its own instances. A stack of its own for each."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pymongo
import pytest
import redis

from socialbench import registry
from socialbench.registry import Store, StoreLayout
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_ports
from socialbench.stack.sizing import size_stack
from socialbench.stack.store_stats import memcached_stats
from socialbench.workloads.driver.hostload import usable_cpus
from tests.conftest import store_options
from tests.support import socialbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USERS = 40
MEMCACHED_MB = 64


@pytest.fixture(scope="module")
def per_service_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from own_stack(tmp_path_factory.mktemp("per-service"), "per-service",
                         "--memcached-memory", str(MEMCACHED_MB))


SCALED = size_stack(128)


@pytest.fixture(scope="module")
def scaled_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stores as planned for 128 CPUs (fewer memcached threads: one CPU here), and
    every process on the first usable CPU."""
    clusters = [arg for name in SCALED.redis_clusters for arg in ("--redis-cluster", name)]
    yield from own_stack(tmp_path_factory.mktemp("scaled"), SCALED.store_layout.value,
                         *clusters, "--memcached-instances", str(SCALED.memcached_instances),
                         "--memcached-threads", "2", "--cpus", "1")


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


def test_up_on_one_cpu_runs_every_process_of_the_stack_there(scaled_stack: Path) -> None:
    state = launcher.StackState.read(scaled_stack)
    assert state is not None
    first = usable_cpus()[0]
    roots = [state.supervisor_pid, *(c.pid for c in state.components if c.pid)]
    threads = 0
    for root in roots:
        for process in (psutil.Process(root), *psutil.Process(root).children(recursive=True)):
            for tid in os.listdir(f"/proc/{process.pid}/task"):
                assert os.sched_getaffinity(int(tid)) == {first}, (process.name(), tid)
                threads += 1
    assert threads > len(roots)  # every thread of every process, workers included
    record = LocalStack(scaled_stack).record(state.url)
    assert record is not None and record.cpus == [first]
    assert record.workers_cpus == 1 and "stores" in record.sizing


def test_seeded_loaded_and_checked_on_the_scaled_layout(scaled_stack: Path) -> None:
    assert SCALED.store_layout is StoreLayout.PER_SERVICE and SCALED.redis_clusters
    config = seed_load_and_check(scaled_stack)
    home = registry.store_instance(registry.get("home-timeline"), Store.REDIS,
                                   StoreLayout.PER_SERVICE)
    assert home.name in SCALED.redis_clusters
    # Each sized cluster (3 masters here: masters follow the CPUs, and this is one) holds
    # its keys spread over its masters, each key where its slot is.
    for name in SCALED.redis_clusters:
        instance = next(i for i in config.store_instances() if i.name == name)
        nodes = config.instance_ports(instance)
        assert len(nodes) == 6, name
        keys_per_master = []
        for port in nodes:
            with redis.Redis(port=port) as node:
                if node.info("replication")["role"] == "master":
                    keys_per_master.append(node.dbsize())
        assert len(keys_per_master) == 3 and all(keys > 0 for keys in keys_per_master), name
    # Any other Redis instance stays a single server.
    for instance in config.store_instances():
        if instance.store is Store.REDIS and instance.name not in SCALED.redis_clusters:
            assert len(config.instance_ports(instance)) == 1, instance.name
    # memcached: the planned processes for each instance.
    assert len(config.memcached_ports) == 2 * SCALED.memcached_instances
    # A manifest of this stack says which client and topology each service ran.
    record = LocalStack(scaled_stack).record(config.url)
    assert record is not None
    assert record.store_clients["home-timeline"]["redis"] == {
        "client": "socialbench, with redis-py's slot map and redirects",
        "topology": "cluster of 3 masters"}
    for name, mode in record.redis_modes.items():
        assert mode == ("cluster" if name in SCALED.redis_clusters else "standalone"), name
    assert set(record.store_clients["post-storage"]) == {"memcached", "mongodb"}
