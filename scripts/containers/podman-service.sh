#!/usr/bin/env bash
# The Docker API from podman on a unix socket, for docker-compose and the Docker SDK on a
# machine without a Docker engine. Runs in the foreground until stopped (Ctrl-C, SIGTERM).
#
#   scripts/containers/podman-service.sh [SOCKET]    default: /run/socialbench/podman.sock
#   export DOCKER_HOST=unix:///run/socialbench/podman.sock    # in another shell
#
# Podman leaves healthchecks to systemd timers; without systemd (CI's machine, most
# containers) no healthcheck would ever run and `depends_on: service_healthy` would wait
# forever. So this script runs them: every 2 s for containers not yet healthy, every
# 30 s for healthy ones (cheaper than compose's 5 s beside a benchmark).
set -euo pipefail
cd "$(dirname "$0")/../.."
socket=${1:-/run/socialbench/podman.sock}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(pwd)/scripts/containers/containers.conf}
mkdir -p "$(dirname "$socket")"
rm -f "$socket"
podman system service --time=0 "unix://$socket" &
service=$!
trap 'kill "$service" 2>/dev/null || true; wait "$service" 2>/dev/null || true' EXIT
trap 'exit 0' INT TERM
echo "podman serves the Docker API at unix://$socket (pid $service)"

tick=0
while kill -0 "$service" 2>/dev/null; do
  states=(starting unhealthy)
  (( tick % 15 == 0 )) && states+=(healthy)
  for state in "${states[@]}"; do
    for id in $(podman ps --quiet --filter "health=$state" 2>/dev/null); do
      podman healthcheck run "$id" >/dev/null 2>&1 &
    done
  done
  wait_for=$(jobs -p | grep -vx "$service" || true)
  [ -z "$wait_for" ] || wait $wait_for 2>/dev/null || true
  tick=$((tick + 1))
  sleep 2 & wait $! || true
done
