#!/bin/sh
# Initializes $PGDATA on first start, then runs the command (postgres and its -c settings).
#   POSTGRES_DB                the database to create (default: postgres)
#   POSTGRES_PASSWORD_FILE     a file holding the postgres role's password (scram-sha-256 from the network)
#   POSTGRES_HOST_AUTH_METHOD  "trust" to accept network connections without a password (local demos only)
# With neither a password nor trust, only connections from inside the container are accepted.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  method=${POSTGRES_HOST_AUTH_METHOD:-}
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    method=${method:-scram-sha-256}
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    echo "ALTER ROLE postgres PASSWORD :'pw'" | psql -q -v ON_ERROR_STOP=1 -v pw="$(cat "$POSTGRES_PASSWORD_FILE")"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  if [ -n "$method" ]; then
    printf 'host all all all %s\nhost replication all all %s\n' "$method" "$method" >> "$PGDATA/pg_hba.conf"
  fi
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  db=${POSTGRES_DB:-postgres}
  if [ "$db" != postgres ]; then
    postgres --single -D "$PGDATA" postgres <<SQL >/dev/null
CREATE DATABASE "$db";
SQL
  fi
fi
[ "${1:-}" = postgres ] && shift && exec postgres -D "$PGDATA" "$@"
exec "$@"
