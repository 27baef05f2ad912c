#!/bin/sh
# The official image's first start, in short: initdb with the superuser's password from the
# environment, scram-sha-256 for every client, POSTGRES_DB created; then, on a server that listens
# on its Unix socket only, the files of /docker-entrypoint-initdb.d in order, once (*.sh run when
# executable, else sourced; *.sql through psql), with the superuser's password in psql's
# environment (PGPASSWORD) only; then postgres in the foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
export POSTGRES_USER POSTGRES_DB
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    export PGPASSWORD="$POSTGRES_PASSWORD"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" --dbname postgres \
            --set db="$POSTGRES_DB" <<'SQL'
CREATE DATABASE :"db";
SQL
    fi
    for script in /docker-entrypoint-initdb.d/*; do
        case "$script" in
            *.sh)
                if [ -x "$script" ]; then "$script"; else . "$script"; fi
                ;;
            *.sql)
                psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" \
                    --dbname "$POSTGRES_DB" -f "$script"
                ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    unset PGPASSWORD
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
