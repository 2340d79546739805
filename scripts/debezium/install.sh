#!/usr/bin/env bash
# Fetches the benchmark's reference peer from Maven Central, idempotently: Kafka Connect (runtime,
# json, transforms at the broker's version, scripts/debezium/pom.xml) into $DEBEZIUM_HOME/libs and
# Debezium's PostgreSQL connector plugin archive unpacked into $DEBEZIUM_HOME/plugins (Connect's
# plugin.path). bench/peer/debezium.py calls it; DEBEZIUM_HOME defaults to .cache/debezium.
#     scripts/debezium/install.sh            prints the DEBEZIUM_HOME it filled
#     scripts/debezium/install.sh jdbc       also Debezium's JDBC sink connector (the sink tests)
#     scripts/debezium/install.sh apicurio   also Apicurio's AvroConverter (apicurio-converter-pom.xml)
set -euo pipefail
source "$(dirname "$0")/../env.sh"
DEBEZIUM_VERSION="${DEBEZIUM_VERSION:-3.4.3.Final}"
DEBEZIUM_HOME="${DEBEZIUM_HOME:-$REPO/.cache/debezium}"
PLUGIN="io.debezium:debezium-connector-postgres:$DEBEZIUM_VERSION:tar.gz:plugin"
libs="$DEBEZIUM_HOME/libs" plugins="$DEBEZIUM_HOME/plugins"
pom_sum=$(sha256sum "$REPO/scripts/debezium/pom.xml" | cut -c1-12)

if [ ! -f "$libs/.complete-$pom_sum" ]; then
  log "fetching Kafka Connect from Maven Central into $libs"
  rm -rf "$libs" && mkdir -p "$libs"
  mvn -q -B -f "$REPO/scripts/debezium/pom.xml" dependency:copy-dependencies -DoutputDirectory="$libs" >&2
  touch "$libs/.complete-$pom_sum"
fi
if [ ! -f "$plugins/.complete-$DEBEZIUM_VERSION" ]; then
  log "fetching $PLUGIN from Maven Central into $plugins"
  rm -rf "$plugins" && mkdir -p "$plugins"
  mvn -q -B dependency:copy -Dartifact="$PLUGIN" -DoutputDirectory="$DEBEZIUM_HOME" >&2
  tar -xzf "$DEBEZIUM_HOME/debezium-connector-postgres-$DEBEZIUM_VERSION-plugin.tar.gz" -C "$plugins" --no-same-owner
  touch "$plugins/.complete-$DEBEZIUM_VERSION"
fi
for extra in "$@"; do
  case "$extra" in
    jdbc) artifact="debezium-connector-jdbc" ;;
    apicurio)
      conv_pom="$REPO/scripts/debezium/apicurio-converter-pom.xml"
      conv_sum=$(sha256sum "$conv_pom" | cut -c1-12)
      if [ ! -f "$plugins/.complete-apicurio-$conv_sum" ]; then
        log "fetching Apicurio's AvroConverter from Maven Central into $plugins/apicurio-converter"
        rm -rf "$plugins/apicurio-converter"
        mvn -q -B -f "$conv_pom" dependency:copy-dependencies -DoutputDirectory="$plugins/apicurio-converter" >&2
        touch "$plugins/.complete-apicurio-$conv_sum"
      fi
      continue ;;
    *) echo "install.sh: unknown plugin $extra (known: jdbc, apicurio)" >&2; exit 2 ;;
  esac
  if [ ! -f "$plugins/.complete-$artifact-$DEBEZIUM_VERSION" ]; then
    log "fetching io.debezium:$artifact:$DEBEZIUM_VERSION:tar.gz:plugin from Maven Central into $plugins"
    mvn -q -B dependency:copy -Dartifact="io.debezium:$artifact:$DEBEZIUM_VERSION:tar.gz:plugin" \
      -DoutputDirectory="$DEBEZIUM_HOME" >&2
    tar -xzf "$DEBEZIUM_HOME/$artifact-$DEBEZIUM_VERSION-plugin.tar.gz" -C "$plugins" --no-same-owner
    touch "$plugins/.complete-$artifact-$DEBEZIUM_VERSION"
  fi
done
echo "$DEBEZIUM_HOME"
