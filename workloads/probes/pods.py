"""Where the CPU went in a Kubernetes release: CPU time and memory of every pod of its stack.

The chart's counterpart of the compose stack's container sampler: a :class:`PodSampler`
is a :class:`ResourceSampler` (the same interface, so the ramp bundle gets the same
``resources.csv`` columns and the same plots) that reads each pod's figures from the
kubelet's Summary API (``/api/v1/nodes/NODE/proxy/stats/summary`` through the API
server, one request per node that runs a measured pod) with the official client,
configured from ``KUBECONFIG`` (else ``~/.kube/config``, else the service account of the
pod it runs in). CPU is the CPU time of the pod's containers (``usageCoreNanoSeconds``,
cumulative); memory their working set (what ``kubectl top`` shows), sampled each second;
processes the pod's ``process_stats.process_count``, 0 where the kubelet does not report
it. A container restarted within a step starts its CPU time again, so that step counts
the pod's CPU as nothing, as a process that vanished (the manifest records restarts).
The manifest's record of each pod names its node with the node's architecture, allocatable
CPUs and, where scripts/k8s-node.sh gave the node a cpuset, its CPUs (each node read once).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils import parse_quantity
from urllib3.exceptions import HTTPError
from yaml import YAMLError

from socialbench.errors import SocialbenchError
from socialbench.workloads.probes.ceilings import DeclaredUnits, declared_units
from socialbench.workloads.probes.records import PodRecord, PodResources
from socialbench.workloads.probes.resources import (
    NOTHING,
    Reading,
    ReadingSampler,
    ResourceSampler,
    SamplerFactory,
)

INSTANCE_LABEL = "app.kubernetes.io/instance"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
ARCH_LABEL = "kubernetes.io/arch"
# The CPUs of a node's cgroup, where scripts/k8s-node.sh gave it a cpuset of its own.
CPUS_ANNOTATION = "socialbench.io/cpus"
# The chart labels the stack's pods with the kinds the local stack gives its parts. Its
# other pods (the seed Job, load drivers and collector, Locust) fill or drive the stack:
# they are left out, or their CPU would count as the stack's.
STACK_KINDS = frozenset({"service", "store", "gateway"})
REQUEST_TIMEOUT_S = 10.0

SOURCE = (
    "kubelet Summary API (/api/v1/nodes/NODE/proxy/stats/summary through the API server "
    "of KUBECONFIG): CPU seconds (the CPU time of the pod's containers, "
    "usageCoreNanoSeconds), peak memory (their working set, as kubectl top; sampled each "
    "second) and processes (process_stats.process_count, 0 where not reported) of each "
    "running pod of release {release} in namespace {namespace}"
)


class PodError(SocialbenchError, RuntimeError):
    """The API server could not be reached, or answered an error."""


@dataclass(frozen=True)
class PodRef:
    """Which pod a component is, and the node that runs it."""

    kind: str
    name: str
    uid: str
    node: str


def core_api() -> client.CoreV1Api:
    """The API of the cluster of KUBECONFIG (or ~/.kube/config), else the one we run in."""
    # The client reads KUBECONFIG once, at import; this reads it now.
    path = os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        return client.CoreV1Api(config.new_client_from_config(path, persist_config=False))
    except (ConfigException, OSError, ValueError, YAMLError) as kubeconfig_error:
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            raise PodError(f"no usable kubeconfig at {path} ({kubeconfig_error}) and not "
                           "in a pod; set KUBECONFIG") from None
        return client.CoreV1Api(client.ApiClient(configuration))


def _get_json(what: str, call: Callable[..., Any], *args: object,
              **kwargs: object) -> dict[str, Any]:
    """An API call's answer, as JSON."""
    try:
        # Raw: the client's own decoding of a proxied body is a Python repr, not JSON.
        response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
                        **kwargs)
        answer: dict[str, Any] = json.loads(response.data)
    except ApiException as exc:
        raise PodError(f"{what}: the API server answered {exc.status} {exc.reason}") from None
    except (HTTPError, OSError, ValueError) as exc:
        raise PodError(f"{what}: {exc}") from None
    return answer


def _labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return dict(pod.get("metadata", {}).get("labels") or {})


def _measured(pod: Mapping[str, Any]) -> bool:
    """Running and not being deleted (a finished Job's pod is Succeeded or Failed)."""
    return (pod.get("status", {}).get("phase") == "Running"
            and not pod.get("metadata", {}).get("deletionTimestamp")
            and _labels(pod).get(COMPONENT_LABEL) in STACK_KINDS)


def stack_pods(api: client.CoreV1Api, namespace: str, release: str) -> dict[str, dict[str, Any]]:
    """The running pods of ``release``'s stack by component name.

    A component is the pod's ``app.kubernetes.io/name``; its replicas, by pod name, give
    ``name``, ``name-2``, ``name-3``, ….
    """
    listed = _get_json(f"listing the pods of namespace {namespace!r}", api.list_namespaced_pod,
                       namespace, label_selector=f"{INSTANCE_LABEL}={release}")
    pods = [pod for pod in listed.get("items") or [] if _measured(pod)]
    found: dict[str, dict[str, Any]] = {}
    seen: Counter[str] = Counter()
    for pod in sorted(pods, key=lambda p: (_labels(p).get(NAME_LABEL, ""),
                                           p["metadata"]["name"])):
        component = _labels(pod).get(NAME_LABEL) or pod["metadata"]["name"]
        seen[component] += 1
        found[component if seen[component] == 1 else f"{component}-{seen[component]}"] = pod
    return found


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    metadata = pod["metadata"]
    return PodRef(kind=_labels(pod)[COMPONENT_LABEL], name=metadata["name"],
                  uid=metadata["uid"], node=pod.get("spec", {}).get("nodeName", ""))


def pod_reading(pod: Mapping[str, Any]) -> Reading:
    """A pod's reading from its entry in a kubelet's ``/stats/summary``."""
    # Its containers' figures, not the pod's own: the kubelet reads a container's from the
    # runtime when asked but refreshes the pod's every 10-20 s (measured: kubelet 1.34,
    # containerd 1.6), too seldom for a step's CPU or the settle wait's half second.
    containers = pod.get("containers") or []
    cpu_ns = sum((c.get("cpu") or {}).get("usageCoreNanoSeconds") or 0 for c in containers)
    memory = sum((c.get("memory") or {}).get("workingSetBytes") or 0 for c in containers)
    processes = (pod.get("process_stats") or {}).get("process_count") or 0
    return Reading(cpu_seconds=cpu_ns / 1e9, memory_bytes=int(memory), processes=int(processes))


def parse_summary(raw: Mapping[str, Any]) -> dict[str, Reading]:
    """Each pod's reading from a kubelet's ``/stats/summary`` answer, by pod uid."""
    pods = raw.get("pods") or []
    return {pod["podRef"]["uid"]: pod_reading(pod) for pod in pods if pod.get("podRef")}


def node_summary(api: client.CoreV1Api, node: str) -> dict[str, Any]:
    """The kubelet's ``/stats/summary`` of ``node``, through the API server."""
    return _get_json(f"the stats summary of node {node!r}",
                     api.connect_get_node_proxy_with_path, node, "stats/summary")


def pod_declared_units(pod: Mapping[str, Any], node_cpus: float | None) -> DeclaredUnits | None:
    """The units a pod's first container declares by its command, arguments and
    environment (nginx's ``auto`` workers: one per CPU of its node)."""
    containers = pod.get("spec", {}).get("containers") or []
    if not containers:
        return None
    main = containers[0]
    argv = [*(main.get("command") or []), *(main.get("args") or [])]
    env = {e["name"]: str(e.get("value", "")) for e in main.get("env") or [] if "name" in e}
    if not argv:  # the image's own entrypoint: named by the image
        argv = [main.get("image", "").rsplit("/", 1)[-1].split(":", 1)[0]]
    return declared_units(argv, env, max(1, round(node_cpus or 1)))


class PodSampler(ReadingSampler):
    """Measure pods over one interval (use as a context manager)."""

    def __init__(self, api: client.CoreV1Api, pods: Mapping[str, PodRef],
                 interval_s: float = 1.0,
                 declared: Mapping[str, DeclaredUnits] | None = None) -> None:
        """``pods``: component name -> the pod that is it; ``declared``: the units each
        pod's command declares."""
        super().__init__({name: pod.kind for name, pod in pods.items()}, interval_s, declared)
        self.api = api
        self.pods = dict(pods)
        self.nodes = sorted({pod.node for pod in pods.values()})

    def _read_node(self, node: str) -> dict[str, Reading]:
        try:
            return parse_summary(node_summary(self.api, node))
        except PodError:
            return {}  # its pods read as nothing this time, as a vanished process

    def _read(self) -> dict[str, Reading]:
        by_uid: dict[str, Reading] = {}
        for readings in self._pool.map(self._read_node, self.nodes):
            by_uid.update(readings)
        # By uid: a pod replaced under the same name (a StatefulSet's) is another pod.
        return {name: by_uid.get(pod.uid, NOTHING) for name, pod in self.pods.items()}


def _total(containers: list[Mapping[str, Any]], field: str, resource: str) -> Decimal | None:
    """``resource`` of ``field`` (requests or limits) over a pod's containers.

    A container without a limit leaves the pod unlimited; without a request, it asks none.
    """
    amounts = [((c.get("resources") or {}).get(field) or {}).get(resource) for c in containers]
    given = [parse_quantity(a) for a in amounts if a is not None]
    if not given or (field == "limits" and len(given) < len(amounts)):
        return None
    return sum(given, Decimal(0))


def _resources(containers: list[Mapping[str, Any]], field: str) -> PodResources:
    cpu, memory = (_total(containers, field, r) for r in ("cpu", "memory"))
    return PodResources(cpu=None if cpu is None else float(cpu),
                        memory=None if memory is None else int(memory))


@dataclass(frozen=True)
class NodeFacts:
    """What a pod's node is: its architecture, its CPUs and the cpuset it may use."""

    arch: str | None = None
    cpus: float | None = None
    cpuset: str | None = None


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """A Node object's architecture (its label kubernetes.io/arch, which the scheduler
    matches, else its kubelet's report), allocatable CPUs and annotated cpuset."""
    metadata, status = node.get("metadata") or {}, node.get("status") or {}
    arch = ((metadata.get("labels") or {}).get(ARCH_LABEL)
            or (status.get("nodeInfo") or {}).get("architecture"))
    cpu = (status.get("allocatable") or {}).get("cpu") or (status.get("capacity") or {}).get("cpu")
    return NodeFacts(arch=arch or None, cpus=None if cpu is None else float(parse_quantity(cpu)),
                     cpuset=(metadata.get("annotations") or {}).get(CPUS_ANNOTATION))


def read_nodes(api: client.CoreV1Api, names: Iterable[str]) -> dict[str, NodeFacts]:
    """Each named node's facts; a node that cannot be read (gone, or no right to) has none."""
    facts = {}
    for name in sorted(set(names) - {""}):
        try:
            facts[name] = node_facts(_get_json(f"node {name!r}", api.read_node, name))
        except PodError:
            facts[name] = NodeFacts()
    return facts


def pod_record(component: str, pod: Mapping[str, Any], node: NodeFacts = NodeFacts()) -> PodRecord:
    """What ``pod`` had: its node (and the node's arch and CPUs), images, requests, limits
    and restarts."""
    containers = pod.get("spec", {}).get("containers") or []
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ref = pod_ref(pod)
    return PodRecord(
        name=ref.name, component=component, kind=ref.kind, node=ref.node,
        node_arch=node.arch, node_cpus=node.cpus, node_cpuset=node.cpuset,
        image=", ".join(dict.fromkeys(c.get("image", "") for c in containers)),
        requests=_resources(containers, "requests"), limits=_resources(containers, "limits"),
        restarts=sum(s.get("restartCount", 0) for s in statuses),
    )


def pod_records(namespace: str, release: str) -> list[PodRecord]:
    """What each running pod of ``release``'s stack had, for the ramp's manifest."""
    api = core_api()
    pods = stack_pods(api, namespace, release)
    nodes = read_nodes(api, (pod_ref(pod).node for pod in pods.values()))
    return [pod_record(component, pod, nodes.get(pod_ref(pod).node, NodeFacts()))
            for component, pod in pods.items()]


def pod_sampler_factory(namespace: str, release: str,
                        interval_s: float = 1.0) -> tuple[SamplerFactory, str]:
    """Each ramp step's sampler of ``release``'s pods, and how it measures.

    The factory answers ``(None, why)`` when the API server or the pods are not there,
    so the ramp goes on without the figures and the bundle says why.
    """

    def factory() -> tuple[ResourceSampler | None, str]:
        try:
            api = core_api()
            pods = stack_pods(api, namespace, release)
        except PodError as exc:
            return None, f"no figures from the Kubernetes API ({exc})"
        if not pods:
            return None, (f"no running pod of release {release!r} in namespace "
                          f"{namespace!r} ({INSTANCE_LABEL}={release})")
        refs = {name: pod_ref(pod) for name, pod in pods.items()}
        nodes = read_nodes(api, (ref.node for ref in refs.values()))
        declared = {name: units for name, pod in pods.items()
                    if (units := pod_declared_units(
                        pod, nodes.get(refs[name].node, NodeFacts()).cpus)) is not None}
        return PodSampler(api, refs, interval_s, declared), ""

    return factory, SOURCE.format(release=release, namespace=namespace)
