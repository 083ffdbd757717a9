# A stand-in for the official mongo image: FerretDB (patched, scripts/build-ferretdb.sh)
# on SQLite, behind a `mongod` that takes the compose file's command (mongod
# --bind_ip_all --quiet), on the same port (27017) and data directory (/data/db, the
# volume). The build context holds the ferretdb binary and mongod (scripts/build-images.sh).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN groupadd --system --gid 999 mongodb \
 && useradd --system --uid 999 --gid mongodb --home-dir /data/db mongodb \
 && mkdir -p /data/db && chown mongodb:mongodb /data/db
COPY ferretdb mongod /usr/local/bin/
USER mongodb
WORKDIR /data/db
VOLUME /data/db
EXPOSE 27017
CMD ["mongod", "--bind_ip_all"]
