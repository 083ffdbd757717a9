# A stand-in for the official nginx image from Debian's nginx-light (1.22): the same
# configuration path (/etc/nginx/nginx.conf, mounted), pages directory
# (/usr/share/nginx/html), command and healthcheck (wget).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx-light wget \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/share/nginx/html
STOPSIGNAL SIGQUIT
EXPOSE 80
CMD ["nginx", "-g", "daemon off;"]
