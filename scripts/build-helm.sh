#!/usr/bin/env bash
# Build helm v3.19.5 (for the chart checks of tests/deploy: `helm lint`, `helm template`).
#
# `go install` alone leaves helm's version and its default Kubernetes version (v1.20,
# which the chart's kubeVersion refuses) unset, so pass the ldflags helm's own
# Makefile sets. The binary goes to $GOBIN (default ~/go/bin); a present one is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
version=v3.19.5
k8s_minor=34  # helm 3.19 is built against k8s.io/client-go v0.34 (Kubernetes 1.34)
require_go "helm $version"
bin="$(gobin)/helm"
case "$(version_of "$bin" version --short)" in
  "$version"*) echo "helm $version already at $bin"; exit 0 ;;
esac
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
quietly "go install helm $version (a few minutes)" \
  env GOBIN="$(dirname "$bin")" bash -c "cd /tmp && go install -trimpath -ldflags '$ldflags' 'helm.sh/helm/v3/cmd/helm@$version'"
echo "helm $version at $bin"
