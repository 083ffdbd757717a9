#!/usr/bin/env bash
# Build Jaeger v1.76.0 (its v2 all-in-one binary, `socialbench up --tracing` and the
# tracing end-to-end test). The binary goes to $GOBIN (default ~/go/bin); a present
# one is reused.
#
# `go install .../cmd/jaeger@v1.76.0` is refused (Jaeger's go.mod has replace
# directives), so build it as a tool of a throwaway module.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
version=v1.76.0
require_go "Jaeger $version"
bin="$(gobin)/jaeger"
if [ -x "$bin" ] && [ "$(cat "$(dirname "$bin")/.jaeger-version" 2>/dev/null)" = "$version" ]; then
  echo "jaeger $version already at $bin"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$bin")"
quietly "go build jaeger $version (a few minutes)" bash -c "
  cd '$work' && go mod init socialbench-jaeger-build \
  && go get -tool 'github.com/jaegertracing/jaeger/cmd/jaeger@$version' \
  && go build -trimpath -o '$bin' github.com/jaegertracing/jaeger/cmd/jaeger"
echo "$version" > "$(dirname "$bin")/.jaeger-version"
echo "jaeger $version at $bin"
