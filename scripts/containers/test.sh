#!/usr/bin/env bash
# make test-compose: builds every image of docker-compose.yml with podman (from a Debian bookworm base
# made by debootstrap), brings the stack up with podman-compose, runs the demo flow inside it (cluster
# initialize, set create, relay, pgbench changes, set status, set verify, the relay's metrics) and takes
# it down. Needs root (podman, debootstrap); installs podman, runc and debootstrap from Debian if missing.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
export CONTAINERS_CONF=$REPO/scripts/containers/containers.conf
export PGSHOVEL_COMPOSE_PG_PORT=${PGSHOVEL_COMPOSE_PG_PORT:-45432}
export PGSHOVEL_COMPOSE_REGISTRY_PORT=${PGSHOVEL_COMPOSE_REGISTRY_PORT:-48081}
export PGSHOVEL_COMPOSE_METRICS_PORT=${PGSHOVEL_COMPOSE_METRICS_PORT:-49187}
PROJECT=${PGSHOVEL_COMPOSE_PROJECT:-pgshovel2test}
log() { echo "[test-compose] $*" >&2; }

if ! command -v podman > /dev/null || ! command -v debootstrap > /dev/null || ! command -v runc > /dev/null; then
  log "installing podman, runc and debootstrap from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc debootstrap > /dev/null
fi
COMPOSE_VENV=$REPO/.cache/compose-venv
if [ ! -x "$COMPOSE_VENV/bin/podman-compose" ]; then
  python3 -m venv "$COMPOSE_VENV" && "$COMPOSE_VENV/bin/pip" install -q "podman-compose==1.6.0"
fi
compose() { "$COMPOSE_VENV/bin/podman-compose" -p "$PROJECT" "$@"; }
cli() { compose run --rm -T --entrypoint pgshovel relay "$@"; }
psql_in() { compose exec -T postgres "$@"; }

scripts/containers/base.sh
for service in postgres zookeeper kafka registry relay; do
  log "building $service"
  podman build -q -f "docker/$service.Dockerfile" -t "localhost/pgshovel2-$service:dev" . > /dev/null
done

cleanup() { log "taking the stack down"; compose down -v > /dev/null 2>&1 || true; }
trap cleanup EXIT
compose down -v > /dev/null 2>&1 || true
log "starting postgres, pgqd, zookeeper, kafka, registry"
compose up -d postgres pgqd zookeeper kafka registry > /dev/null

wait_for() {  # NAME SECONDS COMMAND...
  local name=$1 deadline=$((SECONDS + $2)); shift 2
  until "$@" > /dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { log "$name not ready in time"; compose logs "$name" | tail -n 30 >&2; exit 1; }
    sleep 2
  done
}
wait_for postgres 60 psql_in pg_isready -q
wait_for registry 120 curl -sf "http://127.0.0.1:$PGSHOVEL_COMPOSE_REGISTRY_PORT/apis/ccompat/v7/subjects"
wait_for kafka 120 compose run --rm -T --entrypoint python3 relay -c \
  "from confluent_kafka.admin import AdminClient as A; assert A({'bootstrap.servers': 'kafka:9092'}).list_topics(timeout=5).brokers"

log "pgbench tables, cluster, set"
psql_in pgbench -i -q -s 1 pgshovel
cli cluster initialize
cli set create pgbench /config/compose.yaml
compose up -d relay > /dev/null
wait_for relay 120 bash -c "'$COMPOSE_VENV/bin/podman-compose' -p $PROJECT logs relay 2>&1 | grep -q 'snapshot done'"
log "changes while the relay runs"
psql_in pgbench -n -c 2 -T 10 pgshovel | grep -E "^(number of transactions actually processed|tps)"
log "set status"
cli set status pgbench
log "set verify (waits until the relay caught up, then compares Kafka with the tables)"
cli set verify pgbench
log "the relay's metrics on 127.0.0.1:$PGSHOVEL_COMPOSE_METRICS_PORT"
metrics=$(curl -sf "http://127.0.0.1:$PGSHOVEL_COMPOSE_METRICS_PORT/metrics")
grep -E '^pgshovel2_relay_(changes_total|lag_seconds)' <<< "$metrics" | head -n 5
grep -q '^pgshovel2_relay_' <<< "$metrics" || { log "no relay metrics exported"; exit 1; }
log "passed"
