"""Per-pod CPU and memory from the kubelets' Summary API (workloads/probes/pods.py).

Against a fake API server in this process (a kubeconfig in tmp_path points the official
client at it) that answers what a real one did: ``pods.json`` and ``stats-summary.json``
are trimmed copies of a real one-node cluster's pod list and kubelet summary (kubelet
1.34, containerd 1.6; release ``sn`` of the chart: two home-timeline replicas, nginx,
redis and the finished seed Job's pod); ``node.json`` a trimmed copy of a node of
scripts/k8s-node.sh (its cpuset annotated).
"""

from __future__ import annotations

import copy
import http.server
import io
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from rich.console import Console
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.stack.launcher import CONFIG_FILE, StackConfig
from socialbench.stack.servers import free_port
from socialbench.workloads.probes.ceilings import DeclaredUnits
from socialbench.workloads.probes.pods import (
    NodeFacts,
    PodSampler,
    core_api,
    node_facts,
    parse_summary,
    pod_declared_units,
    pod_record,
    pod_records,
    pod_sampler_factory,
    stack_pods,
)
from socialbench.workloads.probes.records import PodResources
from socialbench.workloads.probes.resources import ComponentUsage, Reading
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.runs.ramp_run import release_pods
from tests.workloads.conftest import CapacityServer

HERE = Path(__file__).parent
REAL_PODS: list[dict[str, Any]] = json.loads((HERE / "pods.json").read_text())["items"]
REAL_SUMMARY: dict[str, Any] = json.loads((HERE / "stats-summary.json").read_text())
REAL_NODE: dict[str, Any] = json.loads((HERE / "node.json").read_text())
NODE = "socialbench-node"
NAMESPACE = "default"
RELEASE = "sn"
UIDS = {p["metadata"]["name"]: p["metadata"]["uid"] for p in REAL_PODS}
HOME_TIMELINES = sorted(name for name in UIDS if name.startswith("home-timeline-"))
NGINX = next(name for name in UIDS if name.startswith("nginx-"))
SEED = next(name for name in UIDS if name.startswith("seed-"))
STACK = {"home-timeline", "home-timeline-2", "nginx", "redis"}


def entry(summary: dict[str, Any], pod: str) -> dict[str, Any]:
    """The summary's entry of ``pod`` (by pod name)."""
    return next(p for p in summary["pods"] if p["podRef"]["name"] == pod)


def entry_pod(name: str) -> dict[str, Any]:
    """The real pod list's ``name``."""
    return next(p for p in REAL_PODS if p["metadata"]["name"] == name)


def summary_with(summary: dict[str, Any], cpu_s: dict[str, float] | None = None,
                 memory: dict[str, int] | None = None, gone: Collection[str] = (),
                 ) -> dict[str, Any]:
    """A copy of ``summary`` with pods' container CPU seconds and memory set, some gone."""
    changed = copy.deepcopy(summary)
    changed["pods"] = [p for p in changed["pods"] if p["podRef"]["name"] not in gone]
    for pod, seconds in (cpu_s or {}).items():
        entry(changed, pod)["containers"][0]["cpu"]["usageCoreNanoSeconds"] = int(seconds * 1e9)
    for pod, size in (memory or {}).items():
        entry(changed, pod)["containers"][0]["memory"]["workingSetBytes"] = size
    return changed


@dataclass
class FakeCluster:
    """What the fake API server answers, and the paths it was asked for."""

    pods: list[dict[str, Any]]
    summaries: dict[str, dict[str, Any]]  # node -> its kubelet's answer (replaced, not changed)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> Node object
    asked: list[str] = field(default_factory=list)


class FakeApi(http.server.BaseHTTPRequestHandler):
    """The paths the sampler and the records read: a namespace's pods (by label), a node's
    summary, a node."""

    def do_GET(self) -> None:
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        path = unquote(url.path)  # the client sends the proxied path as stats%2Fsummary
        cluster.asked.append(path)
        body: dict[str, Any] | None = None
        if pods := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path):
            label, _, value = parse_qs(url.query)["labelSelector"][0].partition("=")
            body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
                p for p in cluster.pods if p["metadata"]["namespace"] == pods[1]
                and p["metadata"]["labels"].get(label) == value]}
        elif node := re.fullmatch(r"/api/v1/nodes/([^/]+)/proxy/stats/summary", path):
            body = cluster.summaries.get(node[1])
        elif node := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
            body = cluster.nodes.get(node[1])
        data = json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig of one cluster at ``server`` (JSON is YAML)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))
    return path


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """The fake API server with the real pods and summary, KUBECONFIG pointing at it."""
    fake = FakeCluster(pods=copy.deepcopy(REAL_PODS), summaries={NODE: REAL_SUMMARY},
                       nodes={NODE: copy.deepcopy(REAL_NODE)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    server.cluster = fake  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig",
                                  f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield fake
    server.shutdown()
    server.server_close()


def sampler_of(cluster: FakeCluster, interval_s: float = 0.05) -> PodSampler:
    factory, _ = pod_sampler_factory(NAMESPACE, RELEASE, interval_s=interval_s)
    sampler, why = factory()
    assert isinstance(sampler, PodSampler), why
    return sampler


def wait_for_summaries(cluster: FakeCluster, count: int) -> None:
    """Until ``count`` more summaries were asked for (two: one asked wholly after now)."""
    def asked() -> int:
        return sum(path.endswith("/stats/summary") for path in cluster.asked)

    wanted, deadline = asked() + count, time.monotonic() + 10
    while asked() < wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asked() >= wanted, "the sampler stopped asking"


def measure(cluster: FakeCluster, sampler: PodSampler,
            during: list[dict[str, Any]]) -> dict[str, ComponentUsage]:
    """Each component's usage over a step in which the node's summary becomes each of
    ``during`` in turn, each sampled at least once."""
    with sampler:
        for summary in during:
            cluster.summaries[NODE] = summary
            wait_for_summaries(cluster, 2)
    return {u.name: u for u in sampler.usage}


def test_a_real_summary_gives_each_pods_containers_cpu_and_working_set() -> None:
    readings = parse_summary(REAL_SUMMARY)
    assert set(readings) == {UIDS[name] for name in UIDS if name != SEED}
    redis = entry(REAL_SUMMARY, "redis-0")
    (container,) = redis["containers"]
    assert readings[UIDS["redis-0"]] == Reading(
        cpu_seconds=container["cpu"]["usageCoreNanoSeconds"] / 1e9,
        memory_bytes=container["memory"]["workingSetBytes"], processes=0)
    # The containers' figures, fresh at each request, not the pod's, refreshed each 10-20 s.
    assert readings[UIDS["redis-0"]].cpu_seconds != redis["cpu"]["usageCoreNanoSeconds"] / 1e9
    # This kubelet reports no process counts; one that does gives them.
    counted = copy.deepcopy(REAL_SUMMARY)
    entry(counted, "redis-0")["process_stats"] = {"process_count": 3}
    assert parse_summary(counted)[UIDS["redis-0"]].processes == 3


def test_the_stacks_running_pods_are_its_components(cluster: FakeCluster) -> None:
    other_release = copy.deepcopy(entry_pod("redis-0"))
    other_release["metadata"].update(name="redis-0-other", uid="other-release")
    other_release["metadata"]["labels"]["app.kubernetes.io/instance"] = "other"
    driver = copy.deepcopy(entry_pod(NGINX))
    driver["metadata"].update(name="load-r1-0-abcde", uid="driver")
    driver["metadata"]["labels"].update({"app.kubernetes.io/name": "load-r1",
                                         "app.kubernetes.io/component": "load-driver"})
    leaving = copy.deepcopy(entry_pod(HOME_TIMELINES[0]))
    leaving["metadata"].update(name="home-timeline-0-leaving", uid="leaving",
                               deletionTimestamp="2026-12-04T05:50:00Z")
    cluster.pods += [other_release, driver, leaving]
    pods = stack_pods(core_api(), NAMESPACE, RELEASE)
    # Not the seed Job's finished pod, another release's, a load driver or a leaving pod.
    assert {name: p["metadata"]["name"] for name, p in pods.items()} == {
        "home-timeline": HOME_TIMELINES[0], "home-timeline-2": HOME_TIMELINES[1],
        "nginx": NGINX, "redis": "redis-0"}
    assert entry_pod(SEED)["status"]["phase"] == "Succeeded"


def test_replicas_are_named_by_pod_name_whatever_the_order_listed(
    cluster: FakeCluster,
) -> None:
    third = copy.deepcopy(entry_pod(HOME_TIMELINES[1]))
    third["metadata"].update(name="home-timeline-0aaaa", uid="third")
    cluster.pods = [third, *reversed(cluster.pods)]
    names = {name: p["metadata"]["name"]
             for name, p in stack_pods(core_api(), NAMESPACE, RELEASE).items()}
    assert [names[n] for n in ("home-timeline", "home-timeline-2", "home-timeline-3")] == [
        "home-timeline-0aaaa", *HOME_TIMELINES]


def test_the_sampler_measures_each_pod_over_the_step(cluster: FakeCluster) -> None:
    sampler = sampler_of(cluster)
    assert dict(sampler.components) == {"home-timeline": ("service", 0),
                                        "home-timeline-2": ("service", 0),
                                        "nginx": ("gateway", 0), "redis": ("store", 0)}
    start = parse_summary(REAL_SUMMARY)
    usage = measure(cluster, sampler, [
        summary_with(REAL_SUMMARY, memory={"redis-0": 900 << 20}),
        summary_with(REAL_SUMMARY, cpu_s={"redis-0": start[UIDS["redis-0"]].cpu_seconds + 2.5,
                                          NGINX: start[UIDS[NGINX]].cpu_seconds + 0.25},
                     memory={"redis-0": 40 << 20}),
    ])
    assert usage["redis"].cpu_seconds == pytest.approx(2.5)
    assert usage["nginx"].cpu_seconds == pytest.approx(0.25)
    assert usage["home-timeline"].cpu_seconds == 0
    assert usage["redis"].peak_rss_bytes == 900 << 20  # the peak, not the last sample
    home = entry(REAL_SUMMARY, HOME_TIMELINES[0])["containers"][0]["memory"]["workingSetBytes"]
    assert usage["home-timeline"].peak_rss_bytes == home
    assert {u.kind for u in usage.values()} == {"service", "store", "gateway"}
    assert sampler.total_cpu_seconds == pytest.approx(2.75)


def test_each_refresh_asks_each_node_once_not_each_pod(cluster: FakeCluster) -> None:
    for pod in cluster.pods:
        if pod["metadata"]["name"] in ("redis-0", NGINX):
            pod["spec"]["nodeName"] = "node-b"
    on_b = {"redis-0", NGINX}
    node_b = {**REAL_SUMMARY, "pods": [p for p in REAL_SUMMARY["pods"]
                                       if p["podRef"]["name"] in on_b]}
    cluster.summaries = {NODE: summary_with(REAL_SUMMARY, gone=on_b), "node-b": node_b}
    sampler = sampler_of(cluster)
    with sampler:
        wait_for_summaries(cluster, 4)
    summaries = Counter(path for path in cluster.asked if path.endswith("/stats/summary"))
    assert summaries.keys() == {f"/api/v1/nodes/{n}/proxy/stats/summary" for n in (NODE, "node-b")}
    (per_node,) = set(summaries.values())  # two pods on each node, yet one request each
    assert per_node >= 3  # the start, a sample or more, the end
    assert {u.name for u in sampler.usage if u.peak_rss_bytes} == STACK  # both nodes read


def test_a_pod_gone_mid_step_reads_as_nothing(cluster: FakeCluster) -> None:
    sampler = sampler_of(cluster)
    redis_cpu = parse_summary(REAL_SUMMARY)[UIDS["redis-0"]].cpu_seconds
    usage = measure(cluster, sampler, [
        summary_with(REAL_SUMMARY, cpu_s={"redis-0": redis_cpu + 1}),
        summary_with(REAL_SUMMARY, gone={"redis-0"}),
    ])
    assert usage["redis"].cpu_seconds == 0
    assert usage["redis"].processes == 0
    assert usage["redis"].peak_rss_bytes > 0  # what it held while it was there
    assert set(usage) == STACK


def test_a_pod_replaced_under_its_name_is_another_pod(cluster: FakeCluster) -> None:
    sampler = sampler_of(cluster)
    replaced = summary_with(REAL_SUMMARY, cpu_s={"redis-0": 0.5})
    entry(replaced, "redis-0")["podRef"]["uid"] = "a-new-redis-0"
    usage = measure(cluster, sampler, [replaced])
    assert usage["redis"].cpu_seconds == 0 and usage["redis"].peak_rss_bytes > 0


def test_the_factory_says_why_when_nothing_matches(cluster: FakeCluster) -> None:
    factory, source = pod_sampler_factory(NAMESPACE, "other")
    assert "release other in namespace default" in source
    assert factory() == (None, "no running pod of release 'other' in namespace 'default' "
                               "(app.kubernetes.io/instance=other)")
    factory, _ = pod_sampler_factory("elsewhere", RELEASE)
    sampler, why = factory()
    assert sampler is None and "namespace 'elsewhere'" in why


def test_the_factory_says_why_without_an_api_server(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig",
                                                          f"http://127.0.0.1:{free_port()}")))
    factory, _ = pod_sampler_factory(NAMESPACE, RELEASE)
    sampler, why = factory()
    assert sampler is None
    assert why.startswith("no figures from the Kubernetes API (listing the pods of namespace "
                          "'default': "), why
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    sampler, why = factory()
    assert sampler is None and "no usable kubeconfig" in why and "set KUBECONFIG" in why


def test_the_records_say_what_each_pod_had(cluster: FakeCluster) -> None:
    cluster.pods[0]["status"]["containerStatuses"][0]["restartCount"] = 2
    restarted = cluster.pods[0]["metadata"]["name"]
    records = {r.component: r for r in pod_records(NAMESPACE, RELEASE)}
    assert set(records) == STACK
    redis = records["redis"]
    assert (redis.name, redis.kind, redis.node) == ("redis-0", "store", NODE)
    # Its node's arch, allocatable CPUs and cpuset, as the node says.
    assert (redis.node_arch, redis.node_cpus, redis.node_cpuset) == (
        REAL_NODE["metadata"]["labels"]["kubernetes.io/arch"],
        float(REAL_NODE["status"]["allocatable"]["cpu"]),
        REAL_NODE["metadata"]["annotations"]["socialbench.io/cpus"])
    assert redis.image == entry_pod("redis-0")["spec"]["containers"][0]["image"]
    # The chart's redis asks 100m and 256Mi, and is limited to 2Gi, no CPU limit.
    assert redis.requests == PodResources(cpu=0.1, memory=256 << 20)
    assert redis.limits == PodResources(cpu=None, memory=2 << 30)
    assert {r.name: r.restarts for r in records.values()}[restarted] == 2
    assert records["nginx"].kind == "gateway"  # its init container is not counted
    assert records["nginx"].requests == PodResources(cpu=0.1, memory=64 << 20)


def test_the_records_say_each_pods_node_on_several_nodes(cluster: FakeCluster) -> None:
    """A client node on CPU 1 and an arm64 node: each record has its own node's facts; a
    node that cannot be read (gone) leaves them None, the record still made."""
    arm = copy.deepcopy(REAL_NODE)
    arm["metadata"].update(name="arm-node")
    arm["metadata"]["labels"]["kubernetes.io/arch"] = "arm64"
    arm["metadata"]["annotations"]["socialbench.io/cpus"] = "1"
    arm["status"]["allocatable"]["cpu"] = "1500m"
    cluster.nodes["arm-node"] = arm
    entry_pod_on = {"redis-0": "arm-node", NGINX: "gone-node"}
    for pod in cluster.pods:
        if pod["metadata"]["name"] in entry_pod_on:
            pod["spec"]["nodeName"] = entry_pod_on[pod["metadata"]["name"]]
    records = {r.component: r for r in pod_records(NAMESPACE, RELEASE)}
    assert (records["redis"].node, records["redis"].node_arch, records["redis"].node_cpus,
            records["redis"].node_cpuset) == ("arm-node", "arm64", 1.5, "1")
    assert (records["nginx"].node, records["nginx"].node_arch, records["nginx"].node_cpus,
            records["nginx"].node_cpuset) == ("gone-node", None, None, None)
    home = records["home-timeline"]
    assert (home.node, home.node_arch) == (NODE, "amd64")
    # Each node read once, not once per pod.
    assert sum(path == f"/api/v1/nodes/{NODE}" for path in cluster.asked) == 1


def test_a_node_without_the_label_or_annotation_says_what_its_kubelet_does() -> None:
    bare = copy.deepcopy(REAL_NODE)
    del bare["metadata"]["labels"]["kubernetes.io/arch"]
    del bare["metadata"]["annotations"]["socialbench.io/cpus"]
    del bare["status"]["allocatable"]
    facts = node_facts(bare)
    assert facts == NodeFacts(arch=bare["status"]["nodeInfo"]["architecture"],
                              cpus=float(bare["status"]["capacity"]["cpu"]), cpuset=None)


def test_a_pods_resources_add_over_its_containers() -> None:
    pod = copy.deepcopy(entry_pod("redis-0"))
    sidecar = {"name": "exporter", "image": "exporter:1",
               "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "1"}}}
    pod["spec"]["containers"].append(sidecar)
    record = pod_record("redis", pod)
    assert record.requests == PodResources(cpu=0.15, memory=256 << 20)
    # The sidecar sets no memory limit and redis no CPU limit: the pod is unlimited in both.
    assert record.limits == PodResources(cpu=None, memory=None)
    assert record.image.endswith(", exporter:1")


def test_a_ramp_bundle_has_every_pods_figures_and_records(
    cluster: FakeCluster, capacity_server: CapacityServer, tmp_path: Path,
) -> None:
    # The release forwarded to the local stack's port (kubectl port-forward svc/nginx 8080):
    # it is still not the local stack, whose configuration and stores are not the release's.
    local = tmp_path / "local-stack"
    local.mkdir()
    (local / CONFIG_FILE).write_text(StackConfig(
        data_dir=local, gateway_port=urlsplit(capacity_server.url).port or 0).to_json())
    result = CliRunner().invoke(app, [
        "ramp", capacity_server.url, "--data-dir", str(local),
        "--pods", RELEASE, "--namespace", NAMESPACE,
        "--workload", "url", "--start-rate", "50", "--step", "50", "--max-steps", "1",
        "--step-duration", "2s", "--warmup", "0.2s", "--pause", "0s", "--no-calibrate",
        "--settle-cores", "0", "--processes", "1", "--results-dir", str(tmp_path / "results"),
        "--quiet"])
    # Whether the one short step held the SLA is not the point here (a busy machine may
    # achieve a request less than 95% of it): its bundle is.
    assert result.exit_code in (0, 1) and "Bundle:" in result.output, result.output
    (directory,) = (tmp_path / "results").iterdir()
    bundle = read_bundle(directory)
    assert bundle.manifest.pods == pod_records(NAMESPACE, RELEASE)
    assert bundle.manifest.stack is None
    assert bundle.summary.check is None  # the local stores are not the release's
    assert bundle.manifest.resources_source == pod_sampler_factory(NAMESPACE, RELEASE)[1]
    (step,) = bundle.steps
    assert step.resources.available, step.resources.note
    assert {c.name for c in step.resources.components} == STACK
    header, *rows = (directory / "resources.csv").read_text().splitlines()
    component = header.split(",").index("component")
    assert {row.split(",")[component] for row in rows} == STACK


def test_release_pods_goes_on_without_an_api_server(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig",
                                                          f"http://127.0.0.1:{free_port()}")))
    out = io.StringIO()
    factory, source, records = release_pods(RELEASE, NAMESPACE, Console(file=out, width=200))
    assert records is None
    assert "the manifest will not record the pods" in out.getvalue()
    assert "release sn" in source and factory()[0] is None


def test_ramp_refuses_containers_and_pods_together() -> None:
    # A bad workload too: were both taken, the ramp would stop at it, not run.
    result = CliRunner().invoke(app, ["ramp", "http://127.0.0.1:9/", "--workload", "nope",
                                      "--containers", "compose", "--pods", RELEASE])
    assert result.exit_code == 2, result.output
    assert "not both" in result.output
    assert "--containers/--pods" in result.output


def test_a_pods_units_are_declared_by_its_command_and_image() -> None:
    service = {"spec": {"containers": [{"image": "socialbench:dev", "args": [
        "serve", "home-timeline", "--host", "0.0.0.0", "--port", "9009", "--workers", "3"]}]}}
    memcached = {"spec": {"containers": [{"image": "memcached:1.6", "command": ["memcached"],
                                          "args": ["-m", "1024", "-t", "8"]}]}}
    nginx = {"spec": {"containers": [{"image": "nginx:1.28.0-alpine"}]}}
    ferretdb = {"spec": {"containers": [{"image": "ferretdb", "command": ["ferretdb"],
                                         "env": [{"name": "GOMAXPROCS", "value": "4"}]}]}}

    assert pod_declared_units(service, 16.0) == DeclaredUnits(3, "process")
    assert pod_declared_units(memcached, 16.0) == DeclaredUnits(8, "worker thread")
    # nginx's worker_processes auto: one per CPU of its node.
    assert pod_declared_units(nginx, 16.0) == DeclaredUnits(16, "process")
    assert pod_declared_units(ferretdb, None) == DeclaredUnits(1, "go runtime", 4.0)
    assert pod_declared_units({"spec": {"containers": []}}, 2.0) is None
