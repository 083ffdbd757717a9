"""The chart on several nodes: the stack spread over them, replicas kept apart, pods that
leave a lost node, disruption budgets, the load Job on a node of its own (helm template)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.test_helm import ALL_ON, WORKLOADS, Render, by_kind, pod_spec, template

STACK_KINDS = {"service", "store", "gateway"}
LOST_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def component(workload: dict[str, Any]) -> str:
    return str(workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def stack_workloads(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [m for m in manifests if m["kind"] in WORKLOADS and component(m) in STACK_KINDS]
    assert len(found) == 23  # 11 services, nginx, the per-service layout's 11 stores
    return found


def lost_tolerations(spec: dict[str, Any]) -> dict[str, int | None]:
    return {t["key"]: t.get("tolerationSeconds") for t in spec.get("tolerations", [])
            if t.get("key") in LOST_TAINTS and t.get("effect") == "NoExecute"}


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_the_stacks_pods_spread_over_the_nodes_by_default(render: Render) -> None:
    manifests = render(*ALL_ON)
    workloads = stack_workloads(manifests)
    for workload in workloads:
        (spread,) = pod_spec(workload)["topologySpreadConstraints"]
        assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"],
                spread["nodeTaintsPolicy"]) == ("kubernetes.io/hostname", 1, "ScheduleAnyway",
                                                "Honor"), workload["metadata"]["name"]
        # One spread over the whole stack: every stack pod counts, no other pod does.
        for other in manifests:
            if other["kind"] in WORKLOADS:
                labels = other["spec"]["template"]["metadata"]["labels"]
                assert matches(spread["labelSelector"], labels) == (
                    component(other) in STACK_KINDS), other["metadata"]["name"]
    # The Jobs (seed, load, Locust) are not part of it: the load Job has its own.
    for job in by_kind(manifests, "Job").values():
        spreads = pod_spec(job).get("topologySpreadConstraints", [])
        assert all(not matches(s["labelSelector"], {"app.kubernetes.io/component": "store",
                                                    "app.kubernetes.io/instance": "sn",
                                                    "app.kubernetes.io/part-of": "socialnetwork"})
                   for s in spreads)
    assert not any("topologySpreadConstraints" in pod_spec(w)
                   for w in stack_workloads(render("--set", "scheduling.spread.maxSkew=0")))


def test_replicas_of_a_component_prefer_different_nodes(render: Render) -> None:
    for workload in stack_workloads(render()):
        (term,) = pod_spec(workload)["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        selector = term["podAffinityTerm"]["labelSelector"]
        assert selector == workload["spec"]["selector"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    required = by_kind(render("--set", "scheduling.replicaAntiAffinity=required"),
                       "Deployment")["home-timeline"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod_spec(required)["affinity"][
        "podAntiAffinity"]
    assert all("affinity" not in pod_spec(w) for w in stack_workloads(
        render("--set", "scheduling.replicaAntiAffinity=none")))
    # A component's own podAntiAffinity is its own: not replaced, not merged.
    own = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "labelSelector": {"matchLabels": {"x": "y"}}}]}}
    text = by_kind(render("--set-json", f"services.text.affinity={json.dumps(own)}"),
                   "Deployment")["text"]
    assert pod_spec(text)["affinity"] == own


def test_every_pod_leaves_a_lost_node_after_node_lost_seconds(render: Render) -> None:
    manifests = render(*ALL_ON)
    workloads = [m for m in manifests if m["kind"] in WORKLOADS]
    assert workloads
    for workload in workloads:
        assert lost_tolerations(pod_spec(workload)) == dict.fromkeys(LOST_TAINTS, 30), (
            workload["metadata"]["name"])
    for workload in (m for m in render("--set", "scheduling.nodeLostSeconds=90")
                     if m["kind"] in WORKLOADS):
        assert lost_tolerations(pod_spec(workload)) == dict.fromkeys(LOST_TAINTS, 90)
    # null: none of the chart's, so Kubernetes' admission gives its default (300 s).
    for workload in (m for m in render("--set", "scheduling.nodeLostSeconds=null")
                     if m["kind"] in WORKLOADS):
        assert lost_tolerations(pod_spec(workload)) == {}
    # A component that tolerates one of those taints itself keeps its own toleration.
    own = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 600}]
    text = by_kind(render("--set-json", f"services.text.tolerations={json.dumps(own)}"),
                   "Deployment")["text"]
    assert lost_tolerations(pod_spec(text)) == {"node.kubernetes.io/unreachable": 600,
                                                "node.kubernetes.io/not-ready": 30}


def test_each_component_of_the_stack_has_a_disruption_budget(render: Render) -> None:
    manifests = render()
    budgets = by_kind(manifests, "PodDisruptionBudget")
    workloads = stack_workloads(manifests)
    assert set(budgets) == {w["metadata"]["name"] for w in workloads}
    for workload in workloads:
        budget = budgets[workload["metadata"]["name"]]["spec"]
        assert budget == {"maxUnavailable": 1, "selector": workload["spec"]["selector"]}
    assert not by_kind(render("--set", "podDisruptionBudget.enabled=false"),
                       "PodDisruptionBudget")


def test_the_load_job_runs_where_load_node_selector_and_tolerations_say(render: Render) -> None:
    client = [{"key": "socialbench.io/role", "operator": "Equal", "value": "client",
               "effect": "NoSchedule"}]
    manifests = render("--set", "load.enabled=true",
                       "--set-string", "load.nodeSelector.socialbench\\.io/role=client",
                       "--set-json", f"load.tolerations={json.dumps(client)}")
    jobs = {name: pod_spec(job) for name, job in by_kind(manifests, "Job").items()
            if name.startswith("load-")}
    assert set(jobs) == {"load-run1", "load-run1-collector"}
    for spec in jobs.values():
        assert spec["nodeSelector"] == {"socialbench.io/role": "client"}
        assert spec["tolerations"][0] == client[0]
    # The stack does not tolerate the client node: it stays off it.
    for workload in stack_workloads(manifests):
        assert all(t.get("key") != "socialbench.io/role"
                   for t in pod_spec(workload).get("tolerations", []))


@pytest.mark.parametrize(("setting", "message"), [
    ("scheduling.nodeLostSeconds=soon", 'scheduling.nodeLostSeconds: "soon" is not a whole '
                                        "number of seconds"),
    ("scheduling.nodeLostSeconds=-5", 'scheduling.nodeLostSeconds: "-5" is not a whole'),
    ("scheduling.replicaAntiAffinity=always", 'scheduling.replicaAntiAffinity: "always" is '
                                              "not one of preferred, required, none"),
    ("scheduling.spread.whenUnsatisfiable=Never", 'scheduling.spread.whenUnsatisfiable: '
                                                  '"Never" is not ScheduleAnyway or DoNotSchedule'),
    ("podDisruptionBudget.maxUnavailable=0", "podDisruptionBudget.maxUnavailable must be 1 or "
                                             "more"),
])
def test_bad_scheduling_values_are_refused(helm: str, setting: str, message: str) -> None:
    out = template(helm, "--set", setting)
    assert out.returncode != 0 and message in out.stderr, out.stderr
