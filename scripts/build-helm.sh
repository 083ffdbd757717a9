#!/usr/bin/env bash
# Build helm v3.19.5 (for the chart checks of tests/deploy: `helm lint`, `helm template`).
#
# `go install` alone leaves helm's version and its default Kubernetes version (v1.20,
# which the chart's kubeVersion refuses) unset, so pass the ldflags helm's own
# Makefile sets. The binary goes to $GOBIN (default ~/go/bin); a present one is reused.
set -euo pipefail
version=v3.19.5
k8s_minor=34  # helm 3.19 is built against k8s.io/client-go v0.34 (Kubernetes 1.34)
gobin=$(go env GOBIN); gobin=${gobin:-$(go env GOPATH)/bin}
if [ -x "$gobin/helm" ] && "$gobin/helm" version --short 2>/dev/null | grep -q "^$version"; then
  echo "helm $version already at $gobin/helm"; exit 0
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
(cd /tmp && GOBIN="$gobin" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version")
"$gobin/helm" version --short
