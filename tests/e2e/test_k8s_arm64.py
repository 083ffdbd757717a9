"""A mixed-arch cluster: the chart over two amd64 nodes and an arm64 one, then pinned to arm64.

`scripts/k8s-node.sh up --nodes 3 --client-node --arm64-node`: node 2's kubelet is built
for arm64 (scripts/build-k8s.sh --arm64-kubelet) and runs under QEMU, so the node says
kubernetes.io/arch=arm64; its containerd holds the arm64 variants of the images under
their own names (scripts/containers/arm64.sh builds them), as a multi-arch image
resolves on an arm64 node, and runs them under QEMU. Opt-in (SOCIALBENCH_TEST_K8S_ARM64=1):
emulated pods take about five times the CPU, so the rates are low and the waits long.
docs/deploy.md, "A mixed-arch cluster", has the times.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from socialbench.registry import StoreLayout
from socialbench.stack.servers import go_bin_dirs
from socialbench.workloads.driver.result import LoadResult
from tests.e2e.kube import RELEASE, Cluster, load, running_cluster

ARM64_ENV = "SOCIALBENCH_TEST_K8S_ARM64"
ARM64_NODE = "socialbench-node-2"
STACK_KINDS = {"service", "store", "gateway"}
# Every pod of the stack fits the one CPU of the arm64 node; a service under QEMU on a
# shared CPU took minutes to listen, longer than the liveness probe's default allows.
SMALL = ["serviceDefaults.resources.requests.cpu=20m", "gateway.resources.requests.cpu=20m",
         "seed.resources.requests.cpu=20m", "stores.mongodb.resources.requests.cpu=20m",
         "stores.redis.resources.requests.cpu=20m",
         "stores.memcached.resources.requests.cpu=20m",
         "serviceDefaults.livenessProbe.initialDelaySeconds=600"]
PIN = ["--set-string", "scheduling.nodeSelector.kubernetes\\.io/arch=arm64"]

pytestmark = [
    pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial,
    pytest.mark.skipif(os.environ.get(ARM64_ENV) != "1", reason=(
        f"an arm64 node under QEMU, about 21 minutes: {ARM64_ENV}=1 runs it")),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        pytest.skip("no QEMU for arm64 in binfmt_misc (scripts/containers/arm64.sh)")
    if shutil.which("kubelet", path=":".join(f"{d}/linux_arm64" for d in go_bin_dirs())) is None:
        pytest.skip("no kubelet built for arm64 (scripts/build-k8s.sh --arm64-kubelet)")
    yield from running_cluster("--nodes", "3", "--client-node", "--arm64-node")


def stack_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in cluster.pods(f"app.kubernetes.io/instance={RELEASE}")
            if p["metadata"]["labels"].get("app.kubernetes.io/component") in STACK_KINDS]


def machine(cluster: Cluster, pod: dict[str, Any]) -> str:
    """`uname -m` in the pod's first container."""
    return cluster.kubectl("exec", pod["metadata"]["name"], "--", "uname", "-m").strip()


def install(cluster: Cluster, *args: str) -> float:
    """helm install with ARGS, every pod Ready and the seed Job complete: its seconds."""
    started = time.monotonic()
    cluster.helm("install", RELEASE, "helm/socialnetwork", "-f",
                 cluster.env["SOCIALBENCH_K8S_VALUES"],
                 *[a for value in SMALL for a in ("--set", value)], *args)
    cluster.wait_rolled_out(timeout_s=900)
    ready_s = time.monotonic() - started
    cluster.kubectl("wait", "--for=condition=complete", "job", "-l",
                    "app.kubernetes.io/component=seed", "--timeout=1200s", timeout=1220)
    print(f"every pod Ready {ready_s:.0f} s after helm install {' '.join(args)}; seeded "
          f"after {time.monotonic() - started:.0f} s")
    return ready_s


def uninstall(cluster: Cluster) -> None:
    cluster.helm("uninstall", RELEASE, "--wait", "--timeout", "300s")
    cluster.kubectl("delete", "pvc", "-l", f"app.kubernetes.io/instance={RELEASE}",
                    "--timeout=120s", timeout=140)


def warmed_load(cluster: Cluster, warm_url: str, rate: float) -> LoadResult:
    """30 s of ``rate`` through the front end, measured and printed, after 20 s at half of
    it through ``warm_url``: the emulated pods' first requests are slow (cold code paths
    under QEMU)."""
    warm = load(warm_url, rate=rate / 2, duration_s=20)
    print(f"warm-up: {warm.errors.total} errors of {warm.completed}")
    result = load(cluster.front_end(), rate=rate, duration_s=30)
    print(f"{rate:g} req/s: {result.completed} answers, {result.errors.total} errors, "
          f"p50/p99 {result.latency.percentiles_us['50'] / 1000:.1f}/"
          f"{result.latency.percentiles_us['99'] / 1000:.0f} ms")
    return result


def test_the_arm64_node_says_arm64(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.json("get", "nodes")["items"]}
    arches = {name: (n["metadata"]["labels"]["kubernetes.io/arch"],
                     n["status"]["nodeInfo"]["architecture"]) for name, n in nodes.items()}
    print(f"nodes' arch (label, kubelet): {arches}")
    assert arches.pop(ARM64_NODE) == ("arm64", "arm64")
    assert set(arches.values()) == {("amd64", "amd64")}


def test_one_release_on_amd64_and_arm64_serves_and_checks(cluster: Cluster) -> None:
    install(cluster)
    try:
        pods = stack_pods(cluster)
        on_arm64 = [p for p in pods if p["spec"]["nodeName"] == ARM64_NODE]
        print(f"on {ARM64_NODE}: "
              f"{sorted(p['metadata']['labels']['app.kubernetes.io/name'] for p in on_arm64)}")
        assert on_arm64 and len(on_arm64) < len(pods)
        # The arm64 variant there, the amd64 image elsewhere, under the same name.
        for pod in pods:
            expected = "aarch64" if pod["spec"]["nodeName"] == ARM64_NODE else "x86_64"
            assert machine(cluster, pod) == expected, pod["metadata"]["name"]

        # A warm-up through the arm64 node's NodePort, then the measured load.
        result = warmed_load(cluster, cluster.front_end(cluster.node_ips[2]), rate=20)

        assert result.completed >= 550 and result.ok == result.completed, result.errors
        assert "Check passed" in cluster.check()
    finally:
        uninstall(cluster)


def test_pinned_to_arm64_the_whole_stack_runs_there(cluster: Cluster) -> None:
    install(cluster, "--set", "stores.layout=shared", *PIN)
    try:
        pods = stack_pods(cluster)
        assert {p["spec"]["nodeName"] for p in pods} == {ARM64_NODE}
        assert {machine(cluster, p) for p in pods} == {"aarch64"}

        result = warmed_load(cluster, cluster.front_end(), rate=10)

        assert result.completed >= 270 and result.ok == result.completed, result.errors
        assert "Check passed" in cluster.check(StoreLayout.SHARED)
    finally:
        uninstall(cluster)
