"""The local launcher's plan: which processes, in which order, with which environment."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from socialbench import registry
from socialbench.registry import Store, StoreLayout
from socialbench.runtime.settings import JWT_SECRET_ENV, STORE_SETTINGS, Settings
from socialbench.stack import launcher
from socialbench.stack.launcher import StackConfig
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import (
    FERRETDB_GOGC,
    ferretdb_max_procs,
    find_binary,
    go_bin_dirs,
    mongodb_flavour,
    port_open,
    store_durability,
)
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


def test_services_share_a_secret_made_once_per_data_dir_and_kept_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(JWT_SECRET_ENV, raising=False)
    config = StackConfig(data_dir=tmp_path)
    components = launcher.plan(config)
    secret_file = tmp_path / launcher.SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    assert len(secret) >= 32
    services = [c for c in components if c.kind == "service"]
    assert services and all(c.env[JWT_SECRET_ENV] == secret for c in services)
    # Only the services get it: not the stores, not nginx.
    assert not any(JWT_SECRET_ENV in c.env for c in components if c.kind != "service")
    # A second plan (a restart) keeps it, so sessions stay valid.
    again = launcher.plan(config)
    assert {c.env[JWT_SECRET_ENV] for c in again if c.kind == "service"} == {secret}
    # Never in the state file or the configuration file.
    launcher.StackState("ready", "", os.getpid(), config.url, components).write(tmp_path)
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    for name in (launcher.STATE_FILE, launcher.CONFIG_FILE):
        assert secret not in (tmp_path / name).read_text(), name


def test_a_secret_in_the_environment_of_up_takes_the_files_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = "g" * 40
    monkeypatch.setenv(JWT_SECRET_ENV, given)
    components = launcher.plan(StackConfig(data_dir=tmp_path))
    assert {c.env[JWT_SECRET_ENV] for c in components if c.kind == "service"} == {given}
    assert not (tmp_path / launcher.SECRET_FILE).exists()
    assert JWT_SECRET_ENV not in launcher._inherited_env()


def test_a_loosened_secret_file_is_made_private_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(JWT_SECRET_ENV, raising=False)
    first = launcher.login_secret(tmp_path)
    (tmp_path / launcher.SECRET_FILE).chmod(0o644)
    assert launcher.login_secret(tmp_path) == first
    assert stat.S_IMODE((tmp_path / launcher.SECRET_FILE).stat().st_mode) == 0o600


def test_redis_keeps_an_append_only_file_in_its_data_dir(tmp_path: Path) -> None:
    components = launcher.plan(StackConfig(data_dir=tmp_path))
    [redis] = [c for c in components if c.name == "redis"]
    argv = redis.argv
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert argv[argv.index("--appendfsync") + 1] == "everysec"
    assert argv[argv.index("--dir") + 1] == str(tmp_path.resolve() / "redis")


def test_ferretdb_runs_with_the_recorded_go_runtime_settings(tmp_path: Path) -> None:
    components = launcher.plan(StackConfig(data_dir=tmp_path, worker_cpus=2))
    [mongodb] = [c for c in components if c.name == "mongodb"]
    if mongodb_flavour() == "ferretdb":
        assert mongodb.env == {"GOGC": FERRETDB_GOGC, "GOMAXPROCS": "1"}
    else:
        assert "GOGC" not in mongodb.env and "GOMAXPROCS" not in mongodb.env


@pytest.mark.parametrize(("cpus", "max_procs"), [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4)])
def test_ferretdb_gets_go_threads_for_its_share_of_the_stacks_cpus(
    tmp_path: Path, cpus: int, max_procs: int,
) -> None:
    assert ferretdb_max_procs(cpus) == max_procs
    # Never fewer than its share of the CPUs: it is not the stack's bottleneck by our hand.
    assert max_procs >= cpus * registry.MONGODB_CPU_SHARE
    config = StackConfig(data_dir=tmp_path, worker_cpus=cpus)
    [mongodb] = [c for c in launcher.plan(config) if c.name == "mongodb"]
    if mongodb_flavour() == "ferretdb":
        assert mongodb.env["GOMAXPROCS"] == str(max_procs)
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    record = LocalStack(tmp_path).record(config.url)
    assert record is not None
    if mongodb_flavour() == "ferretdb":
        assert record.durability["mongodb"]["gomaxprocs"] == str(max_procs)


def test_the_stack_record_says_what_each_store_keeps(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    record = stack.record(stack.config.url)
    assert record is not None
    assert record.durability["redis"]["appendonly"] == "yes"
    assert record.durability["redis"]["appendfsync"] == "everysec"
    assert record.durability["memcached"]["persistence"] == "none"
    assert record.durability["mongodb"]["server"] == mongodb_flavour()
    if mongodb_flavour() == "ferretdb":
        assert record.durability["mongodb"]["journal_mode"] == "wal"
        assert record.durability["mongodb"]["gogc"] == FERRETDB_GOGC


def test_the_record_says_how_ferretdb_was_built(tmp_path: Path) -> None:
    built, foreign = tmp_path / "built" / "ferretdb", tmp_path / "foreign" / "ferretdb"
    built.parent.mkdir()
    (built.parent / "ferretdb.socialbench").write_text("v1.24.2 unpatched\n")
    assert store_durability(str(built))["mongodb"]["build"] == "v1.24.2 unpatched"
    assert store_durability(str(foreign))["mongodb"]["build"] == "unknown"
    assert "build" not in store_durability("/usr/bin/mongod")["mongodb"]


def test_the_record_of_a_machine_with_no_mongodb_server_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GOBIN", str(tmp_path))
    monkeypatch.setenv("GOPATH", str(tmp_path))
    monkeypatch.setattr("socialbench.stack.servers.shutil.which", lambda *args, **kw: None)
    assert store_durability()["mongodb"]["build"] == "unknown"


def test_serve_refuses_to_start_without_a_secret() -> None:
    env = {k: v for k, v in os.environ.items() if k != JWT_SECRET_ENV}
    for secret in (None, "short", "socialbench-login-token-secret-change-me"):
        run_env = env if secret is None else {**env, JWT_SECRET_ENV: secret}
        result = subprocess.run([sys.executable, "-m", "socialbench.cli", "serve", "user",
                                 "--port", "1"], capture_output=True, text=True,
                                env=run_env, timeout=60, check=False)
        assert result.returncode == 2, (secret, result.stderr)
        assert JWT_SECRET_ENV in result.stderr, secret


def test_services_start_together_after_the_stores_and_before_nginx(tmp_path: Path) -> None:
    batches = launcher.start_batches(launcher.plan(StackConfig(data_dir=tmp_path)))
    names = [[c.name for c in batch] for batch in batches]
    assert names[:3] == [["mongodb"], ["redis"], ["memcached"]]
    assert sorted(names[3]) == sorted(s.name for s in registry.SERVICES)
    assert names[4:] == [["nginx"]]


def test_a_memcached_pool_is_started_on_consecutive_ports_and_given_to_the_services(
    tmp_path: Path,
) -> None:
    config = StackConfig(data_dir=tmp_path, memcached_port=12000, memcached_instances=3)
    components = launcher.plan(config)
    memcached = [c for c in components if c.name.startswith("memcached")]
    assert [(c.name, c.port) for c in memcached] == [
        ("memcached-1", 12000), ("memcached-2", 12001), ("memcached-3", 12002)]
    assert all(str(c.port) in c.argv for c in memcached)
    address = config.service_env(registry.get("post-storage"))["SOCIALBENCH_MEMCACHED_ADDRESS"]
    assert Settings(memcached_address=address).memcached_servers == [
        ("127.0.0.1", 12000), ("127.0.0.1", 12001), ("127.0.0.1", 12002)]
    cached = [c for c in components if c.kind == "service"
              and Store.MEMCACHED in registry.get(c.name).stores]
    assert len(cached) == 3
    assert all(c.env["SOCIALBENCH_MEMCACHED_ADDRESS"] == address for c in cached)
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    record = LocalStack(tmp_path).record(config.url)
    assert record is not None and record.memcached_servers == 3


def test_every_memcached_of_a_pool_gets_the_memory_asked_for(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, memcached_instances=2, memcached_memory_mb=3072)
    memcached = [c for c in launcher.plan(config) if c.name.startswith("memcached")]
    assert len(memcached) == 2
    for component in memcached:
        assert component.argv[component.argv.index("-m") + 1] == "3072"


def test_one_memcached_keeps_its_name_and_address(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, memcached_port=12000)
    assert [c.name for c in launcher.plan(config) if c.name.startswith("memcached")] == [
        "memcached"]
    assert config.service_env(registry.get("user"))[
        "SOCIALBENCH_MEMCACHED_ADDRESS"] == "127.0.0.1:12000"
    record = LocalStack(tmp_path).record(config.url)
    assert record is not None and record.memcached_servers == 1


def test_a_free_service_offset_leaves_every_service_port_free() -> None:
    offset = launcher.free_service_offset()
    config = StackConfig(service_port_offset=offset)
    assert not any(port_open("127.0.0.1", config.service_port(s)) for s in registry.SERVICES)


def test_a_services_workers_are_its_own_then_the_given_default_then_its_cpu_share() -> None:
    on_16 = list(range(16))
    config = StackConfig(cpus=on_16, workers={"text": 5})
    home = registry.default_workers(registry.get("home-timeline"), 16)
    assert home > 1
    assert (config.workers_of("text"), config.workers_of("home-timeline"),
            config.workers_of("unique-id")) == (5, home, 1)
    assert config.cpu_count == 16 and config.workers_chosen == "cpu-count"
    given = StackConfig(cpus=on_16, workers={"text": 5}, default_workers=2)
    assert (given.workers_of("text"), given.workers_of("home-timeline")) == (5, 2)
    assert given.workers_chosen == "given"
    assert StackConfig(cpus=[0, 1]).service_workers() == {s.name: 1 for s in registry.SERVICES}


def test_without_cpus_the_worker_counts_follow_the_cpus_this_process_may_use() -> None:
    config = StackConfig()
    assert config.cpu_count == len(os.sched_getaffinity(0))
    assert config.service_workers() == {
        s.name: registry.default_workers(s, config.cpu_count) for s in registry.SERVICES}


def test_the_cpu_count_fixed_at_the_first_start_outlasts_a_restart_on_fewer_cpus() -> None:
    started = StackConfig(cpus=list(range(16))).with_worker_cpus()
    assert started.worker_cpus == 16
    restarted = replace(started, cpus=[0, 1, 2, 3]).with_worker_cpus()  # ramp --fresh, split
    assert restarted.worker_cpus == 16
    assert restarted.service_workers() == started.service_workers()
    assert restarted.workers_of("home-timeline") == registry.default_workers(
        registry.get("home-timeline"), 16) > 1
    assert StackConfig.from_json(restarted.to_json()).service_workers() == (
        started.service_workers())


def test_the_plan_starts_each_service_with_its_worker_count(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, cpus=list(range(16)), workers={"text": 3})
    argv = {c.name: c.argv for c in launcher.plan(config) if c.kind == "service"}
    workers = {name: int(args[args.index("--workers") + 1]) for name, args in argv.items()}
    assert workers == config.service_workers()
    assert (workers["text"], workers["home-timeline"]) == (
        3, registry.default_workers(registry.get("home-timeline"), 16))


def test_services_and_nginx_call_the_services_over_unix_sockets(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path)
    components = {c.name: c for c in launcher.plan(config)}
    sockets = tmp_path.resolve() / "sockets"
    assert sockets.is_dir()
    for spec in registry.SERVICES:
        argv = components[spec.name].argv
        path = str(sockets / f"{spec.name}.sock")
        assert argv[argv.index("--unix") + 1] == path
        assert argv[argv.index("--port") + 1] == str(spec.port)  # health checks: TCP
        assert components["compose-post"].env[spec.url_env] == f"unix:{path}"
    conf = (tmp_path / "nginx.conf").read_text()
    assert f"server unix:{sockets}/compose-post.sock;" in conf
    assert "server 127.0.0.1:" not in conf


def test_tcp_only_gives_every_caller_the_services_ports(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, unix_sockets=False, service_port_offset=100)
    components = {c.name: c for c in launcher.plan(config)}
    assert not any("--unix" in c.argv for c in components.values())
    port = registry.get("text").port + 100
    assert components["compose-post"].env["SOCIALBENCH_TEXT_URL"] == f"http://127.0.0.1:{port}"
    assert f"server 127.0.0.1:{registry.get('user').port + 100};" in (
        tmp_path / "nginx.conf").read_text()


def test_a_data_dir_too_deep_for_a_socket_address_puts_them_in_the_temp_dir(
        tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 90)
    config = StackConfig(data_dir=deep)
    paths = [config.service_socket(spec) for spec in registry.SERVICES]
    assert all(p is not None and len(p.encode()) < launcher.UNIX_PATH_MAX for p in paths)
    assert config.socket_dir != deep.resolve() / "sockets"
    assert config.socket_dir == StackConfig(data_dir=deep).socket_dir  # the same each time
    assert config.socket_dir != StackConfig(data_dir=tmp_path / "other").socket_dir


def test_a_config_written_before_counts_came_from_the_cpus_still_loads(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path)
    assert StackConfig.from_json(config.to_json()) == config
    old = json.loads(config.to_json()) | {"default_workers": 1}
    assert StackConfig.from_json(json.dumps(old)).service_workers() == {
        s.name: 1 for s in registry.SERVICES}


def test_the_per_service_layout_gives_each_service_its_own_instances(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, store_layout="per-service", mongodb_port=30000,
                         redis_port=31000, memcached_port=32000, memcached_instances=2)
    components = launcher.plan(config)
    stores = {c.name: c for c in components if c.kind == "store"}
    instances = registry.store_instances(StoreLayout.PER_SERVICE)
    assert len(instances) == 11
    # One process per MongoDB and Redis instance, a pool of two per memcached instance.
    assert set(stores) == {
        *(i.name for i in instances if i.store is not Store.MEMCACHED),
        "user-memcached-1", "user-memcached-2",
        "post-storage-memcached-1", "post-storage-memcached-2"}
    ports = [c.port for c in stores.values()]
    assert len(set(ports)) == len(ports)
    # Each durable instance keeps its data in a directory of its own.
    data_dirs = {c.argv[c.argv.index("--dir") + 1] for c in stores.values() if "--dir" in c.argv}
    assert len(data_dirs) == 3
    services = {c.name: c for c in components if c.kind == "service"}
    for spec in registry.SERVICES:
        env = services[spec.name].env
        for store in Store:
            name = f"SOCIALBENCH_{STORE_SETTINGS[store].upper()}"
            if store not in spec.stores:
                assert name not in env, (spec.name, store)
                continue
            owner = spec.store_owner or spec.name
            own_ports = [c.port for n, c in stores.items() if n.startswith(f"{owner}-{store}")]
            assert sorted(int(a.rsplit(":", 1)[1].split("/")[0]) for a in env[name].split(",")
                          ) == sorted(own_ports), (spec.name, store)
    # user-mention resolves names in user's instances.
    assert (services["user-mention"].env["SOCIALBENCH_MONGODB_URL"]
            == services["user"].env["SOCIALBENCH_MONGODB_URL"])
    addresses = config.store_addresses()
    assert {addresses.mongodb_of(name) for name in ("post-storage", "social-graph",
                                                     "user-timeline")} == {
        services[name].env["SOCIALBENCH_MONGODB_URL"]
        for name in ("post-storage", "social-graph", "user-timeline")}
    assert addresses.redis_of("home-timeline") != addresses.redis_of("user-timeline")
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    record = LocalStack(tmp_path).record(config.url)
    assert record is not None and record.store_layout == "per-service"
    assert record.store_instances["user-mongodb"] == ["user-mention", "user"]
    assert set(launcher.store_dirs(config)) == {tmp_path / i.name for i in instances
                                                if i.store is not Store.MEMCACHED}


def test_a_redis_cluster_per_instance_on_consecutive_ports(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, redis_port=31000, redis_mode="cluster",
                         redis_cluster_masters=3, redis_replicas=1)
    components = launcher.plan(config)
    redis = [c for c in components if c.name.startswith("redis")]
    assert [(c.name, c.port) for c in redis] == [(f"redis-{n + 1}", 31000 + n) for n in range(6)]
    assert all("--cluster-enabled" in c.argv for c in redis)
    services = {c.name: c.env for c in components if c.kind == "service"}
    env = services["home-timeline"]
    assert env["SOCIALBENCH_REDIS_MODE"] == "cluster"
    assert env["SOCIALBENCH_REDIS_URL"] == ",".join(
        f"redis://127.0.0.1:{31000 + n}" for n in range(6))
    assert Settings(**{"redis_mode": "cluster",
                       "redis_url": env["SOCIALBENCH_REDIS_URL"]}).redis_mode == "cluster"
    assert "SOCIALBENCH_REDIS_MODE" not in services["post-storage"]  # uses no Redis
    assert config.store_addresses().redis_of("home-timeline") == env["SOCIALBENCH_REDIS_URL"]
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    record = LocalStack(tmp_path).record(config.url)
    assert record is not None and (record.redis_mode, record.redis_servers) == ("cluster", 6)


def test_replicated_redis_is_a_primary_and_its_replicas(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, redis_port=31000, redis_mode="replicated",
                         redis_replicas=2, store_layout="per-service")
    components = {c.name: c for c in launcher.plan(config)}
    primary, first, second = (components[f"home-timeline-redis-{n}"] for n in (1, 2, 3))
    assert "--replicaof" not in primary.argv
    for replica in (first, second):
        assert replica.argv[replica.argv.index("--replicaof") + 1:][:2] == [
            "127.0.0.1", str(primary.port)]
    env = components["home-timeline"].env
    assert env["SOCIALBENCH_REDIS_URL"] == f"redis://127.0.0.1:{primary.port}/0"
    assert env["SOCIALBENCH_REDIS_REPLICA_URLS"] == (
        f"redis://127.0.0.1:{first.port}/0,redis://127.0.0.1:{second.port}/0")
    Settings(redis_mode="replicated", redis_url=env["SOCIALBENCH_REDIS_URL"],
             redis_replica_urls=env["SOCIALBENCH_REDIS_REPLICA_URLS"])
    # Three Redis instances of three servers each, every port distinct.
    ports = [c.port for c in components.values() if c.kind == "store"]
    assert len(ports) == len(set(ports)) == 6 + 2 + 9


def test_the_clis_redis_modes_are_the_settings(tmp_path: Path) -> None:
    from typing import get_args

    from socialbench.cli.stack import RedisMode

    assert {mode.value for mode in RedisMode} == set(
        get_args(Settings.model_fields["redis_mode"].annotation))
