#!/usr/bin/env bash
# Build FerretDB v1.24.2 (the MongoDB-wire server used where no mongod is on PATH).
#
# A plain `go install .../cmd/ferretdb@v1.24.2` builds a binary that panics at start:
# the module ships an empty build/version/version.txt. So build from a copy of the
# module with that file filled in. The binary goes to $GOBIN (default ~/go/bin).
set -euo pipefail
version=v1.24.2
gobin=$(go env GOBIN); gobin=${gobin:-$(go env GOPATH)/bin}
if [ -x "$gobin/ferretdb" ] && "$gobin/ferretdb" --version 2>/dev/null | grep -q "$version"; then
  echo "ferretdb $version already at $gobin/ferretdb"; exit 0
fi
src=$(cd /tmp && go mod download -json "github.com/FerretDB/FerretDB@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
echo "$version" > "$work/build/version/version.txt"
(cd "$work" && go build -trimpath -o "$gobin/ferretdb" ./cmd/ferretdb)
"$gobin/ferretdb" --version | head -n 1
