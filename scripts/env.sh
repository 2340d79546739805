# Shared settings of the local stack; sourced by the other scripts.
# Every value can be overridden from the environment.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK_DIR="${STACK_DIR:-$REPO/.stack}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_PORT="${PG_PORT:-55432}"
PG_DB="${PG_DB:-pgshovel}"
ZK_PORT="${ZK_PORT:-22181}"
KAFKA_PORT="${KAFKA_PORT:-29092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-29093}"
REGISTRY_PORT="${REGISTRY_PORT:-28081}"
CONNECT_PORT="${CONNECT_PORT:-28083}"  # the Kafka Connect worker of make bench (bench/peer/connect.py)
# The secured PostgreSQL (scripts/secure/postgres.sh): ssl, hostssl + scram-sha-256 only.
SECURE_PG_PORT="${SECURE_PG_PORT:-55433}"
# The secured ZooKeeper (scripts/secure/zookeeper.sh): SASL on the first port, TLS + SASL on the second.
SECURE_ZK_PORT="${SECURE_ZK_PORT:-22183}"
SECURE_ZK_TLS_PORT="${SECURE_ZK_TLS_PORT:-22184}"
VENV="${VENV:-$REPO/.venv}"
KAFKA_LIBS="${KAFKA_LIBS:-$REPO/.cache/kafka-libs}"
REGISTRY_HOME="${REGISTRY_HOME:-$REPO/.cache/registry}"
FLINK_VENV="${FLINK_VENV:-$REPO/.cache/flink-venv}"
FLINK_JARS="${FLINK_JARS:-$REPO/.cache/flink-jars}"
SPARK_JARS="${SPARK_JARS:-$REPO/.cache/spark-jars}"
PROMTOOL="${PROMTOOL:-$REPO/.cache/prometheus/promtool}"  # checks monitoring/ (Debian's prometheus package)
JDBC_JAR="${JDBC_JAR:-/usr/share/java/postgresql.jar}"
ICEBERG_VERSION="${ICEBERG_VERSION:-1.10.0}"
# The Spark standalone cluster (scripts/stack.sh spark-up): a master and SPARK_WORKERS workers.
SPARK_MASTER_PORT="${SPARK_MASTER_PORT:-27077}"
SPARK_MASTER_WEBUI_PORT="${SPARK_MASTER_WEBUI_PORT:-27080}"
SPARK_WORKER_WEBUI_PORT="${SPARK_WORKER_WEBUI_PORT:-27081}"  # worker i (from 0) uses this + i
SPARK_WORKERS="${SPARK_WORKERS:-2}"
SPARK_WORKER_MEMORY="${SPARK_WORKER_MEMORY:-1500m}"
# The secured services (scripts/secure/*.sh, docs/security.rst), state under $STACK_DIR/secure/.
# Kafka: SASL_SSL (SCRAM-SHA-512/256, PLAIN), SSL with client certificates (mTLS), SASL_SSL
# with OAUTHBEARER's unsecured tokens (client tests only), and its controller listener (SSL).
SECURE_KAFKA_PORT="${SECURE_KAFKA_PORT:-29094}"
SECURE_KAFKA_CONTROLLER_PORT="${SECURE_KAFKA_CONTROLLER_PORT:-29095}"
SECURE_KAFKA_MTLS_PORT="${SECURE_KAFKA_MTLS_PORT:-29096}"
SECURE_KAFKA_OAUTH_PORT="${SECURE_KAFKA_OAUTH_PORT:-29097}"
SECURE_KAFKA_TOPIC_PREFIX="${SECURE_KAFKA_TOPIC_PREFIX:-secure}"  # the topics the relay/consumer users' ACLs cover
# The schema registry behind nginx (TLS + basic auth) and the Apicurio instance it fronts.
SECURE_REGISTRY_PORT="${SECURE_REGISTRY_PORT:-28085}"
SECURE_REGISTRY_BACKEND_PORT="${SECURE_REGISTRY_BACKEND_PORT:-28086}"
export STACK_DIR PG_PORT PG_DB ZK_PORT KAFKA_PORT KAFKA_CONTROLLER_PORT REGISTRY_PORT CONNECT_PORT SPARK_MASTER_PORT
export SECURE_PG_PORT
export SECURE_KAFKA_PORT SECURE_KAFKA_CONTROLLER_PORT SECURE_KAFKA_MTLS_PORT SECURE_KAFKA_OAUTH_PORT
export SECURE_KAFKA_TOPIC_PREFIX SECURE_REGISTRY_PORT SECURE_REGISTRY_BACKEND_PORT
export SECURE_ZK_PORT SECURE_ZK_TLS_PORT

PG_DSN="host=127.0.0.1 port=$PG_PORT dbname=$PG_DB user=postgres"
ZK_HOSTS="127.0.0.1:$ZK_PORT"
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
SPARK_MASTER="spark://127.0.0.1:$SPARK_MASTER_PORT"

log() { echo "[stack] $*" >&2; }
die() { echo "[stack] error: $*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A port is taken by a listener, or by the local end of an established TCP connection: an
# outgoing connection's ephemeral port (Linux picks them from 32768-60999) makes a listener's bind
# fail too. A stopped server's closing sockets (FIN-WAIT, TIME-WAIT) do not: its restart binds.
port_in_use() {
  port_open "$1" && return 0
  command -v ss >/dev/null && [ -n "$(ss -Htan state established "( sport = :$1 )" 2>/dev/null)" ]
}
