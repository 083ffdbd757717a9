#!/usr/bin/env bash
# The images for linux/arm64 on an amd64 machine, under QEMU's user emulation
# (binfmt_misc), then a check that they run: `socialbench --help`, one service answering
# /healthz, and each store stand-in's server starting; with --e2e, then the whole compose
# stack on them, end to end. Root; Debian's qemu-user-static and arch-test (mmdebstrap
# checks the foreign architecture with it).
#
#   scripts/containers/arm64.sh [--no-build] [--e2e] [build-images.sh options, e.g. --base debian]
#
# Tags are the amd64 ones with -arm64 (socialbench:dev-arm64, ...); cached like them
# (but any change of the sources rebuilds socialbench:dev-arm64: 12.5 minutes under
# QEMU on 2 cores). --no-build checks the images as they are. --e2e runs
# tests/e2e/test_compose_up.py with SOCIALBENCH_TEST_ARM64=1: the compose stack on this
# machine's images, then on the arm64 ones (up, seeded, loaded through nginx with no
# error, checked, loaded by the driver in the image), printing each one's time to healthy
# and CPU per request. Prints the build, check and end-to-end times.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/common.sh
. scripts/containers/engine.sh
suffix=-arm64
build=true e2e=false build_options=()
for option; do
  case "$option" in
    --no-build) build=false ;;
    --e2e) e2e=true ;;
    *) build_options+=("$option") ;;
  esac
done
if $e2e; then
  .venv/bin/python -c 'import pytest, docker' 2>/dev/null || {
    echo "error: --e2e runs pytest from .venv: scripts/setup.sh --test first" >&2; exit 2; }
  command -v docker-compose >/dev/null 2>&1 || {
    echo "error: --e2e needs docker-compose (apt-get install docker-compose)" >&2; exit 2; }
fi
if [ ! -x /usr/bin/qemu-aarch64-static ] || ! command -v arch-test >/dev/null 2>&1; then
  echo "error: no QEMU user emulation: apt-get install qemu-user-static arch-test" >&2
  exit 2
fi
# Registered with the F flag: the kernel keeps the interpreter open, so it works inside
# containers (whose file systems do not have it).
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] \
  || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register

start=$SECONDS
if $build; then
  scripts/build-images.sh --platform linux/arm64 --suffix "$suffix" ${build_options[@]+"${build_options[@]}"}
fi
built=$((SECONDS - start))

start=$SECONDS
run=("$engine" run --rm --platform linux/arm64)
arch=$("${run[@]}" --entrypoint uname "socialbench:dev$suffix" -m)
[ "$arch" = aarch64 ] || { echo "error: socialbench:dev$suffix runs as $arch" >&2; exit 1; }
"${run[@]}" "socialbench:dev$suffix" --help | grep -q "Usage: socialbench" \
  || { echo "error: socialbench --help failed in socialbench:dev$suffix" >&2; exit 1; }
echo "==> socialbench --help runs in socialbench:dev$suffix ($arch)"

# unique-id calls no store and no neighbour: its /healthz answers on its own.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
name=socialbench-arm64-check-$$
trap '"$engine" rm -f "$name" >/dev/null 2>&1 || true' EXIT
# Every service refuses to start without the deployment's token secret: a throwaway one.
"$engine" run -d --name "$name" --platform linux/arm64 -p "127.0.0.1:$port:9001" \
  -e "SOCIALBENCH_JWT_SECRET=$(openssl rand -hex 32)" \
  "socialbench:dev$suffix" serve unique-id --host 0.0.0.0 --port 9001 >/dev/null
for _ in $(seq 240); do
  if answer=$(python3 - "$port" 2>/dev/null <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=2).status)
PY
  ); then break; fi
  sleep 0.5
done
[ "${answer:-}" = 200 ] || { "$engine" logs "$name" >&2; echo "error: no /healthz" >&2; exit 1; }
echo "==> unique-id answers /healthz from socialbench:dev$suffix"
"$engine" rm -f "$name" >/dev/null

while IFS='=' read -r _ tag; do
  case "$tag" in
    */mongodb:*) server=(ferretdb --version); check=(--entrypoint ferretdb "$tag$suffix" --version) ;;
    */redis:*) server=(redis-server --version); check=("$tag$suffix" "${server[@]}") ;;
    */memcached:*) server=(memcached --version); check=("$tag$suffix" "${server[@]}") ;;
    */nginx:*) server=(nginx -v); check=("$tag$suffix" "${server[@]}") ;;
  esac
  "${run[@]}" "${check[@]}" >/dev/null 2>&1 || { echo "error: ${check[*]} failed" >&2; exit 1; }
  echo "==> $tag$suffix runs its server (${server[*]})"
done < <(grep -E '^SOCIALBENCH_[A-Z_]+_IMAGE=' compose/standins.env)
checked=$((SECONDS - start))
echo "==> arm64: images in $built s, checks in $checked s"
if $e2e; then
  start=$SECONDS
  echo "==> the compose stack, native then arm64 (tests/e2e/test_compose_up.py; about 15 minutes)"
  SOCIALBENCH_TEST_ARM64=1 .venv/bin/python -m pytest tests/e2e/test_compose_up.py -s -q -p no:cacheprovider
  echo "==> arm64: images in $built s, checks in $checked s, end to end in $((SECONDS - start)) s"
fi
