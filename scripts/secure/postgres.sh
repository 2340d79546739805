#!/usr/bin/env bash
# PostgreSQL as a secured deployment runs it, for the security tests and for trying one locally:
# Debian's PostgreSQL 15 ($PG_BIN, with our C extensions and PgQ as the test stack's) on
# 127.0.0.1:$SECURE_PG_PORT with ssl=on (the server certificate of scripts/secure/certs.sh), and a
# pg_hba.conf of hostssl lines with scram-sha-256 only: no trust, no plain host line. The role
# pgshovel_relay must also show a client certificate signed by the CA (clientcert=verify-ca).
# The one local line (peer, OS user postgres, socket under the state folder) is this script's.
# State under $STACK_DIR/secure/postgres.
#   scripts/secure/postgres.sh up|down|status|env
#
# Roles (password of each in secrets/<role>.password, mode 600; secrets/pgpass holds them all as
# a libpq password file, the passfile= of the DSNs `env` prints):
#   dba              superuser: the DBA (CREATE EXTENSION, the grants --print-grants prints)
#   pgshovel_admin   set create / upgrade / drop: LOGIN, nothing else until the DBA grants it
#   pgshovel_relay   the relay: LOGIN, nothing else until the DBA grants it
#   app              an application writing the captured tables
#   replica          owner of database replica, the target of pgshovel replicate
# Databases: pgshovel (owner dba; extensions pgq, pgshovel2, pgshovel2_decoder), replica (owner replica).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DIR="$SECURE_DIR/postgres"
ROLES="dba pgshovel_admin pgshovel_relay app replica"
OUTPUT_PLUGINS="pgoutput, test_decoding, pgshovel2_decoder"

psql_local() {  # SQL as the superuser postgres over the state folder's socket (peer)
  runuser -u postgres -- "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR/run" -p "$SECURE_PG_PORT" -U postgres "$@"
}

init() {
  log "initdb $DIR/data"
  chown -R postgres:postgres "$DIR"
  runuser -u postgres -- "$PG_BIN/initdb" -A peer -U postgres -E UTF8 --locale=C.UTF-8 -D "$DIR/data" >/dev/null
  install -o postgres -g postgres -m 600 "$CERTS/server.key" "$DIR/data/server.key"
  install -o postgres -g postgres -m 644 "$CERTS/server.pem" "$DIR/data/server.pem"
  install -o postgres -g postgres -m 644 "$CERTS/ca.pem" "$DIR/data/ca.pem"
  cat >> "$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $SECURE_PG_PORT
unix_socket_directories = '$DIR/run'
unix_socket_permissions = 0700
ssl = on
ssl_cert_file = 'server.pem'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.pem'
ssl_min_protocol_version = 'TLSv1.2'
password_encryption = 'scram-sha-256'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 40
output_plugin_libraries = '$OUTPUT_PLUGINS'
max_prepared_transactions = 20
max_connections = 60
shared_buffers = 64MB
CONF
  # hostssl only; replication connections (the logical relay's) match "replication" lines only
  cat > "$DIR/data/pg_hba.conf" <<HBA
# TYPE   DATABASE     USER            ADDRESS        METHOD
local    all          postgres                       peer
hostssl  all          pgshovel_relay  127.0.0.1/32   scram-sha-256 clientcert=verify-ca
hostssl  replication  pgshovel_relay  127.0.0.1/32   scram-sha-256 clientcert=verify-ca
hostssl  all          all             127.0.0.1/32   scram-sha-256
hostssl  replication  all             127.0.0.1/32   scram-sha-256
HBA
  chown -R postgres:postgres "$DIR/data"
}

setup() {  # roles with their passwords, the databases and the DBA's extensions (idempotent)
  local role password pgpass="$DIR/secrets/pgpass"
  : > "$pgpass.new"
  for role in $ROLES; do
    password=$(secret "$DIR/secrets/$role.password")
    psql_local -d postgres -v role="$role" -v password="$password" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role')
\gexec
SELECT format('ALTER ROLE %I PASSWORD %L', :'role', :'password')
\gexec
SQL
    printf 'localhost:%s:*:%s:%s\n127.0.0.1:%s:*:%s:%s\n' "$SECURE_PG_PORT" "$role" "$password" \
      "$SECURE_PG_PORT" "$role" "$password" >> "$pgpass.new"
  done
  chmod 600 "$pgpass.new" && mv "$pgpass.new" "$pgpass"
  psql_local -d postgres <<'SQL'
ALTER ROLE dba SUPERUSER;
SELECT 'CREATE DATABASE pgshovel OWNER dba' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'pgshovel')
\gexec
SELECT 'CREATE DATABASE replica OWNER replica' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'replica')
\gexec
REVOKE ALL ON DATABASE pgshovel FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE pgshovel TO pgshovel_admin, pgshovel_relay, app;
REVOKE ALL ON DATABASE replica FROM PUBLIC;
SQL
  psql_local -d pgshovel <<'SQL'
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE EXTENSION IF NOT EXISTS pgq;
CREATE EXTENSION IF NOT EXISTS pgshovel2;
CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder;
SQL
}

up() {
  mkdir -p "$DIR/run" "$DIR/secrets"
  chmod 700 "$DIR/secrets"
  if alive "$DIR/postmaster.pid.copy"; then log "secure postgres already running on $SECURE_PG_PORT"; return; fi
  require_free_port secure-postgres "$SECURE_PG_PORT" SECURE_PG_PORT
  certs
  [ -f "$DIR/data/PG_VERSION" ] || init
  chown -R postgres:postgres "$DIR/data" "$DIR/run"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 start >/dev/null \
    || { tail -5 "$DIR/postgres.log" >&2; die "secure postgres did not start on $SECURE_PG_PORT: see $DIR/postgres.log"; }
  head -1 "$DIR/data/postmaster.pid" > "$DIR/postmaster.pid.copy"
  setup
  log "secure postgres ready on 127.0.0.1:$SECURE_PG_PORT (ssl, hostssl + scram-sha-256 only; db pgshovel)"
}

down() {
  if [ -f "$DIR/data/postmaster.pid" ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null || true
  fi
  rm -f "$DIR/postmaster.pid.copy"
  log "secure postgres stopped"
}

dsn() {  # role [database]: a DSN verifying the server's certificate, password from the passfile
  local extra=""
  [ "$1" = pgshovel_relay ] && extra=" sslcert=$CERTS/client.pem sslkey=$CERTS/client.key"
  echo "host=localhost port=$SECURE_PG_PORT dbname=${2:-pgshovel} user=$1 sslmode=verify-full" \
       "sslrootcert=$CERTS/ca.pem passfile=$DIR/secrets/pgpass$extra"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if alive "$DIR/postmaster.pid.copy"; then echo "up    secure/postgres"; else echo "down  secure/postgres"; fi ;;
  env)
    echo "# DSNs of the secured PostgreSQL (passwords in $DIR/secrets/pgpass)"
    echo "export SECURE_PG_ADMIN_DSN='$(dsn pgshovel_admin)'"
    echo "export SECURE_PG_RELAY_DSN='$(dsn pgshovel_relay)'"
    echo "export SECURE_PG_DBA_DSN='$(dsn dba)'" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
