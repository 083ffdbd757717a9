#!/usr/bin/env bash
# Build socialbench's container images with podman or docker (idempotent): the
# socialbench image (Dockerfile) and local stand-ins for the official store and nginx
# images (scripts/containers/NAME.Dockerfile, tags in compose/standins.env).
#
#   scripts/build-images.sh                  every image, for this machine's architecture
#   scripts/build-images.sh --base debian    the socialbench image on a Debian-made base
#   scripts/build-images.sh --platform linux/arm64 --suffix -arm64   (scripts/containers/arm64.sh)
#
# --base official: python:3.11-slim-bookworm from Docker Hub (the Dockerfile's default);
# --base debian: a base made here from Debian's packages (mmdebstrap, then import), also
# the base of the stand-ins; --base auto (default): official when the engine has it or
# can pull it, else debian. Each image is labelled with the SHA-256 of what it is built
# from (its Dockerfile, context, base image and arguments): an image whose label matches
# is not built again. SOCIALBENCH_ENGINE=podman|docker picks the engine (default: a
# Docker engine that answers, else podman). Podman runs with
# scripts/containers/containers.conf (CONTAINERS_CONF). Tools' output goes to
# .socialbench/setup.log; the end prints each image's size and build time.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
base=auto platform="" suffix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --platform) platform=$2; shift 2 ;;
    --suffix) suffix=$2; shift 2 ;;
    *) echo "usage: $0 [--base auto|official|debian] [--platform OS/ARCH] [--suffix TAGSUFFIX]" >&2
       exit 2 ;;
  esac
done
case "$base" in auto|official|debian) ;; *) echo "error: --base auto|official|debian" >&2; exit 2 ;; esac

PYTHON_VERSION=3.11
OFFICIAL_BASE=python:$PYTHON_VERSION-slim-bookworm
DEBIAN_TAG=localhost/socialbench/debian:bookworm$suffix
PYTHON_TAG=localhost/socialbench/python:$PYTHON_VERSION-bookworm$suffix
SOCIALBENCH_TAG=socialbench:dev$suffix
LABEL=io.socialbench.inputs
containers=scripts/containers

. scripts/containers/engine.sh
# The host's network for every build step: apt and pip reach the registries as the host
# does (its resolver, its proxy), whether or not a container network routes outside.
build_flags=(--network host)
[ -n "$platform" ] && build_flags+=(--platform "$platform")
# pip in a podman build sees the host's CA bundle (a proxy's CA, if any). Not in the
# other builds: apt cannot install ca-certificates under a read-only /etc/ssl/certs.
pip_flags=()
if [ "$engine" = podman ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  pip_flags+=(--volume /etc/ssl/certs:/etc/ssl/certs:ro)
fi

summary=()
hash_of() { local file; for file; do sha256sum <"$file"; done | sha256sum | cut -c1-64; }  # contents only
image_id() { "$engine" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
built_from() { "$engine" image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }
note() { summary+=("$(printf '%-46s %8s MB  %s' "$1" \
  "$(( $("$engine" image inspect --format '{{.Size}}' "$1") / 1000000 ))" "$2")"); }

# build TAG INPUTS_HASH TITLE -- BUILD ARGS...: skipped when TAG carries INPUTS_HASH.
build() {
  local tag=$1 inputs=$2 title=$3 start; shift 4
  if [ "$(built_from "$tag")" = "$inputs" ]; then
    note "$tag" "cached"
    return
  fi
  local previous; previous=$(image_id "$tag")
  start=$SECONDS
  quietly "$title" "$engine" build "${build_flags[@]}" --label "$LABEL=$inputs" -t "$tag" "$@"
  note "$tag" "built in $((SECONDS - start)) s"
  # The image this one replaces, unless something still uses it (the layer cache stays).
  [ -z "$previous" ] || [ "$previous" = "$(image_id "$tag")" ] \
    || "$engine" rmi "$previous" >/dev/null 2>&1 || true
}

# ---- the Debian base: mmdebstrap's root file system, imported ------------------------
debian_base() {
  local sources=/etc/apt/sources.list.d/debian.sources mirror="" inputs rootfs start
  # The mirror this machine's apt uses, else mmdebstrap's default.
  [ -f "$sources" ] && mirror=$sources
  local options=(--variant=apt --quiet --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
                 --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
                 --dpkgopt='path-include=/usr/share/doc/*/copyright'
                 --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
                 --customize-hook="copy-in $containers/docker-clean /etc/apt/apt.conf.d/")
  [ -n "$platform" ] && options+=(--architectures="${platform#*/}")
  inputs=$(printf '%s\n' "${options[@]}" "$(cat "$mirror" "$containers/docker-clean" 2>/dev/null)" \
           | sha256sum | cut -c1-64)
  if [ "$(built_from "$DEBIAN_TAG")" = "$inputs" ]; then note "$DEBIAN_TAG" cached; return; fi
  command -v mmdebstrap >/dev/null 2>&1 || {
    echo "error: the Debian base needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
  rootfs=$(mktemp --suffix=.tar)
  start=$SECONDS
  quietly "mmdebstrap bookworm ${platform:-} (about a minute)" \
    mmdebstrap "${options[@]}" bookworm "$rootfs" ${mirror:+"$mirror"}
  local import_flags=()
  if [ -n "$platform" ]; then
    if [ "$engine" = podman ]; then import_flags=(--arch "${platform#*/}"); else import_flags=(--platform "$platform"); fi
  fi
  quietly "import $DEBIAN_TAG" "$engine" import "${import_flags[@]}" \
    --change "LABEL $LABEL=$inputs" --change 'CMD ["bash"]' "$rootfs" "$DEBIAN_TAG"
  rm -f "$rootfs"
  note "$DEBIAN_TAG" "built in $((SECONDS - start)) s"
}

# ---- the socialbench image's base ----------------------------------------------------
if [ "$base" = auto ]; then
  base=debian
  if [ -n "$(image_id "$OFFICIAL_BASE")" ] \
      || timeout 60 "$engine" pull ${platform:+--platform "$platform"} "$OFFICIAL_BASE" \
           >>"$SETUP_LOG" 2>&1; then
    base=official
  fi
fi
debian_base
build "$PYTHON_TAG" "$(hash_of "$containers/python.Dockerfile" <(image_id "$DEBIAN_TAG"))" \
  "build $PYTHON_TAG" -- --build-arg "DEBIAN_IMAGE=$DEBIAN_TAG" -f "$containers/python.Dockerfile" "$containers"
if [ "$base" = official ]; then base_image=$OFFICIAL_BASE; else base_image=$PYTHON_TAG; fi

# ---- the socialbench image: what .dockerignore lets into the context ----------------
mapfile -t entries < <(sed -n 's:^!\(.*\)$:\1:p' .dockerignore | sed 's:/$::')
context_hash=$(find "${entries[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
  ! -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum)
build "$SOCIALBENCH_TAG" \
  "$(hash_of Dockerfile .dockerignore <(echo "$context_hash") <(echo "$base_image"; image_id "$base_image"))" \
  "build $SOCIALBENCH_TAG on $base_image (a few minutes the first time)" -- \
  "${pip_flags[@]}" --build-arg "BASE_IMAGE=$base_image" --target runtime .

# ---- the stand-ins of the official store and nginx images ----------------------------
# FerretDB, the MongoDB stand-in's server: on PATH, in Go's bin directory, or built now.
ferretdb=$(command -v ferretdb || true)
if [ -z "$ferretdb" ] && command -v go >/dev/null 2>&1 && [ -x "$(gobin)/ferretdb" ]; then
  ferretdb=$(gobin)/ferretdb
fi
if [ -z "$ferretdb" ]; then
  scripts/build-ferretdb.sh
  ferretdb=$(gobin)/ferretdb
fi
while IFS='=' read -r variable tag; do
  name=${variable#SOCIALBENCH_}; name=${name%_IMAGE}; name=${name,,}
  dockerfile=$containers/$name.Dockerfile
  context=$containers
  inputs=("$dockerfile")
  if [ "$name" = mongodb ]; then
    context=$(mktemp -d)
    if [ -n "$platform" ]; then
      # Cross-compiled once into .socialbench/ (build-ferretdb.sh keeps it while current).
      GOARCH=${platform#*/} scripts/build-ferretdb.sh --output ".socialbench/ferretdb-${platform#*/}"
      cp ".socialbench/ferretdb-${platform#*/}" "$context/ferretdb"
    else
      cp "$ferretdb" "$context/ferretdb"
    fi
    cp "$containers/mongod" "$context/"
    inputs+=("$context/ferretdb" "$context/mongod")
  fi
  build "$tag$suffix" "$(hash_of "${inputs[@]}" <(image_id "$DEBIAN_TAG"))" \
    "build $tag$suffix" -- --build-arg "DEBIAN_IMAGE=$DEBIAN_TAG" -f "$dockerfile" "$context"
  [ "$context" = "$containers" ] || rm -rf "$context"
done < <(grep -E '^SOCIALBENCH_[A-Z_]+_IMAGE=' compose/standins.env)

echo "==> images ($engine, base ${base}):"
printf '    %s\n' "${summary[@]}"
