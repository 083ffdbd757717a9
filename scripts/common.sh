# Shared by scripts/setup.sh and the build scripts (sourced, not run).
#
#   quietly TITLE CMD...       run CMD with its output in $SETUP_LOG; on failure show its end
#   require_go WHAT            exit with what to install unless Go >= 1.24 is on PATH
#   version_of CMD...          what CMD prints (stdout and stderr), never failing: no
#                              `cmd | grep -q` whose early exit SIGPIPEs cmd under pipefail
#   gobin                      where `go build` puts binaries ($GOBIN, else $GOPATH/bin)

SETUP_LOG=${SETUP_LOG:-$(pwd)/.socialbench/setup.log}
mkdir -p "$(dirname "$SETUP_LOG")"

quietly() {
  local title=$1; shift
  echo "==> $title"
  echo "==> $title: $*" >>"$SETUP_LOG"
  if ! "$@" >>"$SETUP_LOG" 2>&1; then
    echo "FAILED: $title. The last lines of $SETUP_LOG:" >&2
    tail -n 40 "$SETUP_LOG" >&2
    exit 1
  fi
}

GO_MINIMUM=1.24

require_go() {
  local found="" version
  command -v go >/dev/null 2>&1 && found=$(go env GOVERSION 2>/dev/null || true)
  version=${found#go}
  if [ -z "$found" ] || [ "$(printf '%s\n%s\n' "$GO_MINIMUM" "$version" | sort -V | head -n 1)" != "$GO_MINIMUM" ]; then
    echo "error: building $1 needs Go >= $GO_MINIMUM on PATH; found ${found:-no go}." >&2
    echo "  Debian 12's golang-go is 1.19, too old. Install Go $GO_MINIMUM or newer from" >&2
    echo "  the official release archive (go.dev/dl), e.g. into /usr/local/go, then" >&2
    echo "  export PATH=\$PATH:/usr/local/go/bin and run this again." >&2
    exit 2
  fi
}

version_of() {
  "$@" 2>&1 || true
}

gobin() {
  local dir
  dir=$(go env GOBIN)
  echo "${dir:-$(go env GOPATH)/bin}"
}
