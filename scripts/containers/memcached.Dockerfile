# A stand-in for the official memcached image from Debian's memcached (1.6): the same
# command (memcached ...), port (11211) and healthcheck (bash), run as user memcache.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends memcached \
 && rm -rf /var/lib/apt/lists/*
USER memcache
EXPOSE 11211
CMD ["memcached"]
