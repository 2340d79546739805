#!/bin/sh
# A single-node KRaft Kafka: formats /var/lib/kafka/data on first start, then runs the broker.
#   KAFKA_ADVERTISED_HOST  the host name clients reach the broker by (default: this container's name)
#   KAFKA_HEAP             -Xmx (default 512m)
set -eu
dir=/var/lib/kafka
host=${KAFKA_ADVERTISED_HOST:-$(hostname)}
cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://localhost:9093
advertised.listeners=PLAINTEXT://$host:9092
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
PROPS
cat /opt/kafka/single-node.properties >> "$dir/server.properties"
cat > "$dir/log4j2.properties" <<L4J
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
L4J
cp="/opt/kafka/libs/*"
log4j="-Dlog4j2.configurationFile=$dir/log4j2.properties"
if [ ! -f "$dir/data/meta.properties" ]; then
  id=$(java "$log4j" -cp "$cp" kafka.tools.StorageTool random-uuid | tail -1)
  java "$log4j" -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" --standalone
fi
exec java -Xmx"${KAFKA_HEAP:-512m}" -XX:+UseG1GC -Djava.awt.headless=true "$log4j" \
  -cp "$cp" kafka.Kafka "$dir/server.properties"
