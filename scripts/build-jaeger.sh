#!/usr/bin/env bash
# Build Jaeger v1.76.0 (its v2 all-in-one binary, `socialbench up --tracing` and the
# tracing end-to-end test). The binary goes to $GOBIN (default ~/go/bin); a present
# one is reused.
#
# `go install .../cmd/jaeger@v1.76.0` is refused (Jaeger's go.mod has replace
# directives), so build it as a tool of a throwaway module.
set -euo pipefail
version=v1.76.0
gobin=$(go env GOBIN); gobin=${gobin:-$(go env GOPATH)/bin}
if [ -x "$gobin/jaeger" ] && [ -f "$gobin/.jaeger-version" ] \
    && [ "$(cat "$gobin/.jaeger-version")" = "$version" ]; then
  echo "jaeger $version already at $gobin/jaeger"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init socialbench-jaeger-build >/dev/null 2>&1
go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version"
mkdir -p "$gobin"
go build -trimpath -o "$gobin/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
echo "$version" > "$gobin/.jaeger-version"
echo "jaeger $version at $gobin/jaeger"
