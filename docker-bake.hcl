# Build the socialbench image for linux/amd64 and linux/arm64 and push it:
#   docker buildx create --use --name socialbench     # once: a builder that can do both
#   REGISTRY=ghcr.io/you/ TAG=0.1.0 docker buildx bake --push
# One architecture into the local engine (for compose):
#   docker buildx bake local
# Another base (any Debian bookworm with python3, python3-venv, python-is-python3):
#   docker buildx bake local --set '*.args.BASE_IMAGE=registry.example/python:3.11'
# Every image with podman or docker, the store stand-ins too, cached: scripts/build-images.sh
variable "REGISTRY" {
  default = ""              # e.g. "ghcr.io/you/" (with the trailing slash)
}
variable "TAG" {
  default = "0.1.0"
}
variable "PYTHON_VERSION" {
  default = "3.11"          # the base is python:<this>-slim-bookworm (the Dockerfile's BASE_IMAGE)
}

group "default" {
  targets = ["socialbench"]
}

target "_common" {
  context    = "."
  dockerfile = "Dockerfile"
  target     = "runtime"
  args = {
    PYTHON_VERSION = PYTHON_VERSION
  }
}

target "socialbench" {
  inherits  = ["_common"]
  platforms = ["linux/amd64", "linux/arm64"]
  tags      = ["${REGISTRY}socialbench:${TAG}"]
}

target "local" {
  inherits = ["_common"]
  tags     = ["socialbench:dev"]
  output   = ["type=docker"]
}
