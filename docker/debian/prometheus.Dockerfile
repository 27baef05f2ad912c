# Prometheus from Debian's packages, laid out as the official image: the binary as entry point,
# docker-compose.yml's command as its flags, data under the working directory, an unprivileged user.
ARG BASE_IMAGE=tiering-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
