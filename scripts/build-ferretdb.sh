#!/usr/bin/env bash
# Build FerretDB v1.24.2 (the MongoDB-wire server used where no mongod is on PATH),
# with our patches of scripts/ferretdb/*.patch applied (see docs/ferretdb.md).
#
#   scripts/build-ferretdb.sh                      patched, into $GOBIN (default ~/go/bin)
#   scripts/build-ferretdb.sh --output PATH        patched, into PATH
#   scripts/build-ferretdb.sh --unpatched --output PATH   upstream as is (to compare)
#
# A plain `go install .../cmd/ferretdb@v1.24.2` builds a binary that panics at start:
# the module ships an empty build/version/version.txt. So build from a copy of the
# module with that file filled in. Beside the binary, PATH.socialbench records the
# version and the SHA-256 of the patches it was built with: the binary is rebuilt when
# either changes.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
. scripts/common.sh
version=v1.24.2
bin="" patched=1
while [ $# -gt 0 ]; do
  case "$1" in
    --output) bin=$2; shift 2 ;;
    --unpatched) patched=0; shift ;;
    *) echo "usage: $0 [--unpatched] [--output PATH]" >&2; exit 2 ;;
  esac
done
require_go "FerretDB $version"
bin=${bin:-"$(gobin)/ferretdb"}
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
patches=()
if [ "$patched" = 1 ]; then
  patches=(scripts/ferretdb/*.patch)
fi
if [ ${#patches[@]} -gt 0 ]; then
  stamp="$version patches $(cat "${patches[@]}" | sha256sum | cut -d' ' -f1)"
else
  stamp="$version unpatched"
fi
built=$(cat "$bin.socialbench" 2>/dev/null || true)
case "$(version_of "$bin" --version)" in
  *"$version"*)
    if [ "$built" = "$stamp" ]; then echo "ferretdb $version ($stamp) already at $bin"; exit 0; fi ;;
esac
src=$(cd /tmp && go mod download -json "github.com/FerretDB/FerretDB@$version" 2>>"$SETUP_LOG" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
echo "$version" > "$work/build/version/version.txt"
for p in "${patches[@]}"; do
  quietly "apply $p" patch -d "$work" -p1 --forward --batch -i "$(pwd)/$p"
done
mkdir -p "$(dirname "$bin")"
# Built beside the old binary and renamed over it: a running server keeps its file.
quietly "go build ferretdb $version (about a minute)" \
  bash -c "cd '$work' && go build -trimpath -o '$bin.new' ./cmd/ferretdb"
mv -f "$bin.new" "$bin"
echo "$stamp" > "$bin.socialbench"
echo "ferretdb $version ($stamp) at $bin"
