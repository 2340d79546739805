#!/usr/bin/env bash
# Installs everything pgshovel2 needs on a fresh Debian 12 machine, idempotently:
# Debian packages, the pgshovel2 PostgreSQL extension, the Python venv, the
# native row codec (Rust), the Kafka broker jars, Spark's Kafka connector and Iceberg runtime (Maven
# Central), the schema registry and the stock PostgreSQL
# 14/16/17/18 binaries of the tests (scripts/pg-stock.sh).
set -euo pipefail
source "$(dirname "$0")/env.sh"

APT_PACKAGES="postgresql-15 postgresql-15-pgq3 pgqd postgresql-server-dev-15 libpq-dev
  postgresql-contrib zookeeper kcat netcat-openbsd maven openjdk-17-jre-headless libpostgresql-jdbc-java
  unzip xz-utils build-essential pkg-config libssl-dev libpython3-dev libjemalloc2 curl ca-certificates nginx"

missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  log "installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
  # Debian starts the nginx it installs (port 80, every address) where an init system runs:
  # scripts/secure/registry.sh runs its own on 127.0.0.1 and needs no service
  if [[ " $missing " == *" nginx "* ]] && command -v systemctl >/dev/null && systemctl is-active -q nginx 2>/dev/null; then
    log "stopping and disabling Debian's nginx service (scripts/secure/registry.sh runs its own nginx)"
    $SUDO systemctl disable --now nginx
  fi
fi

log "building the pgshovel2 PostgreSQL extension"
make -s -C "$REPO/sql/capture" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no >/dev/null
make -s -C "$REPO/sql/capture" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no INSTALL_SHLIB="$REPO/scripts/install-lib.sh" \
    install >/dev/null
log "building the pgshovel2_decoder output plugin (logical backend)"
make -s -C "$REPO/sql/decoder" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no >/dev/null
make -s -C "$REPO/sql/decoder" PG_CONFIG="$PG_BIN/pg_config" with_llvm=no INSTALL_SHLIB="$REPO/scripts/install-lib.sh" \
    install >/dev/null

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! cmp -s "$REPO/requirements.txt" "$VENV/.installed-requirements" 2>/dev/null; then
  log "installing Python requirements"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$REPO/requirements.txt"
  cp "$REPO/requirements.txt" "$VENV/.installed-requirements"
fi
"$VENV/bin/pip" install -q --no-deps -e "$REPO"

# The native row codec (native/, Rust + PyO3): built with maturin into a wheel and installed as
# the module pgshovel2_native; without it the relay runs the pure-Python codec (it logs which).
# It needs the Rust of native/Cargo.toml's rust-version, newer than Debian 12's cargo (rustc 1.63):
# rustup's toolchain (~/.cargo/bin) where the machine has it, even when the caller's PATH lacks it;
# else the machine's cargo when it is new enough; else rustup installs one into ~/.cargo.
# maturin turns on pyo3's extension-module feature (native/pyproject.toml); make native-test's
# cargo test builds without it and links libpython (libpython3-dev).
RUST_MIN=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$REPO/native/Cargo.toml")
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
rust_ok() {
  command -v cargo >/dev/null && printf '%s\n%s\n' "$RUST_MIN" "$(cargo --version | cut -d' ' -f2)" | sort -V -C
}
if ! rust_ok; then
  log "installing Rust >= $RUST_MIN for the native codec with rustup (static.rust-lang.org) into $HOME/.cargo"
  init=$(mktemp -d)/rustup-init  # rustup-init tells what to do by its own name
  curl -sSf --proto '=https' --tlsv1.2 -o "$init" \
      "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  chmod +x "$init" && "$init" -y -q --profile minimal --no-modify-path && rm -rf "$(dirname "$init")"
  PATH="$HOME/.cargo/bin:$PATH"
  rust_ok || { echo "install.sh: rustup gave no cargo of Rust >= $RUST_MIN (native/Cargo.toml)" >&2; exit 1; }
fi
log "building the native row codec (native/)"
"$VENV/bin/pip" install -q "maturin>=1.5,<2"
rm -rf "$REPO/native/target/wheels"
"$VENV/bin/maturin" build -q --release --auditwheel skip -m "$REPO/native/Cargo.toml" -i "$VENV/bin/python" \
    -o "$REPO/native/target/wheels"
"$VENV/bin/pip" install -q --no-deps --force-reinstall "$REPO"/native/target/wheels/pgshovel2_native-*.whl

if [ ! -f "$KAFKA_LIBS/.complete" ]; then
  log "fetching Apache Kafka jars from Maven Central"
  mkdir -p "$KAFKA_LIBS"
  mvn -q -B -f "$REPO/scripts/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$KAFKA_LIBS"
  touch "$KAFKA_LIBS/.complete"
fi

# Spark's Kafka connector for the installed pyspark, with its dependencies not already in
# pyspark's own jars (the bootstrap/materialize jobs pass these with spark.jars).
SPARK_VERSION=$("$VENV/bin/python" -c 'import pyspark; print(pyspark.__version__)')
if [ ! -f "$SPARK_JARS/.complete-$SPARK_VERSION" ]; then
  log "fetching spark-sql-kafka-0-10 $SPARK_VERSION from Maven Central"
  rm -rf "$SPARK_JARS" && mkdir -p "$SPARK_JARS"
  mvn -q -B -s "$REPO/scripts/spark/settings.xml" -f "$REPO/scripts/spark/pom.xml" dependency:copy-dependencies -Dspark.version="$SPARK_VERSION" \
      -DincludeScope=runtime -DoutputDirectory="$SPARK_JARS"
  pyspark_jars=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  for jar in "$SPARK_JARS"/*.jar; do
    artifact=$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[a-z0-9]+)?\.jar$//')
    if ls "$pyspark_jars/$artifact"-[0-9]*.jar >/dev/null 2>&1; then rm "$jar"; fi
  done
  touch "$SPARK_JARS/.complete-$SPARK_VERSION"
fi
# Apache Iceberg's Spark runtime (one shaded jar) for materialize/bootstrap --format iceberg.
if [ ! -f "$SPARK_JARS/.complete-iceberg-$ICEBERG_VERSION" ]; then
  log "fetching iceberg-spark-runtime-4.0_2.13 $ICEBERG_VERSION from Maven Central"
  rm -f "$SPARK_JARS"/iceberg-spark-runtime-*.jar
  mvn -q -B -s "$REPO/scripts/spark/settings.xml" dependency:copy \
      -Dartifact="org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:$ICEBERG_VERSION" -DoutputDirectory="$SPARK_JARS"
  touch "$SPARK_JARS/.complete-iceberg-$ICEBERG_VERSION"
fi

# Stock PostgreSQL servers (no C of ours, like a managed service) for the tests: Zonky's binaries.
"$REPO/scripts/pg-stock.sh" fetch

if [ -x "$REPO/scripts/registry/install.sh" ]; then
  "$REPO/scripts/registry/install.sh" "$REGISTRY_HOME"
fi
# Apache Flink, whose debezium-json format is the real Debezium consumer the
# tests read the debezium envelope with; its own venv (it pins old libraries).
if [ ! -f "$FLINK_VENV/.complete" ]; then
  log "installing Apache Flink (PyFlink) into $FLINK_VENV"
  python3 -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/pip" install -q apache-flink==1.20.3
  touch "$FLINK_VENV/.complete"
fi
# Flink's Kafka connector and debezium-avro-confluent format (the Avro Debezium consumer the tests
# run). Maven Central has no flink-sql-connector-kafka for 1.20 (3.2.0-1.19 is the newest 1.x one;
# it runs on 1.20) and flink-sql-avro-confluent-registry only as 1.20.0.
if [ ! -f "$FLINK_JARS/.complete" ]; then
  log "fetching Flink's Kafka connector and avro-confluent format from Maven Central into $FLINK_JARS"
  mkdir -p "$FLINK_JARS"
  for artifact in org.apache.flink:flink-sql-connector-kafka:3.2.0-1.19 \
                  org.apache.flink:flink-sql-avro-confluent-registry:1.20.0; do
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$FLINK_JARS"
  done
  touch "$FLINK_JARS/.complete"
fi
# promtool (Debian's prometheus package, unpacked: no server installed or started) checks and unit
# tests the alert rules of monitoring/ in make test.
if [ ! -x "$PROMTOOL" ]; then
  log "fetching promtool (Debian's prometheus package) into $(dirname "$PROMTOOL")"
  work="$(mktemp -d)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  (cd "$work" && { apt-get download -q prometheus >/dev/null 2>&1 || { $SUDO apt-get update -q && apt-get download -q prometheus; }; })
  dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
  mkdir -p "$(dirname "$PROMTOOL")"
  cp "$work/x/usr/bin/promtool" "$PROMTOOL"
  rm -rf "$work"
fi
log "install complete"
