#!/bin/sh
# The official image's first start, in short: initdb with the password from the environment,
# scram-sha-256 for every TCP client, the database created, the SQL files of
# /docker-entrypoint-initdb.d run; then postgres in the foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        postgres --single -D "$PGDATA" -c listen_addresses= postgres <<SQL >/dev/null
CREATE DATABASE "$db" OWNER "$user";
SQL
    fi
    # As the official image: the SQL files of /docker-entrypoint-initdb.d, in order, once.
    for script in /docker-entrypoint-initdb.d/*.sql; do
        [ -e "$script" ] || continue
        postgres --single -D "$PGDATA" -c listen_addresses= postgres < "$script" >/dev/null
    done
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
