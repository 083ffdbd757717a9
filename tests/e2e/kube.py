"""A cluster of scripts/k8s-node.sh for the end-to-end tests: start it, reach it, stop it.

Used by test_k8s_node.py (one node) and test_k8s_cluster.py (three nodes and a client).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from socialbench import registry
from socialbench.deploy import stack_spec as stack
from socialbench.registry import Store, StoreLayout
from socialbench.stack.servers import go_bin_dirs
from socialbench.workloads.check.contents import CHECKED
from socialbench.workloads.driver import LoadConfig, run_load
from socialbench.workloads.driver.result import LoadResult
from tests.e2e.replacement import QUIET_S, SETTLE_S, ReplacementWindow

ROOT = stack.REPO_ROOT
NODE_SCRIPT = ROOT / "scripts" / "k8s-node.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
            "kube-proxy", "kubectl", "coredns")
RELEASE = "sn"
NAME = "socialbench-k8s"
# The deleted pod: the load's rate, its least length (the deletion 12 s in), how long the
# replacement may take to be Ready, and the most the load may last (it is stopped 10 s
# after the replacement is Ready + 4 s).
DELETION_RATE = 100
MIN_LOAD_S = 40.0
REPLACED_WITHIN_S = 150.0
DELETION_LOAD_MAX_S = 12 + REPLACED_WITHIN_S + SETTLE_S + QUIET_S + 10


def _node_env() -> dict[str, str]:
    lines = subprocess.run(["bash", str(NODE_SCRIPT), "env"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    env = dict(os.environ)
    for line in lines:
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
    return env


class Cluster:
    """The running cluster: kubectl and helm against it, its front end's addresses."""

    def __init__(self) -> None:
        self.env = _node_env()
        self.node_ip = self.env["SOCIALBENCH_K8S_NODE_IP"]
        self.node_ips = self.env["SOCIALBENCH_K8S_NODE_IPS"].split()

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

    def node_script(self, *args: str, timeout: float = 600) -> str:
        return self.run("bash", str(NODE_SCRIPT), *args, timeout=timeout)

    def service_ip(self, name: str) -> str:
        return str(self.json("get", "service", name)["spec"]["clusterIP"])

    def front_end(self, node_ip: str | None = None) -> str:
        """nginx's NodePort on a node (default: node 0)."""
        port = self.json("get", "service", "nginx")["spec"]["ports"][0]["nodePort"]
        return f"http://{node_ip or self.node_ip}:{port}"

    def wait_rolled_out(self, timeout_s: int = 300) -> None:
        """Every Deployment and StatefulSet of the release has its pods Ready."""
        for kind in ("deployment", "statefulset"):
            for name in self.kubectl("get", kind, "-o", "name").split():
                self.kubectl("rollout", "status", name, f"--timeout={timeout_s}s",
                             timeout=timeout_s + 20)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return list(self.json("get", "pods", "-l", selector)["items"])

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["metadata"]["name"]: n for n in self.json("get", "nodes")["items"]}

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


def checked_posts(check_output: str) -> int:
    """The number of posts `socialbench check` read."""
    # "Checked 1,933 posts, …": thousands grouped by commas.
    return int(check_output.split("Checked ", 1)[1].split(" posts", 1)[0].replace(",", ""))


def load(url: str, rate: float, duration_s: float, seed: int = 11,
         stop: threading.Event | None = None) -> LoadResult:
    return run_load(LoadConfig(url=url, rate=rate, duration_s=duration_s, warmup_s=2,
                               connections=32, processes=1, workload="mixed", seed=seed),
                    stop=stop)


def post_ids(cluster: Cluster) -> set[int]:
    """Every post id post-storage's MongoDB holds (the per-service layout's instance)."""
    import pymongo

    url = f"mongodb://{cluster.service_ip('post-storage-mongodb')}:27017"
    with pymongo.MongoClient(url, serverSelectionTimeoutMS=30_000) as client:
        return {int(d["post_id"]) for d in client["post"]["post"].find({}, {"post_id": 1})}


def ready_since(pod: dict[str, Any]) -> float | None:
    """When ``pod`` became Ready (epoch seconds; the API's second, rounded up), or None."""
    for condition in pod["status"].get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            when = datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))
            return when.timestamp() + 1.0
    return None


@dataclass
class Deletion:
    """One pod of a Deployment deleted under load: the load's result and, in seconds after
    the load's start (its timeline's), the deletion, the replacement's Ready (the API's
    condition) and the deleted pod's end."""

    result: LoadResult
    old: dict[str, Any]
    new: dict[str, Any]
    deleted_s: float
    ready_s: float
    gone_s: float

    @property
    def window(self) -> ReplacementWindow:
        return ReplacementWindow(deleted_s=self.deleted_s, ready_s=self.ready_s)

    def errors_by_second(self) -> list[tuple[int, int]]:
        return [(s.second, s.errors) for s in self.result.timeline if s.errors]


def delete_under_load(cluster: Cluster, name: str, *, quiet_after_gone_s: float = 10.0
                      ) -> Deletion:
    """A pod of Deployment ``name`` deleted 12 s into DELETION_RATE req/s of the mixed
    load; the load goes on until 10 s past its replacement's Ready + 4 s
    (ReplacementWindow), at least MIN_LOAD_S, and ``quiet_after_gone_s`` past the deleted
    pod's end (its drain), then stops."""
    selector = f"app.kubernetes.io/name={name}"
    before = {p["metadata"]["name"]: p for p in cluster.pods(selector)}
    results: list[LoadResult] = []
    stop = threading.Event()
    driver = threading.Thread(target=lambda: results.append(load(
        cluster.front_end(), rate=DELETION_RATE, duration_s=DELETION_LOAD_MAX_S, stop=stop)))
    driver.start()
    time.sleep(12)
    old = sorted(before.values(), key=lambda p: p["metadata"]["name"])[0]
    deleted_at = time.time()
    cluster.kubectl("delete", "pod", old["metadata"]["name"], "--wait=false")
    new: dict[str, Any] | None = None
    seen_ready_at = gone_at = None
    while driver.is_alive() and (seen_ready_at is None or gone_at is None):
        pods = {p["metadata"]["name"]: p for p in cluster.pods(selector)}
        if seen_ready_at is None:
            for pod_name, pod in pods.items():
                if pod_name not in before and ready_since(pod):
                    new, seen_ready_at = pod, time.time()
        if gone_at is None and old["metadata"]["name"] not in pods:
            gone_at = time.time()
        assert time.time() - deleted_at < REPLACED_WITHIN_S, (
            f"no replacement Ready, or the deleted pod still there, {REPLACED_WITHIN_S:.0f} s "
            f"after the deletion:\n" + cluster.kubectl("get", "pods", "-o", "wide"))
        time.sleep(1)
    if seen_ready_at is not None and gone_at is not None:
        stop_at = max(seen_ready_at + SETTLE_S + QUIET_S + 2, gone_at + quiet_after_gone_s,
                      deleted_at + MIN_LOAD_S - 12)
        while driver.is_alive() and time.time() < stop_at:
            time.sleep(0.2)
    stop.set()
    driver.join(120)
    (result,) = results
    assert new is not None and seen_ready_at is not None and gone_at is not None, (
        "the load ended before the replacement was Ready and the deleted pod gone")
    ready_at = ready_since(new)
    assert ready_at is not None
    start = result.started_at.timestamp()
    return Deletion(result, old, new, deleted_at - start, ready_at - start, gone_at - start)


def deleted_pod_replaced_under_load(cluster: Cluster) -> None:
    """The only home-timeline pod deleted 12 s into 100 req/s of the mixed load: replaced,
    errors only from the deletion to the replacement Ready + 4 s, the load going on 10 s
    past that with none whatever the replacement took (replacement.ReplacementWindow), the
    tail back, the stores consistent and no post lost."""
    posts_before = post_ids(cluster)
    deletion = delete_under_load(cluster, "home-timeline")
    result, window = deletion.result, deletion.window
    running = [p["metadata"]["name"] for p in cluster.pods("app.kubernetes.io/name=home-timeline")
               if p["status"]["phase"] == "Running"]
    assert running == [deletion.new["metadata"]["name"]]

    # The old pod serves through its drain (drainSeconds, 10) while the new one starts; a
    # replacement slower to be Ready than the drain leaves its Service no pod between
    # the two (docs/deploy.md, "A deleted pod").
    timeline = [(s.second, s.errors) for s in result.timeline]
    print(f"home-timeline pod deleted under load at {window.deleted_s:.1f} s (on "
          f"{deletion.old['spec']['nodeName']}), its replacement on "
          f"{deletion.new['spec']['nodeName']} Ready {window.ready_s - window.deleted_s:.1f} s "
          f"later, the deleted pod gone {deletion.gone_s - window.deleted_s:.1f} s after; "
          f"errors allowed until {window.allowed_until_s:.1f} s, the load until "
          f"{timeline[-1][0]} s (at least {window.load_until_s:.1f}): "
          f"{result.errors.total} errors ({result.errors}) in seconds "
          f"{deletion.errors_by_second()}")
    problems = window.problems(timeline)
    assert not problems, problems
    last = [s for s in result.timeline if s.second in window.quiet_seconds(timeline)][-10:]
    print(f"p99 of each of the last 10 s: {[s.latency_p99_us // 1000 for s in last]} ms")
    # The tail back: at most one slow second (a host shared with other work, as CI's).
    slow = [(s.second, s.latency_p99_us // 1000) for s in last if s.latency_p99_us >= 500_000]
    assert len(slow) <= 1, slow
    assert result.completed >= 0.95 * DELETION_RATE * result.window_s, (
        result.completed, result.window_s)
    assert "Check passed" in cluster.check()
    assert not posts_before - post_ids(cluster)


def upgrade_keeps_the_secret_and_data_then_uninstall(cluster: Cluster) -> None:
    """An upgrade keeps the login secret and every post; uninstall removes every pod and
    workload and keeps the stores' claims (their data) until deleted by hand; nothing
    is left after that."""
    secret = cluster.json("get", "secret", f"{RELEASE}-login-secret")["data"]
    posts_before = checked_posts(cluster.check())

    cluster.helm("upgrade", RELEASE, "helm/socialnetwork", "--reuse-values",
                 "--set", "services.user.replicas=1")
    cluster.wait_rolled_out()

    assert cluster.json("get", "secret", f"{RELEASE}-login-secret")["data"] == secret
    assert checked_posts(cluster.check()) == posts_before
    claims = f"app.kubernetes.io/instance={RELEASE}"
    kept = cluster.kubectl("get", "pvc", "-l", claims, "-o", "name").split()
    cluster.helm("uninstall", RELEASE, "--wait", "--timeout", "120s")
    deadline = time.monotonic() + 120
    while cluster.kubectl("get", "pods", "-o", "name").strip():
        assert time.monotonic() < deadline, cluster.kubectl("get", "pods")
        time.sleep(2)
    assert cluster.kubectl("get", "deployment,statefulset,job", "-o", "name").strip() == ""
    # The stores' claims outlive the release (a reinstall finds its data); the defaults
    # claim for each MongoDB and Redis instance.
    assert len(kept) == 9, kept
    assert cluster.kubectl("get", "pvc", "-l", claims, "-o", "name").split() == kept
    cluster.kubectl("delete", "pvc", "-l", claims, "--wait", "--timeout=120s", timeout=140)
    assert cluster.kubectl("get", "pvc,configmap,secret,service", "-l", claims,
                           "-o", "name").strip() == ""


def left_behind() -> list[str]:
    """What of the cluster is still there after `down`: processes, veths, cgroups."""
    left = []
    if subprocess.run(["pgrep", "-f", f"/run/{NAME}/"], capture_output=True).stdout:
        left.append("processes")
    left += [f"veth {p.name}" for p in Path("/sys/class/net").iterdir()
             if p.name == NAME or p.name.startswith("sbk8s-")]
    left += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{NAME}")]
    return left


def skip_unless_buildable() -> None:
    search = ":".join(go_bin_dirs())
    missing = [name for name in BINARIES if shutil.which(name, path=search) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built (scripts/build-k8s.sh, about 35 min)")
    if os.geteuid() != 0:
        pytest.skip("the cluster needs root (namespaces, cgroups, iptables)")


def running_cluster(*up_args: str) -> Iterator[Cluster]:
    """The images built, `k8s-node.sh up UP_ARGS`, the cluster; `down` after, nothing left."""
    skip_unless_buildable()
    build = subprocess.run([str(ROOT / "scripts/build-images.sh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stdout + build.stderr
    started = time.monotonic()
    up = subprocess.run(["bash", str(NODE_SCRIPT), "up", *up_args], cwd=ROOT,
                        capture_output=True, text=True, timeout=1800)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"k8s-node.sh up {' '.join(up_args)}: {time.monotonic() - started:.0f} s")
        yield Cluster()
    finally:
        down = subprocess.run(["bash", str(NODE_SCRIPT), "down"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not left_behind(), left_behind()
