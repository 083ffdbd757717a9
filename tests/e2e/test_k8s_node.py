"""The chart on a real one-node Kubernetes: installed, seeded, loaded, a pod killed, removed.

scripts/k8s-node.sh starts the node on this machine (kubelet, kube-proxy and CoreDNS
built with Go by scripts/build-k8s.sh: about 35 minutes the first time, not part of
set-up; Debian's containerd), the images of scripts/build-images.sh imported. Skipped
where the binaries are not built or the test does not run as root. About 5 minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from socialbench import registry
from socialbench.deploy import loadjob
from socialbench.deploy import stack_spec as stack
from socialbench.registry import Store, StoreLayout
from socialbench.stack.servers import go_bin_dirs
from socialbench.workloads.check.contents import CHECKED
from socialbench.workloads.driver import LoadConfig, run_load
from socialbench.workloads.driver.result import LoadResult

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = stack.REPO_ROOT
NODE_SCRIPT = ROOT / "scripts" / "k8s-node.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
            "kube-proxy", "kubectl", "coredns")
RELEASE = "sn"
# Set to 1 to also install the chart with stores.redis.mode=cluster (not in CI: time).
REDIS_CLUSTER_ENV = "SOCIALBENCH_TEST_K8S_REDIS_CLUSTER"
# The load Job's pods on top of the stack's requests (1.8 CPUs): a 2-CPU node fits them.
LOAD_JOB = ["load.enabled=true", "load.run=ci", "load.drivers=2", "load.rate=100",
            "load.duration=15s", "load.warmup=3s", "load.connections=16",
            "load.resources.requests.cpu=50m", "load.collector.resources.requests.cpu=50m"]


def _node_env() -> dict[str, str]:
    lines = subprocess.run(["bash", str(NODE_SCRIPT), "env"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    env = dict(os.environ)
    for line in lines:
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
    return env


class Cluster:
    """The running node: kubectl and helm against it, its front end's address."""

    def __init__(self) -> None:
        self.env = _node_env()
        self.node_ip = self.env["SOCIALBENCH_K8S_NODE_IP"]

    def run(self, *argv: str, timeout: float = 300) -> str:
        done = subprocess.run(list(argv), env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def kubectl(self, *args: str, timeout: float = 300) -> str:
        return self.run("kubectl", *args, timeout=timeout)

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def helm(self, *args: str) -> str:
        return self.run("helm", *args, timeout=600)

    def service_ip(self, name: str) -> str:
        return str(self.json("get", "service", name)["spec"]["clusterIP"])

    def front_end(self) -> str:
        port = self.json("get", "service", "nginx")["spec"]["ports"][0]["nodePort"]
        return f"http://{self.node_ip}:{port}"

    def wait_rolled_out(self) -> None:
        """Every Deployment and StatefulSet of the release has its pods Ready."""
        for kind in ("deployment", "statefulset"):
            for name in self.kubectl("get", kind, "-o", "name").split():
                self.kubectl("rollout", "status", name, "--timeout=300s", timeout=320)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return list(self.json("get", "pods", "-l", selector)["items"])

    def check(self, layout: StoreLayout = StoreLayout.PER_SERVICE) -> str:
        """`socialbench check` from the host, each checked service's instance by its
        Service's address."""
        urls = []
        for store, scheme, suffix in ((Store.MONGODB, "mongodb", ":27017"),
                                      (Store.REDIS, "redis", ":6379/0")):
            for name in CHECKED[store]:
                instance = registry.store_instance(registry.get(name), store, layout).name
                urls += [f"--{store}-url",
                         f"{name}={scheme}://{self.service_ip(instance)}{suffix}"]
        return self.run(str(ROOT / ".venv/bin/socialbench"), "check", *urls, timeout=300)


def _left_behind() -> list[str]:
    """What of the node is still there after `down`: processes, the veth, cgroups."""
    left = []
    if subprocess.run(["pgrep", "-f", "/run/socialbench-k8s/"], capture_output=True).stdout:
        left.append("processes")
    if Path("/sys/class/net/socialbench-k8s").exists():
        left.append("veth socialbench-k8s")
    left += [str(p) for p in Path("/sys/fs/cgroup").glob("*/socialbench-k8s")]
    return left


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    search = ":".join(go_bin_dirs())
    missing = [name for name in BINARIES if shutil.which(name, path=search) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built (scripts/build-k8s.sh, about 35 min)")
    if os.geteuid() != 0:
        pytest.skip("the node needs root (namespaces, cgroups, iptables)")
    build = subprocess.run([str(ROOT / "scripts/build-images.sh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stdout + build.stderr
    up = subprocess.run(["bash", str(NODE_SCRIPT), "up"], cwd=ROOT, capture_output=True,
                        text=True, timeout=900)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield Cluster()
    finally:
        down = subprocess.run(["bash", str(NODE_SCRIPT), "down"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not _left_behind(), _left_behind()


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Cluster:
    """The chart with the defaults (the per-service layout; Redis's persistence on), every
    pod Ready, seeded."""
    started = time.monotonic()
    cluster.helm("install", RELEASE, "helm/socialnetwork", "-f",
                 cluster.env["SOCIALBENCH_K8S_VALUES"],
                 "--set", "stores.redis.persistence.enabled=true")
    cluster.wait_rolled_out()
    ready_s = time.monotonic() - started
    cluster.kubectl("wait", "--for=condition=complete", "job",
                    "-l", "app.kubernetes.io/component=seed", "--timeout=400s", timeout=420)
    print(f"helm install to every pod Ready: {ready_s:.0f} s; seeded after "
          f"{time.monotonic() - started:.0f} s")
    return cluster


def _load(url: str, rate: float, duration_s: float) -> LoadResult:
    return run_load(LoadConfig(url=url, rate=rate, duration_s=duration_s, warmup_s=2,
                               connections=32, processes=1, workload="mixed", seed=11))


def test_every_pod_ready_and_the_front_end_loaded_without_errors(installed: Cluster) -> None:
    pods = installed.pods(f"app.kubernetes.io/instance={RELEASE}")
    ready = {p["metadata"]["labels"]["app.kubernetes.io/name"] for p in pods
             if p["status"]["phase"] == "Running"
             and all(c["ready"] for c in p["status"]["containerStatuses"])}
    stores = {instance.name for instance in registry.store_instances(StoreLayout.PER_SERVICE)}
    assert len(stores) == 11
    assert ready == {spec.name for spec in registry.SERVICES} | {"nginx"} | stores, [
        p["metadata"]["name"] for p in pods]

    result = _load(installed.front_end(), rate=100, duration_s=15)

    assert result.completed >= 1400 and result.ok == result.completed, result.errors
    assert "Check passed" in installed.check()


def test_the_load_job_runs_two_drivers_and_merges_them(installed: Cluster,
                                                       tmp_path: Path) -> None:
    installed.helm("upgrade", RELEASE, "helm/socialnetwork", "--reuse-values",
                   *[arg for value in LOAD_JOB for arg in ("--set", value)])
    collector = f"http://{installed.service_ip('load-ci-collector')}:8000"

    bundle = loadjob.fetch(collector, tmp_path, wait_s=300)

    merged = LoadResult.model_validate_json((bundle / "result.json").read_bytes())
    parts = [LoadResult.model_validate_json(p.read_bytes())
             for p in sorted((bundle / "parts").iterdir())]
    assert len(parts) == 2 and json.loads((bundle / "manifest.json").read_text())["complete"]
    assert merged.latency.count == sum(p.latency.count for p in parts) >= 1400
    assert merged.ok == merged.completed and merged.config.rate == 100
    assert {p.host.hostname for p in parts} == set(merged.host.hostname.split(","))
    installed.helm("upgrade", RELEASE, "helm/socialnetwork", "--reuse-values",
                   "--set", "load.enabled=false")


def test_a_deleted_pod_is_replaced_under_load_and_no_post_is_lost(installed: Cluster) -> None:
    results: list[LoadResult] = []
    load = threading.Thread(target=lambda: results.append(
        _load(installed.front_end(), rate=100, duration_s=40)))
    load.start()
    time.sleep(12)
    (old,) = installed.pods("app.kubernetes.io/name=home-timeline")
    installed.kubectl("delete", "pod", old["metadata"]["name"], "--wait=false")
    load.join(120)
    (result,) = results

    (new,) = [p for p in installed.pods("app.kubernetes.io/name=home-timeline")
              if p["status"]["phase"] == "Running"]
    assert new["metadata"]["name"] != old["metadata"]["name"]
    # The old pod serves through its drain (drainSeconds) while the new one starts: errors,
    # if any, only around the replacement, none in the last 10 s, and the tail back.
    errors = [s.second for s in result.timeline if s.errors]
    assert len(errors) <= 8, errors
    last = result.timeline[-10:]
    assert sum(s.errors for s in last) == 0 and max(s.latency_p99_us for s in last) < 500_000
    assert result.completed >= 3800
    assert "Check passed" in installed.check()


def test_upgrade_keeps_the_secret_and_data_and_uninstall_leaves_nothing(
    installed: Cluster,
) -> None:
    secret = installed.json("get", "secret", f"{RELEASE}-login-secret")["data"]
    posts_before = installed.check().split("Checked ", 1)[1].split(" posts", 1)[0]

    installed.helm("upgrade", RELEASE, "helm/socialnetwork", "--reuse-values",
                   "--set", "services.user.replicas=1")
    installed.wait_rolled_out()

    assert installed.json("get", "secret", f"{RELEASE}-login-secret")["data"] == secret
    assert installed.check().split("Checked ", 1)[1].split(" posts", 1)[0] == posts_before
    installed.helm("uninstall", RELEASE, "--wait", "--timeout", "120s")
    deadline = time.monotonic() + 120
    while installed.kubectl("get", "pods", "-o", "name").strip():
        assert time.monotonic() < deadline, installed.kubectl("get", "pods")
        time.sleep(2)
    assert installed.kubectl("get", "deployment,statefulset,job", "-o", "name").strip() == ""


@pytest.mark.skipif(os.environ.get(REDIS_CLUSTER_ENV) != "1", reason=(
    f"another release on the node, about 1.5 minutes more: {REDIS_CLUSTER_ENV}=1 runs it"))
def test_a_redis_cluster_release_is_formed_seeded_loaded_and_checked(cluster: Cluster) -> None:
    """Once no other release runs (the tests above end with an uninstall): the shared
    layout, its Redis a cluster of 3 masters and a replica each, formed by its Job, seeded,
    loaded, checked."""
    assert not cluster.kubectl("get", "pods", "-o", "name").strip(), "a release still runs"
    started = time.monotonic()
    # helm install returns once the post-install Job has formed the cluster.
    cluster.helm("install", RELEASE, "helm/socialnetwork", "-f",
                 cluster.env["SOCIALBENCH_K8S_VALUES"], "--set", "stores.layout=shared",
                 "--set", "stores.redis.mode=cluster",
                 "--set", "stores.redis.resources.requests.cpu=20m",
                 "--set", "stores.redis.resources.requests.memory=64Mi",
                 "--set", "seed.graph=synthetic:200", "--set", "seed.postsPerUser=2",
                 "--wait-for-jobs", "--timeout", "480s")
    try:
        cluster.wait_rolled_out()
        cluster.kubectl("wait", "--for=condition=complete", "job",
                        "-l", "app.kubernetes.io/component=seed", "--timeout=400s", timeout=420)
        print(f"Redis Cluster release installed, formed and seeded in "
              f"{time.monotonic() - started:.0f} s")
        nodes = cluster.pods("app.kubernetes.io/name=redis")
        assert len(nodes) == 6
        result = run_load(LoadConfig(url=cluster.front_end(), rate=50, duration_s=10,
                                     warmup_s=2, connections=16, processes=1,
                                     workload="mixed", users=200, seed=13))
        assert result.errors.total == 0 and result.completed >= 450, result.errors
        seeds = ",".join(f"redis://{pod['status']['podIP']}:6379" for pod in nodes)
        checked = cluster.run(str(ROOT / ".venv/bin/socialbench"), "check", "--mongodb-url",
                              f"mongodb://{cluster.service_ip('mongodb')}:27017",
                              "--redis-url", seeds, timeout=300)
        assert "Check passed" in checked
        masters = [pod["metadata"]["name"] for pod in nodes
                   if "role:master" in cluster.kubectl("exec", pod["metadata"]["name"], "--",
                                                       "redis-cli", "info", "replication")]
        assert len(masters) == 3, masters
    finally:
        cluster.helm("uninstall", RELEASE, "--wait", "--timeout", "120s")
