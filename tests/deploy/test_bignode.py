"""The big node's values and compose override: the sizing's choices, rendered and resolved."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from socialbench import registry
from socialbench.deploy import bignode, compose, generate
from socialbench.deploy import stack_spec as stack
from socialbench.registry import Store, StoreLayout
from socialbench.runtime.redis_client import parse_redis_urls
from socialbench.runtime.settings import Settings
from socialbench.stack import sizing
from socialbench.stack.sizing import Reference, StackSize, size_stack
from socialbench.stack.up import UpOptions, stack_config
from tests.deploy.test_compose import SECRET, compose_env, docker_compose
from tests.deploy.test_helm import Render, by_kind, containers, env_of

VALUES = stack.CHART_DIR.parent / bignode.VALUES_FILE
OVERRIDE = stack.COMPOSE_DIR / bignode.COMPOSE_FILE


@pytest.fixture(scope="module")
def size() -> StackSize:
    return size_stack(bignode.BIG_NODE_CPUS)


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(VALUES.read_text())
    return data


def _cpu(quantity: str | int | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def test_the_values_carry_the_sizings_choices(size: StackSize, values: dict[str, Any]) -> None:
    # The sizing of 128 CPUs scales the layout: what the big node is for.
    assert size.store_layout is StoreLayout.PER_SERVICE and size.redis_clusters
    assert {name: own["workers"] for name, own in values["services"].items()} == size.workers
    assert values["gateway"]["workerProcesses"] == size.nginx_workers
    stores = values["stores"]
    assert stores["layout"] == size.store_layout.value
    assert stores["memcached"]["extraArgs"] == ["-t", str(size.memcached_threads)]
    assert stores["memcached"]["replicas"] == size.memcached_instances
    assert stores["mongodb"]["env"] == {"GOMAXPROCS": str(size.mongodb_procs)}
    clusters = {name: own["cluster"]["masters"] for name, own in stores["instances"].items()
                if own.get("mode") == "cluster"}
    assert clusters == size.redis_clusters
    load = values["load"]
    assert load["drivers"] * load["processes"] >= size.driver_processes
    assert load["drivers"] * load["connections"] >= size.driver_connections
    # The same choices as `up --cpus 128` starts (its configuration from the same sizing).
    config = stack_config(UpOptions(data_dir=Path("unused")), size, None)
    assert config.service_workers() == size.workers
    assert config.redis_cluster_instances == list(clusters)
    assert (config.memcached_threads, config.memcached_instances) == (
        size.memcached_threads, size.memcached_instances)
    assert config.nginx_workers == str(values["gateway"]["workerProcesses"])


def test_the_requests_add_up_to_the_node(size: StackSize) -> None:
    requests = bignode.cpu_requests(size)
    total = sum(request.total for request in requests.values())
    budget = size.cpus - bignode.NODE_RESERVED_CPUS
    pods = sum(request.pods for request in requests.values())
    assert budget - bignode.MIN_CPU * pods <= total <= budget
    assert all(request.cpu >= bignode.MIN_CPU for request in requests.values())
    # Following the reference: the busiest service asks for more than the quietest.
    reference = Reference.load()
    shares = {spec.name: sizing.largest_share(reference, spec.name) for spec in registry.SERVICES}
    busiest, quietest = max(shares, key=shares.__getitem__), min(shares, key=shares.__getitem__)
    assert requests[busiest].cpu > 3 * requests[quietest].cpu
    # A Redis Cluster's pods: its masters and their replicas, its share over the masters.
    for name, masters in size.redis_clusters.items():
        assert requests[name].pods == masters * (1 + bignode.REDIS_REPLICAS)


def test_the_chart_renders_the_big_node(render: Render, size: StackSize,
                                        values: dict[str, Any]) -> None:
    manifests = render("-f", str(VALUES))
    deployments, statefulsets = by_kind(manifests, "Deployment"), by_kind(manifests, "StatefulSet")
    for spec in registry.SERVICES:
        (container,) = containers(deployments[spec.name])
        assert container["args"][-2:] == ["--workers", str(size.workers[spec.name])]
    config = by_kind(manifests, "ConfigMap")["nginx-config"]["data"]["nginx.conf"]
    assert f"worker_processes {size.nginx_workers};" in config.splitlines()
    registry_file = yaml.safe_load((stack.CHART_DIR / "files" / "registry.yaml").read_text())
    cluster_args = " ".join(registry_file["redisModes"]["clusterArgs"])
    jobs = sorted(name for name in by_kind(manifests, "Job") if name.endswith("-cluster"))
    assert jobs == sorted(f"{name}-cluster" for name in size.redis_clusters)
    requested = 0.0
    for instance in registry.store_instances(size.store_layout):
        statefulset = statefulsets[instance.name]
        (container,) = containers(statefulset)
        args = " ".join(container["args"])
        masters = size.redis_clusters.get(instance.name)
        if instance.store is Store.REDIS:
            assert statefulset["spec"]["replicas"] == (masters * 2 if masters else 1)
            assert (cluster_args in args) == bool(masters)
        if instance.store is Store.MEMCACHED:
            assert container["args"][-2:] == ["-t", str(size.memcached_threads)]
        if instance.store is Store.MONGODB:
            assert env_of(container)["GOMAXPROCS"] == str(size.mongodb_procs)
    for spec in registry.SERVICES:
        env = env_of(containers(deployments[spec.name])[0])
        if Store.REDIS in spec.stores:
            name = registry.store_instance(spec, Store.REDIS, size.store_layout).name
            mode = "cluster" if name in size.redis_clusters else "standalone"
            assert env.get("SOCIALBENCH_REDIS_MODE", "standalone") == mode
            urls = parse_redis_urls(Settings(redis_mode=mode,
                                             redis_url=env["SOCIALBENCH_REDIS_URL"]).redis_url)
            assert len(urls) == (size.redis_clusters[name] * 2 if mode == "cluster" else 1)
    for kind in ("Deployment", "StatefulSet"):
        for workload in by_kind(manifests, kind).values():
            for container in workload["spec"]["template"]["spec"]["containers"]:
                requested += (_cpu(container["resources"]["requests"]["cpu"])
                              * workload["spec"]["replicas"])
    # The stack's pods ask for the node less what it keeps, as the file says.
    assert requested <= size.cpus - bignode.NODE_RESERVED_CPUS
    assert f"({requested:g} CPUs requested)" in VALUES.read_text()
    assert f"`socialbench up --plan --cpus {size.cpus}`" in VALUES.read_text()


def _resolved(override: Path, layout: StoreLayout) -> dict[str, Any]:
    base = stack.COMPOSE_DIR / compose.COMPOSE_FILES[layout]
    out = subprocess.run([docker_compose(), "-f", str(base), "-f", str(override), "config"],
                         env=compose_env(**{stack.SECRET_ENV: SECRET}), capture_output=True,
                         text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    resolved: dict[str, Any] = yaml.safe_load(out.stdout)
    return resolved


def _addresses(resolved: dict[str, Any]) -> dict[str, str]:
    return {name: service["networks"]["default"]["ipv4_address"]
            for name, service in resolved["services"].items()
            if (service.get("networks") or {}).get("default")}


def test_the_compose_override_resolves_over_the_layouts_file(size: StackSize) -> None:
    resolved = _resolved(OVERRIDE, size.store_layout)
    services = resolved["services"]
    for spec in registry.SERVICES:
        assert services[spec.name]["command"][-2:] == ["--workers", str(size.workers[spec.name])]
    nginx_mounts = services["nginx"]["volumes"]
    assert any(m.endswith(f"/{bignode.NGINX_FILE}:/etc/nginx/nginx.conf:ro")
               for m in nginx_mounts), nginx_mounts
    assert (stack.COMPOSE_DIR / bignode.NGINX_FILE).read_text() == bignode.render_nginx(size)
    addresses = _addresses(resolved)
    assert len(set(addresses.values())) == len(addresses)  # no two containers on one
    for instance in registry.store_instances(size.store_layout):
        service = services[instance.name]
        if instance.store is Store.MEMCACHED:
            assert service["command"][service["command"].index("-t") + 1] == str(
                size.memcached_threads)
        if instance.store is Store.MONGODB:
            assert service["environment"]["GOMAXPROCS"] == str(size.mongodb_procs)
    for name, masters in size.redis_clusters.items():
        nodes = [name, *(f"{name}-{n}" for n in range(1, masters * 2))]
        assert all("--cluster-enabled" in services[node]["command"] for node in nodes)
        assert len({v for s in nodes for v in services[s]["volumes"]}) == len(nodes)
        form = services[f"{name}-cluster"]
        assert form["command"] == ["deploy", "form-redis-cluster", "--replicas", "1",
                                   *(f"{node}:6379" for node in nodes)]
        for spec in registry.SERVICES:
            if Store.REDIS not in spec.stores:
                continue
            env = services[spec.name]["environment"]
            own = registry.store_instance(spec, Store.REDIS, size.store_layout).name
            if own != name:
                if own not in size.redis_clusters:
                    assert "SOCIALBENCH_REDIS_MODE" not in env
                continue
            assert env["SOCIALBENCH_REDIS_MODE"] == "cluster"
            assert env["SOCIALBENCH_REDIS_URL"].split(",") == [
                f"redis://{node}:6379/0" for node in nodes]
            assert services[spec.name]["depends_on"][f"{name}-cluster"] == {
                "condition": "service_completed_successfully"}
            # It finds every node by name, the base file's and the override's.
            assert set(nodes) <= set(services[spec.name]["extra_hosts"])
    driver = services["driver"]["command"]
    assert driver[driver.index("--processes") + 1] == str(size.driver_processes)
    assert driver[driver.index("--connections") + 1] == str(size.driver_connections)


def test_a_memcached_pool_becomes_more_containers(tmp_path: Path) -> None:
    size = size_stack(192)  # the sizing's first pool: two memcached processes an instance
    assert size.memcached_instances > 1
    override = tmp_path / "override.yml"
    override.write_text(bignode.render_compose(size))
    services = _resolved(override, size.store_layout)["services"]
    pool = [f"user-memcached{suffix}" for suffix in
            ["", *(f"-{n}" for n in range(1, size.memcached_instances))]]
    assert set(pool) <= set(services)
    for name in ("user", "user-mention"):
        env = services[name]["environment"]
        assert env[stack.STORE_BY_NAME["memcached"].env_name] == ",".join(
            f"{m}:11211" for m in pool)
        assert all(services[name]["depends_on"][m] == {"condition": "service_healthy"}
                   for m in pool)


def test_deploy_check_flags_the_big_node_stale_when_the_sizing_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert not generate.stale_files()
    reference = Reference.load()
    changed = reference.model_copy(update={"scaling": {
        workload: [(cores, rate * 1.5) for cores, rate in points]
        for workload, points in reference.scaling.items()}})
    monkeypatch.setattr(Reference, "load", classmethod(lambda cls, path=None: changed))
    stale = {path.relative_to(stack.REPO_ROOT).as_posix() for path in generate.stale_files()}
    assert {f"helm/{bignode.VALUES_FILE}", f"compose/{bignode.COMPOSE_FILE}"} <= stale
    assert all("big-node" in path for path in stale), stale


def test_helm_lint_passes_with_the_big_node(helm: str) -> None:
    out = subprocess.run([helm, "lint", "--strict", str(stack.CHART_DIR), "-f", str(VALUES),
                          "--kube-version", "1.30.0"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
