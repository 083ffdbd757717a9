# A stand-in for the official redis image from Debian's redis-server (7.0): the same
# command (redis-server ...), port (6379), data directory (/data, the volume) and
# healthcheck (redis-cli ping), run as the unprivileged user redis.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
