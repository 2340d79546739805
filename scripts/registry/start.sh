#!/usr/bin/env bash
# Runs Apicurio Registry in the foreground on 127.0.0.1:PORT, in-memory storage,
# BACKWARD compatibility enforced globally (Apicurio's default is none).
# Usage: start.sh DEST_DIR PORT. Confluent client URL: http://127.0.0.1:PORT/apis/ccompat/v7
set -euo pipefail
DEST=${1:?usage: $0 DEST_DIR PORT}; PORT=${2:?usage: $0 DEST_DIR PORT}
JAR=$DEST/app/registry-runner.jar
[ -f "$JAR" ] || { echo "registry not installed: run scripts/install.sh" >&2; exit 1; }
exec java -Xmx"${REGISTRY_HEAP:-384m}" \
  -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
  -Dquarkus.management.enabled=false \
  -Dquarkus.datasource.jdbc.url=jdbc:h2:mem:registry_db \
  -Dquarkus.datasource.jdbc.min-size=1 -Dquarkus.datasource.jdbc.initial-size=1 \
  -Dregistry.rules.global.compatibility=BACKWARD \
  -jar "$JAR"
