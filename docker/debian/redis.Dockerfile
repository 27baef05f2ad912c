# Redis from Debian's packages; docker-compose.yml gives it its configuration on standard input.
ARG BASE_IMAGE=tiering-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
USER redis
EXPOSE 6379
