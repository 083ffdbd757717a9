# The container engine of socialbench's image scripts (sourced, not run): sets $engine to
# docker or podman, and for podman exports CONTAINERS_CONF (scripts/containers/containers.conf).
# SOCIALBENCH_ENGINE=podman|docker decides; otherwise a Docker engine that answers (not
# podman's Docker API behind DOCKER_HOST), else podman.
engine=${SOCIALBENCH_ENGINE:-}
if [ -z "$engine" ]; then
  components=$(docker version --format '{{range .Server.Components}}{{.Name}} {{end}}' 2>/dev/null || true)
  if [ -n "$components" ] && [[ $components != *Podman* ]]; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    echo "error: neither a Docker engine nor podman here (apt-get install podman runc netavark aardvark-dns)" >&2
    exit 2
  fi
fi
if [ "$engine" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$(pwd)/scripts/containers/containers.conf}
fi
