#!/usr/bin/env bash
# The helm chart against a real control plane, without kubelets: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (scripts/build-k8s.sh) on free ports of
# 127.0.0.1, two Node objects (kubernetes.io/arch amd64 and arm64, Ready, 64 cpu,
# 256Gi, 110 pods) made through the API, a default StorageClass with 20 static local
# volumes on each (the stores claim volumes by default), then
#   sn-default: helm install with the default values
#   sn-arm64:   helm install with load and locust on and the whole stack pinned to arm64
# It checks that the API server holds every object of both releases and accepts each
# again under strict field validation (a server-side-apply dry run), waits until the
# controllers have made every pod of every Deployment/StatefulSet/Job and the scheduler
# has bound each, and that each pod's node satisfies its nodeSelector and required node
# affinity (sn-arm64: every pod on the arm64 node). Prints a summary; exits non-zero on
# any failure; stops everything and removes its temporary directory on exit
# (K8S_CHECK_KEEP=1 keeps the directory, with the components' logs).
#
# No kubelet runs, so no node ever reports again: the node lifecycle controller (it
# would mark both nodes NotReady and taint them) is off, and so is the admission plugin
# TaintNodesByCondition (it taints every new Node not-ready until that controller
# clears it). Pods are bound, never started.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bin=$(go env GOBIN 2>/dev/null || true); bin=${bin:-$(go env GOPATH 2>/dev/null || echo ~/go)/bin}
helm=${HELM:-$bin/helm}
python=.venv/bin/python
for tool in "$bin/etcd" "$bin/kube-apiserver" "$bin/kube-controller-manager" \
            "$bin/kube-scheduler" "$helm" "$python"; do
  if [ ! -x "$tool" ]; then
    echo "error: $tool is missing (scripts/build-k8s.sh, scripts/build-helm.sh, scripts/setup.sh)" >&2
    exit 2
  fi
done
command -v openssl >/dev/null || { echo "error: openssl is missing" >&2; exit 2; }

tmp=$(mktemp -d -t socialbench-k8s.XXXXXX)
pids=()
cleanup() {
  local status=$? pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" != 0 ] && [ -d "$tmp/logs" ]; then
    for log in "$tmp"/logs/*.log; do
      echo "--- the last lines of $(basename "$log")" >&2; tail -n 15 "$log" >&2
    done
  fi
  if [ "${K8S_CHECK_KEEP:-}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp/logs"
step() { echo "==> $* ($((SECONDS - started)) s)"; }

read -r etcd_port peer_port api_port kcm_port scheduler_port < <("$python" - <<'EOF'
import socket
sockets = [socket.socket() for _ in range(5)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))
EOF
)

step "certificates and keys in $tmp"
(
  cd "$tmp"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -keyout ca.key -out ca.crt \
    -subj /CN=socialbench-k8s-check-ca -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
  printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >san.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile san.ext -out apiserver.crt
  openssl genrsa -out sa.key 2048
  openssl rsa -in sa.key -pubout -out sa.pub
) >"$tmp/logs/openssl.log" 2>&1
token=$(openssl rand -hex 24)
echo "$token,admin,admin,system:masters" >"$tmp/tokens.csv"
api=https://127.0.0.1:$api_port
cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: check
    cluster: {server: "$api", certificate-authority: "$tmp/ca.crt"}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: check
    context: {cluster: check, user: admin}
current-context: check
EOF
export KUBECONFIG=$tmp/kubeconfig K8S_API=$api K8S_TOKEN=$token K8S_CA=$tmp/ca.crt

start() {  # NAME COMMAND...: run in the background, log in $tmp/logs/NAME.log
  local name=$1; shift
  "$@" >"$tmp/logs/$name.log" 2>&1 &
  pids+=($!)
}
wait_for() {  # WHAT SECONDS COMMAND...
  local what=$1 deadline=$((SECONDS + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "error: $what not up within $2 s" >&2; exit 1; fi
    sleep 1
  done
}
healthy() { curl -sf --cacert "$tmp/ca.crt" -H "Authorization: Bearer $token" "$api/$1"; }

step "etcd on 127.0.0.1:$etcd_port"
start etcd "$bin/etcd" --name check --data-dir "$tmp/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "check=http://127.0.0.1:$peer_port"
wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"

step "kube-apiserver on $api"
start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --secure-port "$api_port" --advertise-address 127.0.0.1 \
  --endpoint-reconciler-type none --cert-dir "$tmp/apiserver" \
  --tls-cert-file "$tmp/apiserver.crt" --tls-private-key-file "$tmp/apiserver.key" \
  --token-auth-file "$tmp/tokens.csv" --authorization-mode AlwaysAllow \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$tmp/sa.pub" --service-account-signing-key-file "$tmp/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --disable-admission-plugins TaintNodesByCondition
wait_for kube-apiserver 180 healthy readyz

step "kube-controller-manager and kube-scheduler"
start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$tmp/kubeconfig" \
  --authentication-kubeconfig "$tmp/kubeconfig" --authorization-kubeconfig "$tmp/kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$tmp/kcm" --leader-elect=false \
  --controllers '*,-node-lifecycle-controller' \
  --service-account-private-key-file "$tmp/sa.key" --root-ca-file "$tmp/ca.crt"
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$tmp/kubeconfig" \
  --authentication-kubeconfig "$tmp/kubeconfig" --authorization-kubeconfig "$tmp/kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$scheduler_port" --cert-dir "$tmp/scheduler" \
  --leader-elect=false
wait_for kube-controller-manager 120 curl -skf "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler 120 curl -skf "https://127.0.0.1:$scheduler_port/healthz"

cat >"$tmp/cluster.py" <<'EOF'
"""Nodes in, and the releases checked against, the API server of scripts/k8s-check.sh."""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import yaml

API, TOKEN = os.environ["K8S_API"], os.environ["K8S_TOKEN"]
TLS = ssl.create_default_context(cafile=os.environ["K8S_CA"])
ARCHES = ("amd64", "arm64")
WORKLOADS = ("Deployment", "StatefulSet", "Job")
MERGE_PATCH, APPLY = "application/merge-patch+json", "application/apply-patch+yaml"
# Server-side apply of the chart's object as it stands, not stored (dryRun), refused on any
# field the API does not know or given twice (Strict): what helm's create would only warn of.
STRICT_APPLY = "?dryRun=All&fieldValidation=Strict&fieldManager=k8s-check&force=true"
failures: list[str] = []


class Refused(Exception):
    """The API server answered with an error."""


def call(method: str, path: str, body: Any = None, kind: str = "application/json") -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": kind, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, context=TLS, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404 and method == "GET":
            return None
        raise Refused(f"{method} {path}: {error.code} {error.read().decode()}") from None


def make_nodes() -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    for arch in ARCHES:
        name = f"node-{arch}"
        labels = {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux",
                  "kubernetes.io/hostname": name}
        call("POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": labels}})
        call("PATCH", f"/api/v1/nodes/{name}/status", kind=MERGE_PATCH, body={"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "made by scripts/k8s-check.sh",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"architecture": arch, "operatingSystem": "linux"}}})
        print(f"    Node {name}: kubernetes.io/arch={arch}, Ready, cpu/memory/pods {resources}")


def make_volumes(per_node: int = 20) -> None:
    """A default StorageClass of static local volumes, PER_NODE on each node: the stores'
    claims (persistence on by default) bind to them when their pods are scheduled."""
    call("POST", "/apis/storage.k8s.io/v1/storageclasses", {
        "metadata": {"name": "local",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"})
    for arch in ARCHES:
        node = f"node-{arch}"
        for i in range(per_node):
            call("POST", "/api/v1/persistentvolumes", {
                "metadata": {"name": f"{node}-pv-{i}"},
                "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local",
                         "local": {"path": f"/var/lib/volumes/pv-{i}"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                             "matchExpressions": [{"key": "kubernetes.io/hostname",
                                                   "operator": "In", "values": [node]}]}]}}}})
    print(f"    StorageClass local (default): {per_node} local volumes on each node")


def paths() -> dict[tuple[str, str], tuple[str, bool]]:
    """(apiVersion, kind) -> (the collection's path prefix, namespaced), from discovery."""
    found = {}
    versions = [("/api/v1", "v1")]
    for group in call("GET", "/apis")["groups"]:
        versions += [(f"/apis/{v['groupVersion']}", v["groupVersion"]) for v in group["versions"]]
    for prefix, group_version in versions:
        for resource in call("GET", prefix)["resources"]:
            if "/" not in resource["name"]:
                found[(group_version, resource["kind"])] = (
                    f"{prefix}/{{ns}}{resource['name']}", resource["namespaced"])
    return found


def path_of(index: dict[tuple[str, str], tuple[str, bool]], obj: dict[str, Any], ns: str) -> str:
    template, namespaced = index[(obj["apiVersion"], obj["kind"])]
    base = template.format(ns=f"namespaces/{ns}/" if namespaced else "")
    return f"{base}/{obj['metadata']['name']}"


def accepted(index: dict[tuple[str, str], tuple[str, bool]], ns: str,
             manifest: list[dict[str, Any]]) -> None:
    kinds: Counter[str] = Counter()
    for obj in manifest:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        path = path_of(index, obj, ns)
        if call("GET", path) is None:
            failures.append(f"{ns}: {name} not in the API server")
            continue
        try:
            call("PATCH", path + STRICT_APPLY, obj, kind=APPLY)
        except Refused as refused:
            failures.append(f"{ns}: {name} refused by a strict apply: {refused}")
            continue
        kinds[obj["kind"]] += 1
    print(f"    {ns}: {sum(kinds.values())} of {len(manifest)} objects held and valid (strict): "
          + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))


def expected_pods(workload: dict[str, Any]) -> int:
    spec = workload["spec"]
    if workload["kind"] == "Job":
        parallelism = int(spec.get("parallelism", 1))
        return min(parallelism, int(spec.get("completions", parallelism)))
    return int(spec.get("replicas", 1))


def pods_of(index: Any, ns: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
    live = call("GET", path_of(index, workload, ns))
    selector = ",".join(f"{k}={v}" for k, v in live["spec"]["selector"]["matchLabels"].items())
    query = urllib.parse.urlencode({"labelSelector": selector})
    return list(call("GET", f"/api/v1/namespaces/{ns}/pods?{query}")["items"])


def wait_bound(index: Any, ns: str, workloads: list[dict[str, Any]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        missing = []
        for workload in workloads:
            pods = pods_of(index, ns, workload)
            bound = [p for p in pods if p["spec"].get("nodeName")]
            if len(bound) < expected_pods(workload):
                missing.append(f"{workload['kind']}/{workload['metadata']['name']}: "
                               f"{len(bound)} of {expected_pods(workload)} pods bound")
        if not missing:
            return
        if time.monotonic() > deadline:
            failures.extend(f"{ns}: {m}" for m in missing)
            for event in call("GET", f"/api/v1/namespaces/{ns}/events")["items"]:
                if event["type"] == "Warning":
                    print(f"    {ns} warning: {event['involvedObject']['name']}: "
                          f"{event['reason']}: {event['message']}")
            return
        time.sleep(1)


def matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for expression in term.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(operator)
        if not ok:  # None: Gt/Lt, not used by the chart
            return False
    return True


def placed(ns: str, pod: dict[str, Any], nodes: dict[str, dict[str, str]],
           allowed: set[str]) -> None:
    spec, name = pod["spec"], pod["metadata"]["name"]
    labels = nodes[spec["nodeName"]]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        failures.append(f"{ns}: pod {name} on {spec['nodeName']} against its nodeSelector")
    required = (spec.get("affinity", {}).get("nodeAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required and not any(matches(t, labels) for t in required["nodeSelectorTerms"]):
        failures.append(f"{ns}: pod {name} on {spec['nodeName']} against its node affinity")
    if labels["kubernetes.io/arch"] not in allowed:
        failures.append(f"{ns}: pod {name} on {spec['nodeName']}, not on {sorted(allowed)}")


def check(releases: list[str]) -> None:
    index = paths()
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
             for n in call("GET", "/api/v1/nodes")["items"]}
    for release in releases:  # NAMESPACE=ARCH[,ARCH] MANIFEST-FILE
        ns_arches, manifest_file = release.split(":", 1)
        ns, arches = ns_arches.split("=")
        with open(manifest_file) as f:
            manifest = [d for d in yaml.safe_load_all(f) if d]
        accepted(index, ns, manifest)
        workloads = [m for m in manifest if m["kind"] in WORKLOADS]
        wait_bound(index, ns, workloads, float(os.environ.get("K8S_CHECK_WAIT", "180")))
        per_node: Counter[str] = Counter()
        pods = 0
        for workload in workloads:
            for pod in pods_of(index, ns, workload):
                if pod["spec"].get("nodeName"):
                    placed(ns, pod, nodes, set(arches.split(",")))
                    per_node[pod["spec"]["nodeName"]] += 1
                    pods += 1
        print(f"    {ns}: {len(workloads)} workloads, {pods} pods bound: "
              + ", ".join(f"{n} on {node}" for node, n in sorted(per_node.items())))
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    try:
        if sys.argv[1] == "nodes":
            make_nodes()
            make_volumes()
        else:
            check(sys.argv[2:])
    except Refused as refused:
        sys.exit(str(refused))
EOF

step "two nodes, a default StorageClass and its volumes"
"$python" "$tmp/cluster.py" nodes

arm64=(--set-string 'scheduling.nodeSelector.kubernetes\.io/arch=arm64'
       --set load.enabled=true --set locust.enabled=true)
step "helm install sn -n sn-default (default values)"
"$helm" install sn helm/socialnetwork --namespace sn-default --create-namespace
step "helm install sn -n sn-arm64 (${arm64[*]})"
"$helm" install sn helm/socialnetwork --namespace sn-arm64 --create-namespace "${arm64[@]}"
"$helm" get manifest sn --namespace sn-default >"$tmp/sn-default.yaml"
"$helm" get manifest sn --namespace sn-arm64 >"$tmp/sn-arm64.yaml"

step "objects held by the API server, pods bound by the scheduler"
"$python" "$tmp/cluster.py" check "sn-default=amd64,arm64:$tmp/sn-default.yaml" \
  "sn-arm64=arm64:$tmp/sn-arm64.yaml"
step "passed"
