#!/usr/bin/env bash
# The local stack: PostgreSQL 15 + PgQ + pgqd, ZooKeeper, Kafka (KRaft) and,
# when installed, the schema registry. All state lives under $STACK_DIR; every
# service listens on 127.0.0.1 only.
#   scripts/stack.sh up|down|status|env
#   scripts/stack.sh spark-up|spark-down   (a Spark standalone master + workers, scripts/env.sh SPARK_*)
#   scripts/stack.sh start|stop postgres|pgqd|zookeeper|kafka|registry   (one service)
#   scripts/stack.sh crash postgres|zookeeper|kafka   (a crash: immediate shutdown / SIGKILL, for fault tests)
set -euo pipefail
source "$(dirname "$0")/env.sh"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

require_free_port() {  # name port
  if port_in_use "$2"; then
    die "$1: port 127.0.0.1:$2 is already in use by another process, as a listener or a connection's local end (set ${3:-its port variable} to another port)"
  fi
}

wait_for() {  # name seconds command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$name did not become ready within ${secs}s (see logs under $STACK_DIR)"
}

OUTPUT_PLUGINS="pgoutput, test_decoding, pgshovel2_decoder"
PG_STACK_KB=65536  # the server's soft stack limit (KB), where the hard limit allows it

pg_up() {
  local dir="$STACK_DIR/pg"
  if alive "$dir/data/postmaster.pid.copy" && "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
    log "postgres already running on $PG_PORT"; return
  fi
  require_free_port postgres "$PG_PORT" PG_PORT
  mkdir -p "$dir/run"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    log "initdb $dir/data"
    chown -R postgres:postgres "$dir"
    runuser -u postgres -- "$PG_BIN/initdb" -A trust -U postgres -E UTF8 --locale=C.UTF-8 -D "$dir/data" >/dev/null
    cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$dir/run'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 200
output_plugin_libraries = '$OUTPUT_PLUGINS'
max_prepared_transactions = 20
max_connections = 100
shared_buffers = 256MB
CONF
  fi
  # Debian's PostgreSQL 15.19+ loads only the output plugins listed here; data dirs made
  # before the logical backend get the setting added (read at start, a reload suffices).
  grep -q "pgshovel2_decoder" "$dir/data/postgresql.conf" ||
    echo "output_plugin_libraries = '$OUTPUT_PLUGINS'" >> "$dir/data/postgresql.conf"
  chown -R postgres:postgres "$dir"
  # PG_PORT (55432) lies in Linux's ephemeral range: an outgoing connection that used it as its
  # local port holds it while it closes and for TIME-WAIT's 60 s after (it was not bound with
  # SO_REUSEADDR, so postgres' bind fails; port_in_use sees established connections only), as
  # after a test run. Try again for up to 90 s then.
  local tries=0
  # A larger stack for the server's processes (soft limit only; a session may then raise
  # max_stack_depth, superuser only): PostgreSQL parses json/jsonb recursively, and the tests of
  # hostile values store a 100,000-deep jsonb (tests/integration/test_hostile_values.py), which
  # takes about 14 MB of stack. Debian's default 8 MB caps max_stack_depth at 7.5 MB.
  # (Set as user postgres: runuser's PAM session resets the limits it was given.)
  until runuser -u postgres -- sh -c 'ulimit -S -s "$0" 2>/dev/null; exec "$@"' "$PG_STACK_KB" \
      "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start \
      >/dev/null 2>"$dir/pg_ctl.err"; do
    if tail -5 "$dir/postgres.log" | grep -q "Address already in use" && [ $((tries += 1)) -le 90 ]; then
      [ "$tries" -gt 1 ] || log "port $PG_PORT is still held by a closing connection: trying again for 90 s"
      sleep 1
      continue
    fi
    cat "$dir/pg_ctl.err" >&2; tail -5 "$dir/postgres.log" >&2
    die "postgres did not start on $PG_PORT: see $dir/postgres.log"
  done
  head -1 "$dir/data/postmaster.pid" > "$dir/data/postmaster.pid.copy"
  "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'" | grep -q 1 ||
    "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres "$PG_DB"
  log "postgres ready on 127.0.0.1:$PG_PORT (db $PG_DB)"
}

pg_down() {
  local dir="$STACK_DIR/pg"
  [ -f "$dir/data/postmaster.pid" ] || return 0
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  rm -f "$dir/data/postmaster.pid.copy"
}

pgqd_up() {
  local dir="$STACK_DIR/pgqd"
  mkdir -p "$dir"
  if alive "$dir/pgqd.pid"; then log "pgqd already running"; return; fi
  cat > "$dir/pgqd.ini" <<INI
[pgqd]
base_connstr = host=127.0.0.1 port=$PG_PORT user=postgres
initial_database = $PG_DB
logfile = $dir/pgqd.log
pidfile = $dir/pgqd.pid
ticker_period = 0.2
check_period = 10
retry_period = 5
maint_period = 60
INI
  rm -f "$dir/pgqd.pid"
  pgqd -d "$dir/pgqd.ini"
  wait_for pgqd 10 test -s "$dir/pgqd.pid"
  log "pgqd running"
}

pgqd_down() {
  local pid="$STACK_DIR/pgqd/pgqd.pid"
  alive "$pid" && kill "$(cat "$pid")" && rm -f "$pid"
  return 0
}

zk_up() {
  local dir="$STACK_DIR/zookeeper"
  if alive "$dir/zk.pid"; then log "zookeeper already running on $ZK_PORT"; return; fi
  require_free_port zookeeper "$ZK_PORT" ZK_PORT
  mkdir -p "$dir/data"
  cat > "$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,wchs
maxSessionTimeout=60000
CFG
  nohup java -Xmx256m -Dzookeeper.jmx.log4j.disable=true \
    -cp /usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty.jar:/usr/share/java/metrics-core.jar \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" > "$dir/zookeeper.log" 2>&1 &
  echo $! > "$dir/zk.pid"
  wait_for zookeeper 30 bash -c "echo ruok | timeout 2 nc -q1 127.0.0.1 $ZK_PORT | grep -q imok"
  log "zookeeper ready on 127.0.0.1:$ZK_PORT"
}

kafka_up() {
  local dir="$STACK_DIR/kafka"
  if alive "$dir/kafka.pid"; then log "kafka already running on $KAFKA_PORT"; return; fi
  [ -f "$KAFKA_LIBS/.complete" ] || die "Kafka jars missing in $KAFKA_LIBS: run scripts/install.sh"
  require_free_port kafka "$KAFKA_PORT" KAFKA_PORT
  require_free_port kafka-controller "$KAFKA_CONTROLLER_PORT" KAFKA_CONTROLLER_PORT
  mkdir -p "$dir/data"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
PROPS
  cat "$REPO/scripts/kafka/single-node.properties" >> "$dir/server.properties"
  cat > "$dir/log4j2.properties" <<L4J
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$dir/kafka.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
L4J
  local cp="$KAFKA_LIBS/*"
  if [ ! -f "$dir/data/meta.properties" ]; then
    local id
    id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$cp" kafka.tools.StorageTool \
      format -t "$id" -c "$dir/server.properties" --standalone > "$dir/format.log" 2>&1 ||
      die "kafka storage format failed: see $dir/format.log"
  fi
  nohup java -Xmx512m -Xms256m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" > "$dir/stdout.log" 2>&1 &
  echo $! > "$dir/kafka.pid"
  wait_for kafka 90 "$VENV/bin/python" -c "
from confluent_kafka.admin import AdminClient
md = AdminClient({'bootstrap.servers': '$KAFKA_BOOTSTRAP'}).list_topics(timeout=2)
assert md.brokers"
  log "kafka ready on 127.0.0.1:$KAFKA_PORT"
}

registry_up() {
  local dir="$STACK_DIR/registry"
  [ -x "$REPO/scripts/registry/start.sh" ] || { log "no schema registry installed: Avro disabled"; return; }
  if alive "$dir/registry.pid"; then log "registry already running on $REGISTRY_PORT"; return; fi
  require_free_port schema-registry "$REGISTRY_PORT" REGISTRY_PORT
  mkdir -p "$dir"
  nohup "$REPO/scripts/registry/start.sh" "$REGISTRY_HOME" "$REGISTRY_PORT" > "$dir/registry.log" 2>&1 &
  echo $! > "$dir/registry.pid"
  wait_for schema-registry 120 curl -sf "http://127.0.0.1:$REGISTRY_PORT/health/ready"
  log "schema registry ready at $REGISTRY_URL"
}

# The Spark standalone cluster, from the venv's pyspark (its spark-class): a master and
# $SPARK_WORKERS workers of 1 core each, all on 127.0.0.1. Executors run $VENV/bin/python (the
# Python that came with this Spark); the jobs ship pgshovel2 itself with --py-files.
spark_up() {
  local dir="$STACK_DIR/spark"
  local spark_class="$VENV/bin/spark-class"
  [ -x "$spark_class" ] || die "no spark-class in $VENV/bin: install pyspark (scripts/install.sh)"
  mkdir -p "$dir"
  export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=127.0.0.1 PYSPARK_PYTHON="$VENV/bin/python"
  if alive "$dir/master.pid"; then
    log "spark master already running on $SPARK_MASTER_PORT"
  else
    require_free_port spark-master "$SPARK_MASTER_PORT" SPARK_MASTER_PORT
    require_free_port spark-master-webui "$SPARK_MASTER_WEBUI_PORT" SPARK_MASTER_WEBUI_PORT
    SPARK_DAEMON_MEMORY=256m nohup "$spark_class" org.apache.spark.deploy.master.Master --host 127.0.0.1 \
      --port "$SPARK_MASTER_PORT" --webui-port "$SPARK_MASTER_WEBUI_PORT" > "$dir/master.log" 2>&1 &
    echo $! > "$dir/master.pid"
    wait_for spark-master 60 port_open "$SPARK_MASTER_PORT"
  fi
  local i
  for i in $(seq 0 $((SPARK_WORKERS - 1))); do
    if alive "$dir/worker-$i.pid"; then continue; fi
    local webui=$((SPARK_WORKER_WEBUI_PORT + i))
    require_free_port spark-worker-webui "$webui" SPARK_WORKER_WEBUI_PORT
    mkdir -p "$dir/work-$i"
    SPARK_DAEMON_MEMORY=256m nohup "$spark_class" org.apache.spark.deploy.worker.Worker "$SPARK_MASTER" \
      --host 127.0.0.1 --cores 1 --memory "$SPARK_WORKER_MEMORY" --webui-port "$webui" \
      --work-dir "$dir/work-$i" > "$dir/worker-$i.log" 2>&1 &
    echo $! > "$dir/worker-$i.pid"
  done
  wait_for spark-workers 60 bash -c "[ \$(curl -sf http://127.0.0.1:$SPARK_MASTER_WEBUI_PORT/json/ |
    $VENV/bin/python -c 'import json,sys; print(sum(w[\"state\"] == \"ALIVE\" for w in json.load(sys.stdin)[\"workers\"]))') -ge $SPARK_WORKERS ]"
  log "spark master $SPARK_MASTER with $SPARK_WORKERS worker(s)"
}

spark_down() {
  local f
  for f in "$STACK_DIR"/spark/worker-*.pid "$STACK_DIR/spark/master.pid"; do
    [ -e "$f" ] && java_down "$f"
  done
  return 0
}

java_down() {  # pidfile
  if alive "$1"; then
    local pid; pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

case "${1:-}" in
  up)
    mkdir -p "$STACK_DIR"
    pg_up; pgqd_up; zk_up; kafka_up; registry_up ;;
  spark-up)
    mkdir -p "$STACK_DIR"; spark_up ;;
  spark-down)
    spark_down; log "spark stopped" ;;
  down)
    spark_down
    pgqd_down
    java_down "$STACK_DIR/registry/registry.pid"
    java_down "$STACK_DIR/kafka/kafka.pid"
    java_down "$STACK_DIR/zookeeper/zk.pid"
    pg_down
    log "stack stopped" ;;
  start)
    mkdir -p "$STACK_DIR"
    case "${2:-}" in
      postgres) pg_up ;; pgqd) pgqd_up ;; zookeeper) zk_up ;; kafka) kafka_up ;; registry) registry_up ;;
      *) die "start what? postgres|pgqd|zookeeper|kafka|registry" ;;
    esac ;;
  stop)
    case "${2:-}" in
      postgres) pg_down ;; pgqd) pgqd_down ;;
      zookeeper) java_down "$STACK_DIR/zookeeper/zk.pid" ;;
      kafka) java_down "$STACK_DIR/kafka/kafka.pid" ;;
      registry) java_down "$STACK_DIR/registry/registry.pid" ;;
      *) die "stop what? postgres|pgqd|zookeeper|kafka|registry" ;;
    esac
    log "${2} stopped" ;;
  crash)
    case "${2:-}" in
      postgres) [ -f "$STACK_DIR/pg/data/postmaster.pid" ] && \
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$STACK_DIR/pg/data" -m immediate -w stop >/dev/null || true
        rm -f "$STACK_DIR/pg/data/postmaster.pid.copy" ;;
      zookeeper|kafka)
        pidfile="$STACK_DIR/${2}/$([ "$2" = kafka ] && echo kafka || echo zk).pid"
        alive "$pidfile" && kill -9 "$(cat "$pidfile")" || true
        rm -f "$pidfile" ;;
      *) die "crash what? postgres|zookeeper|kafka" ;;
    esac
    log "${2} crashed" ;;
  status)
    for f in pg/data/postmaster.pid.copy pgqd/pgqd.pid zookeeper/zk.pid kafka/kafka.pid registry/registry.pid; do
      if alive "$STACK_DIR/$f"; then echo "up    $f"; else echo "down  $f"; fi
    done ;;
  env)
    echo "export PGSHOVEL_ZOOKEEPER_HOSTS=$ZK_HOSTS"
    echo "export PGSHOVEL_TEST_DSN='$PG_DSN'"
    echo "export PGSHOVEL_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP"
    echo "export PGSHOVEL_SCHEMA_REGISTRY=$REGISTRY_URL"
    echo "export PGSHOVEL_SPARK_MASTER=$SPARK_MASTER" ;;
  *) echo "usage: $0 up|down|status|env | spark-up|spark-down | start|stop|crash SERVICE" >&2; exit 2 ;;
esac
