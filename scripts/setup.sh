#!/usr/bin/env bash
# Install what socialbench needs on a fresh Debian 12 machine (idempotent): the store
# servers, nginx and wrk from Debian, FerretDB when no mongod is on PATH, and the
# project with its test extras in ./.venv. Tools' output goes to .socialbench/setup.log,
# shown when a step fails.
#
#   scripts/setup.sh          what the stack, the driver and the demo need
#   scripts/setup.sh --test   and what only the tests need: docker-compose and chromium
#                             from Debian, helm and Jaeger built with Go (minutes, once)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
for_tests=false
[ "${1:-}" = "--test" ] && for_tests=true
: >"$SETUP_LOG"

if ! command -v python3 >/dev/null 2>&1 \
    || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: socialbench needs Python >= 3.11 as python3 (Debian 12 has 3.11)." >&2
  exit 2
fi

apt_packages=(nginx-light memcached redis-server wrk procps python3-venv)
$for_tests && apt_packages+=(docker-compose chromium)
# The compose end-to-end test's engine where no Docker runs, and its Debian-made base;
# netavark sets up the bridge network with iptables (only a recommendation of podman's, so
# a machine without it failed every container start: "netavark: No such file or directory").
$for_tests && apt_packages+=(podman runc netavark aardvark-dns iptables mmdebstrap)
missing=()
for pkg in "${apt_packages[@]}"; do
  case "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" in
    "install ok installed") ;;
    *) missing+=("$pkg") ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  quietly "apt-get update" $sudo_cmd apt-get update -q
  quietly "apt-get install ${missing[*]}" \
    env DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Go-built tools are looked for on PATH and in Go's bin directory.
if command -v go >/dev/null 2>&1; then PATH="$PATH:$(gobin)"; fi

if ! command -v mongod >/dev/null 2>&1; then
  scripts/build-ferretdb.sh
fi

if $for_tests; then
  # helm 3 for the chart checks (tests/deploy); a helm 3 already on PATH is kept.
  case "$(version_of helm version --short)" in
    v3.*) ;;
    *) scripts/build-helm.sh ;;
  esac
  # Jaeger for the tracing end-to-end test (and `socialbench up --tracing`).
  scripts/build-jaeger.sh
  # The images of the compose end-to-end test (tests/e2e/test_compose_up.py), built
  # with podman or docker; skipped when current (minutes the first time).
  scripts/build-images.sh
fi

# A .venv that is a symbolic link (dangling or not) or a broken venv is made anew here.
if [ -L .venv ] || { [ -e .venv ] && ! .venv/bin/python -c '' 2>/dev/null; }; then
  echo "==> replacing the .venv found here (a link or a broken venv)"
  rm -rf .venv
fi
[ -x .venv/bin/python ] || quietly "python venv in .venv" python3 -m venv .venv
extras=""; $for_tests && extras="[test]"
quietly "pip install -e .$extras" \
  env PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/pip install -e ".$extras"
echo "==> ready: .venv/bin/socialbench (setup log: $SETUP_LOG)"
