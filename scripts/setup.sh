#!/usr/bin/env bash
# Install what socialbench needs on a fresh Debian 12 machine (idempotent): the store
# servers, nginx and wrk from Debian, FerretDB when no mongod is on PATH, and the
# project with its test extras in ./.venv.
#
#   scripts/setup.sh          what the stack, the driver and the demo need
#   scripts/setup.sh --test   and what only the tests need: docker-compose and chromium
#                             from Debian, helm and Jaeger built with Go (minutes, once)
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=false
[ "${1:-}" = "--test" ] && for_tests=true

apt_packages=(nginx-light memcached redis-server wrk procps)
$for_tests && apt_packages+=(docker-compose chromium)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "==> apt-get install ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v mongod >/dev/null 2>&1; then
  echo "==> FerretDB (no mongod on PATH)"
  scripts/build-ferretdb.sh
fi

if $for_tests; then
  # helm 3 for the chart checks (tests/deploy); a helm 3 on PATH or in $GOPATH/bin is kept.
  helm_bin=$(PATH="$PATH:$(go env GOPATH)/bin" command -v helm || true)
  if [ -z "$helm_bin" ] || ! "$helm_bin" version --short 2>/dev/null | grep -q '^v3\.'; then
    echo "==> helm (chart checks)"
    scripts/build-helm.sh
  fi
  # Jaeger for the tracing end-to-end test (and `socialbench up --tracing`).
  echo "==> jaeger (tracing)"
  scripts/build-jaeger.sh
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> python venv in .venv"
  python3 -m venv .venv
fi
echo "==> pip install -e .[test]"
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test]"
