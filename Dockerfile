# syntax=docker/dockerfile:1
# One image for every socialbench service, the seed job, the driver and Locust:
#   docker run IMAGE serve compose-post --host 0.0.0.0 --port 9011 --workers 2
#   docker run IMAGE load http://nginx:8080 --rate 1000 --duration 60s
# Multi-arch (linux/amd64, linux/arm64): `docker buildx bake` (docker-bake.hcl).
# All images, with podman or docker, cached: scripts/build-images.sh.
ARG PYTHON_VERSION=3.11
# The base of both stages: the official slim Python by default. Any Debian bookworm with
# python3, python3-venv and python-is-python3 works too: scripts/build-images.sh makes one
# from Debian's packages where Docker Hub cannot be reached (--build-arg BASE_IMAGE=...).
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

# ---- build: a venv with the project and its dependencies ----------------------
FROM ${BASE_IMAGE} AS build
# Every dependency has wheels for both architectures except hdrhistogram, which
# ships only a source archive with a small C extension: it needs a compiler (and
# Python's headers: the official image has them, Debian's python3 needs python3-dev)
# here, and only here.
RUN headers=$(python3 -c 'import os, sysconfig; print(int(os.path.exists(sysconfig.get_paths()["include"] + "/Python.h")))') \
 && apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev $([ "$headers" = 1 ] || echo python3-dev) \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv
WORKDIR /src
# The dependencies first, in their own layer: editing the code does not reinstall them.
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > requirements.txt \
 && pip install -r requirements.txt
# pyproject.toml installs these top-level folders as socialbench.services, .workloads, …
COPY README.md ./
COPY socialbench socialbench
COPY services services
COPY workloads workloads
COPY gateway gateway
COPY bench bench
RUN pip install --no-cache-dir --no-deps . \
 && pip check

# ---- runtime: no compiler, not root -----------------------------------------
FROM ${BASE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="socialbench" \
      org.opencontainers.image.description="The DeathStarBench social network in Python, and the tools to measure it" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 socialbench \
 && useradd --system --uid 10001 --gid socialbench --create-home --home-dir /home/socialbench socialbench
COPY --from=build /opt/venv /opt/venv
# A fixed path to the installed package: nginx's pages (gateway/pages) and the locustfile.
RUN ln -s "$(/opt/venv/bin/python -c 'import os, socialbench; print(os.path.dirname(socialbench.__file__))')" /opt/socialbench \
 && test -f /opt/socialbench/gateway/pages/index.html
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
WORKDIR /home/socialbench
EXPOSE 9001-9011
ENTRYPOINT ["socialbench"]
CMD ["--help"]
