#!/usr/bin/env bash
# Build a small Kubernetes control plane for scripts/k8s-check.sh (the chart installed
# against a real API server): etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler, into $GOBIN (default ~/go/bin). Present binaries of the same
# versions are reused. Not part of setup.sh: the first build took 21 minutes on 2 busy
# cores with an empty module cache (etcd 3, kube-apiserver 14, kube-controller-manager
# 2.5, kube-scheduler 0.2, resolving 1). On a shared machine run it as
#   nice -n 19 env GOFLAGS='-buildvcs=false -p=1' scripts/build-k8s.sh
#
# `go install k8s.io/kubernetes/cmd/...@v` is refused (its go.mod replaces the staging
# modules k8s.io/api, k8s.io/client-go, ... with ./staging), and so is etcd's server
# (replaces with ../api, ...). So build them as tools of a throwaway module whose own
# replaces point every staging module at its published version (v1.X.Y -> v0.X.Y):
# kubernetes' go.mod requires them at v0.0.0, which the proxy does not have. etcd is
# the server version that kubernetes itself requires, so one module serves all four.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
kubernetes=v1.34.12
staging=v0.${kubernetes#v1.}
etcd=v3.6.4
version="kubernetes $kubernetes etcd $etcd"
commands=(kube-apiserver kube-controller-manager kube-scheduler)
require_go "Kubernetes $kubernetes"
dir="$(gobin)"
present() {
  local name
  for name in etcd "${commands[@]}"; do [ -x "$dir/$name" ] || return 1; done
  [ "$(cat "$dir/.k8s-version" 2>/dev/null)" = "$version" ]
}
if present; then
  echo "$version already in $dir"; exit 0
fi
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
  quietly "go build $1${3:+ ($3)}" bash -c "
    cd '$work' && go build -trimpath -ldflags '-s -w$stamp' -o '$dir/$1' '$2'"
  echo "    $1 built in $((SECONDS - start)) s"
}
rm -f "$dir/.k8s-version"
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "about 15 minutes on 2 cores"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
echo "$version" > "$dir/.k8s-version"
echo "$version in $dir: etcd ${commands[*]}"
