# PostgreSQL 15 from Debian's packages, started as the official postgres image is: the first start
# creates the cluster with POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB (the password read from
# the environment into a file initdb reads, never on a command line), password authentication for
# every address, and runs the scripts of /docker-entrypoint-initdb.d; later starts reuse the volume.
ARG BASE_IMAGE=tiering-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY docker/debian/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:$PATH
VOLUME /var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
