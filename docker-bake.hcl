# Build the socialbench image for linux/amd64 and linux/arm64 and push it:
#   docker buildx create --use --name socialbench     # once: a builder that can do both
#   REGISTRY=ghcr.io/you/ TAG=0.1.0 docker buildx bake --push
# One architecture into the local engine (for compose):
#   docker buildx bake local
variable "REGISTRY" {
  default = ""              # e.g. "ghcr.io/you/" (with the trailing slash)
}
variable "TAG" {
  default = "0.1.0"
}
variable "PYTHON_VERSION" {
  default = "3.12"
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
