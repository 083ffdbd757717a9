#!/usr/bin/env bash
# Build a one-machine Kubernetes with Go, into $GOBIN (default ~/go/bin):
#   control plane (scripts/k8s-check.sh): etcd, kube-apiserver, kube-controller-manager,
#     kube-scheduler;
#   node (scripts/k8s-node.sh): kubelet, kube-proxy, kubectl, and CoreDNS as the
#     cluster's DNS.
# Present binaries of the same versions are reused. Not part of setup.sh: the first
# control-plane build took 21 minutes on 2 busy cores with an empty module cache (etcd 3,
# kube-apiserver 14, kube-controller-manager 2.5, kube-scheduler 0.2, resolving 1); the
# node's binaries added 13 (kubelet, kube-proxy and kubectl 1 each, CoreDNS 9 with its
# module downloads), 35 minutes in all beside setup.sh. On a shared machine run it as
#   nice -n 19 env GOFLAGS='-buildvcs=false -p=1' scripts/build-k8s.sh
# The node also needs Debian's containerd, runc and containernetworking-plugins, which
# scripts/k8s-node.sh installs.
#
# --arm64-kubelet also cross-compiles the kubelet for linux/arm64 into
# $GOBIN/linux_arm64/kubelet, which `k8s-node.sh up --arm64-node` runs under QEMU: an
# amd64 kubelet puts kubernetes.io/arch back to amd64 at every node-status update, so
# only a kubelet built for arm64 makes a node that says arm64 (docs/deploy.md, "A
# mixed-arch cluster").
#
# `go install k8s.io/kubernetes/cmd/...@v` is refused (its go.mod replaces the staging
# modules k8s.io/api, k8s.io/client-go, ... with ./staging), and so is etcd's server
# (replaces with ../api, ...). So build them as tools of a throwaway module whose own
# replaces point every staging module at its published version (v1.X.Y -> v0.X.Y):
# kubernetes' go.mod requires them at v0.0.0, which the proxy does not have. etcd is
# the server version that kubernetes itself requires, so one module serves all four.
# CoreDNS has no replaces: `go install` builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
arm64_kubelet=false
case "${1:-}" in
  --arm64-kubelet) arm64_kubelet=true ;;
  "") ;;
  *) echo "usage: $0 [--arm64-kubelet]" >&2; exit 2 ;;
esac
. scripts/common.sh
kubernetes=v1.34.12
staging=v0.${kubernetes#v1.}
etcd=v3.6.4
coredns=v1.14.7
version="kubernetes $kubernetes etcd $etcd coredns $coredns"
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
require_go "Kubernetes $kubernetes"
dir="$(gobin)"
# Each binary built is recorded with its version in $dir/.k8s-built, so an interrupted
# build, or one from before the node was added, builds only what is missing.
record=$dir/.k8s-built
built() { [ -x "$dir/$1" ] && grep -qxF "$1 $2" "$record" 2>/dev/null; }
missing=()
for name in etcd "${commands[@]}"; do built "$name" "$kubernetes" || missing+=("$name"); done
built coredns "$coredns" || missing+=(coredns)
if $arm64_kubelet; then built linux_arm64/kubelet "$kubernetes" || missing+=(linux_arm64/kubelet); fi
if [ ${#missing[@]} = 0 ]; then
  echo "$version already in $dir"; exit 0
fi
echo "building ${missing[*]} ($version) into $dir"
staging_modules=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation
  endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
  kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir"
{
  echo "module socialbench-k8s-build"
  echo
  echo "go 1.25.0"
  echo
  echo "replace ("
  for module in "${staging_modules[@]}"; do echo "	k8s.io/$module => k8s.io/$module $staging"; done
  echo ")"
} > "$work/go.mod"
tools=("${commands[@]/#/k8s.io/kubernetes/cmd/}")
tools=("${tools[@]/%/@$kubernetes}" "go.etcd.io/etcd/server/v3@$etcd")
quietly "resolve kubernetes $kubernetes and etcd $etcd" bash -c "
  cd '$work' && go get -tool ${tools[*]}"
# What `kubectl version` and helm's .Capabilities.KubeVersion read (kubernetes'
# hack/lib/version.sh sets the same), instead of v0.0.0-master.
minor=${kubernetes#v1.}; minor=${minor%%.*}
stamp=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $package.gitVersion=$kubernetes -X $package.gitMajor=1 -X $package.gitMinor=$minor"
  stamp+=" -X $package.gitTreeState=clean"
done
build() {  # NAME PACKAGE [NOTE]
  local start=$SECONDS
  built "$1" "$kubernetes" && return
  quietly "go build $1${3:+ ($3)}" bash -c "
    cd '$work' && go build -trimpath -ldflags '-s -w$stamp' -o '$dir/$1' '$2'"
  echo "$1 $kubernetes" >>"$record"
  echo "    $1 built in $((SECONDS - start)) s"
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "about 15 minutes on 2 cores"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubelet k8s.io/kubernetes/cmd/kubelet
build kube-proxy k8s.io/kubernetes/cmd/kube-proxy
build kubectl k8s.io/kubernetes/cmd/kubectl
if $arm64_kubelet && ! built linux_arm64/kubelet "$kubernetes"; then
  mkdir -p "$dir/linux_arm64"
  GOARCH=arm64 CGO_ENABLED=0 build linux_arm64/kubelet k8s.io/kubernetes/cmd/kubelet \
    "for linux/arm64"
fi
if ! built coredns "$coredns"; then
  start=$SECONDS
  quietly "go install coredns $coredns" env GOBIN="$dir" \
    go install -trimpath -ldflags '-s -w' "github.com/coredns/coredns@$coredns"
  echo "coredns $coredns" >>"$record"
  echo "    coredns built in $((SECONDS - start)) s"
fi
echo "$version in $dir: etcd ${commands[*]} coredns"
