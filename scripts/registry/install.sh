#!/usr/bin/env bash
# Installs Apicurio Registry (Confluent-compatible "ccompat" API) from Maven
# Central with Maven; idempotent. Usage: install.sh DEST_DIR
# 2.6.x is the last line that runs on Java 17 (3.x needs Java 21).
set -euo pipefail
DEST=${1:?usage: $0 DEST_DIR}
VERSION=${APICURIO_VERSION:-2.6.13.Final}
NAME=apicurio-registry-app-$VERSION

[ -f "$DEST/.installed-$VERSION" ] && exit 0
mkdir -p "$DEST"
tmp=$(mktemp -d "$DEST/.tmp.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
echo "[stack] fetching Apicurio Registry $VERSION (~140 MB) from Maven Central" >&2
mvn -q -B dependency:copy -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" \
    -DoutputDirectory="$tmp"
mkdir "$tmp/x"
tar -xzf "$tmp/$NAME-all.tar.gz" -C "$tmp/x" --no-same-owner   # runner jar, lib/, meta/
[ -f "$tmp/x/$NAME-runner.jar" ] || { echo "unexpected archive layout" >&2; exit 1; }
chmod 755 "$tmp/x"; rm -rf "$DEST/app"; mv "$tmp/x" "$DEST/app"
ln -sfn "$NAME-runner.jar" "$DEST/app/registry-runner.jar"
touch "$DEST/.installed-$VERSION"
