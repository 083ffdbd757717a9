# A stand-in for python:3.11-slim-bookworm made from Debian's packages: the base of the
# socialbench image where Docker Hub cannot be reached (scripts/build-images.sh).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python-is-python3 \
 && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
