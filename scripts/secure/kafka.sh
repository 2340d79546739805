#!/usr/bin/env bash
# A secured Kafka (KRaft, one node) for the security tests and for trying a secured deployment
# locally; state under $STACK_DIR/secure/kafka, 127.0.0.1 only. docs/security.rst describes it.
#   scripts/secure/kafka.sh up|down|status|env
#
# Listeners (ports from scripts/env.sh):
#   SASL_SSL   $SECURE_KAFKA_PORT             SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; inter-broker (admin, SCRAM-SHA-512)
#   MTLS       $SECURE_KAFKA_MTLS_PORT        SSL with a client certificate required (principal: its CN)
#   OAUTH      $SECURE_KAFKA_OAUTH_PORT       SASL_SSL, OAUTHBEARER with Kafka's UNSECURED token validator:
#                                             any client names its own principal. For client tests only.
#   CONTROLLER $SECURE_KAFKA_CONTROLLER_PORT  SSL with the broker's own certificate (principal localhost)
# Users (SCRAM-SHA-512 and -256 made at format time, PLAIN in the listener's JAAS), passwords in
# users/<name>.password: admin (super user), pgshovel-relay, pgshovel-consumer. ACLs
# (StandardAuthorizer, allow.everyone.if.no.acl.found=false), created at each start:
#   pgshovel-relay, pgshovel-client (mTLS): topics prefixed $SECURE_KAFKA_TOPIC_PREFIX: CREATE, WRITE,
#     READ, DESCRIBE; transactional ids prefixed pgshovel2.: WRITE, DESCRIBE; groups prefixed pgshovel: READ
#   pgshovel-consumer: topics prefixed $SECURE_KAFKA_TOPIC_PREFIX: READ, DESCRIBE; groups prefixed pgshovel: READ
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DIR="$SECURE_DIR/kafka"
USERS="admin pgshovel-relay pgshovel-consumer"

password() { secret "$DIR/users/$1.password"; }

write_config() {
  local store_pass admin relay consumer
  store_pass=$(cat "$CERTS/store.password")
  admin=$(password admin); relay=$(password pgshovel-relay); consumer=$(password pgshovel-consumer)
  (umask 077; cat > "$DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_PORT,MTLS://127.0.0.1:$SECURE_KAFKA_MTLS_PORT,OAUTH://127.0.0.1:$SECURE_KAFKA_OAUTH_PORT,CONTROLLER://127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_PORT,MTLS://127.0.0.1:$SECURE_KAFKA_MTLS_PORT,OAUTH://127.0.0.1:$SECURE_KAFKA_OAUTH_PORT,CONTROLLER://127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,OAUTH:SASL_SSL,CONTROLLER:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512

ssl.keystore.type=PKCS12
ssl.keystore.location=$CERTS/server.p12
ssl.keystore.password=$store_pass
ssl.key.password=$store_pass
ssl.truststore.type=PKCS12
ssl.truststore.location=$CERTS/truststore.p12
ssl.truststore.password=$store_pass
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
listener.name.controller.ssl.client.auth=required
listener.name.mtls.ssl.client.auth=required

listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin" user_admin="$admin" user_pgshovel-relay="$relay" user_pgshovel-consumer="$consumer";
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";

authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:localhost

log.dirs=$DIR/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=67108864
PROPS
  )
  cat > "$DIR/log4j2.properties" <<L4J
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$DIR/kafka.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
L4J
  # the admin's client settings (librdkafka properties), for the readiness check, the ACLs and tests
  (umask 077; cat > "$DIR/admin.properties" <<PROPS
bootstrap.servers=127.0.0.1:$SECURE_KAFKA_PORT
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=admin
sasl.password=$admin
ssl.ca.location=$CERTS/ca.pem
PROPS
  )
}

format() {
  local cp="$KAFKA_LIBS/*" id scram=()
  [ -f "$DIR/data/meta.properties" ] && return 0
  for user in $USERS; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(password "$user")]")
    scram+=(--add-scram "SCRAM-SHA-256=[name=$user,password=$(password "$user")]")
  done
  id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  java -Dlog4j2.configurationFile="$DIR/log4j2.properties" -cp "$cp" kafka.tools.StorageTool \
    format -t "$id" -c "$DIR/server.properties" --standalone "${scram[@]}" > "$DIR/format.log" 2>&1 ||
    die "secure kafka storage format failed: see $DIR/format.log"
}

# python3 with confluent_kafka (the project's venv): the admin client's calls
admin_py() { "$VENV/bin/python" - "$DIR/admin.properties" "$@"; }

ready() {
  admin_py <<'PY'
import sys
from confluent_kafka.admin import AdminClient
props = dict(line.strip().split("=", 1) for line in open(sys.argv[1]) if "=" in line)
assert AdminClient({**props, "log_level": 0}).list_topics(timeout=2).brokers
PY
}

create_acls() {
  admin_py "$SECURE_KAFKA_TOPIC_PREFIX" <<'PY'
import sys
from confluent_kafka.admin import (AclBinding, AclOperation as Op, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType as Res)
props = dict(line.strip().split("=", 1) for line in open(sys.argv[1]) if "=" in line)
prefix = sys.argv[2]
rules = {  # principal -> [(resource type, name prefix, operations)]
    "pgshovel-relay": [(Res.TOPIC, prefix, (Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE)),
                       (Res.TRANSACTIONAL_ID, "pgshovel2.", (Op.WRITE, Op.DESCRIBE)),
                       (Res.GROUP, "pgshovel", (Op.READ,))],
    "pgshovel-consumer": [(Res.TOPIC, prefix, (Op.READ, Op.DESCRIBE)), (Res.GROUP, "pgshovel", (Op.READ,))],
}
rules["pgshovel-client"] = rules["pgshovel-relay"]
bindings = [AclBinding(kind, name, ResourcePatternType.PREFIXED, f"User:{user}", "*", op, AclPermissionType.ALLOW)
            for user, grants in rules.items() for kind, name, ops in grants for op in ops]
admin = AdminClient(props)  # referenced until the answers are in
for binding, future in admin.create_acls(bindings, request_timeout=30).items():
    future.result()
PY
}

up() {
  mkdir -p "$DIR/users" "$DIR/data"
  if alive "$DIR/kafka.pid"; then log "secure kafka already running on $SECURE_KAFKA_PORT"; return; fi
  [ -f "$KAFKA_LIBS/.complete" ] || die "Kafka jars missing in $KAFKA_LIBS: run scripts/install.sh"
  require_free_port secure-kafka "$SECURE_KAFKA_PORT" SECURE_KAFKA_PORT
  require_free_port secure-kafka-mtls "$SECURE_KAFKA_MTLS_PORT" SECURE_KAFKA_MTLS_PORT
  require_free_port secure-kafka-oauth "$SECURE_KAFKA_OAUTH_PORT" SECURE_KAFKA_OAUTH_PORT
  require_free_port secure-kafka-controller "$SECURE_KAFKA_CONTROLLER_PORT" SECURE_KAFKA_CONTROLLER_PORT
  certs
  write_config
  format
  nohup java -Xmx512m -Xms256m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$DIR/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$DIR/server.properties" > "$DIR/stdout.log" 2>&1 &
  echo $! > "$DIR/kafka.pid"
  wait_for secure-kafka 90 ready
  create_acls || die "secure kafka: creating the ACLs failed"
  log "secure kafka ready: SASL_SSL 127.0.0.1:$SECURE_KAFKA_PORT, mTLS :$SECURE_KAFKA_MTLS_PORT, OAUTHBEARER :$SECURE_KAFKA_OAUTH_PORT"
}

case "${1:-}" in
  up) up ;;
  down) stop_pid "$DIR/kafka.pid"; log "secure kafka stopped" ;;
  status) if alive "$DIR/kafka.pid"; then echo "up    secure/kafka"; else echo "down  secure/kafka"; fi ;;
  env)
    echo "export PGSHOVEL_BOOTSTRAP_SERVERS=127.0.0.1:$SECURE_KAFKA_PORT"
    echo "export PGSHOVEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL PGSHOVEL_KAFKA_SASL_MECHANISMS=SCRAM-SHA-512"
    echo "export PGSHOVEL_KAFKA_SSL_CA_LOCATION=$CERTS/ca.pem"
    echo "export PGSHOVEL_KAFKA_SASL_USERNAME=pgshovel-relay PGSHOVEL_KAFKA_SASL_PASSWORD=file:$DIR/users/pgshovel-relay.password" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
