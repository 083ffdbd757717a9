#!/usr/bin/env bash
# Build FerretDB v1.24.2 (the MongoDB-wire server used where no mongod is on PATH).
#
# A plain `go install .../cmd/ferretdb@v1.24.2` builds a binary that panics at start:
# the module ships an empty build/version/version.txt. So build from a copy of the
# module with that file filled in. The binary goes to $GOBIN (default ~/go/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
version=v1.24.2
require_go "FerretDB $version"
bin="$(gobin)/ferretdb"
case "$(version_of "$bin" --version)" in
  *"$version"*) echo "ferretdb $version already at $bin"; exit 0 ;;
esac
src=$(cd /tmp && go mod download -json "github.com/FerretDB/FerretDB@$version" 2>>"$SETUP_LOG" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
echo "$version" > "$work/build/version/version.txt"
quietly "go build ferretdb $version (about a minute)" \
  bash -c "cd '$work' && go build -trimpath -o '$bin' ./cmd/ferretdb"
echo "ferretdb $version at $bin"
