#!/usr/bin/env bash
# The schema registry behind TLS and basic auth, for the security tests and for trying a secured
# deployment locally: Debian's nginx on $SECURE_REGISTRY_PORT (TLS with the server certificate of
# scripts/secure/certs.sh, client certificates signed by its CA required, basic auth) in front of
# an Apicurio Registry of its own on $SECURE_REGISTRY_BACKEND_PORT (scripts/registry/start.sh;
# 127.0.0.1, not reachable through nginx without both). State under $STACK_DIR/secure/registry.
#   scripts/secure/registry.sh up|down|status|env
# User: pgshovel, password in users/pgshovel.password; users/pgshovel.userinfo holds
# pgshovel:<password> (a file: reference for --schema-registry-user-info).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DIR="$SECURE_DIR/registry"
URL="https://127.0.0.1:$SECURE_REGISTRY_PORT/apis/ccompat/v7"

write_config() {
  local password
  password=$(secret "$DIR/users/pgshovel.password")
  (umask 077; printf 'pgshovel:%s\n' "$password" > "$DIR/users/pgshovel.userinfo")
  # nginx's workers (user nobody) read the password file at each request: group nogroup may read it
  printf 'pgshovel:%s\n' "$(openssl passwd -5 -stdin <<< "$password")" > "$DIR/htpasswd"
  chgrp nogroup "$DIR/htpasswd"; chmod 640 "$DIR/htpasswd"
  cat > "$DIR/nginx.conf" <<CONF
user nobody nogroup;
worker_processes 1;
daemon off;
pid $DIR/nginx.pid;
error_log $DIR/error.log warn;
events { worker_connections 256; }
http {
  access_log $DIR/access.log;
  client_body_temp_path $DIR/tmp/body;
  proxy_temp_path $DIR/tmp/proxy;
  fastcgi_temp_path $DIR/tmp/fastcgi;
  uwsgi_temp_path $DIR/tmp/uwsgi;
  scgi_temp_path $DIR/tmp/scgi;
  server {
    listen 127.0.0.1:$SECURE_REGISTRY_PORT ssl;
    ssl_certificate $CERTS/server.pem;
    ssl_certificate_key $CERTS/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_client_certificate $CERTS/ca.pem;
    ssl_verify_client on;
    auth_basic "pgshovel2 schema registry";
    auth_basic_user_file $DIR/htpasswd;
    client_max_body_size 16m;
    location / {
      proxy_pass http://127.0.0.1:$SECURE_REGISTRY_BACKEND_PORT;
      proxy_set_header Host \$host:\$server_port;
      proxy_set_header X-Forwarded-Proto https;
    }
  }
}
CONF
}

ready() {
  curl -sf --cacert "$CERTS/ca.pem" --cert "$CERTS/client.pem" --key "$CERTS/client.key" \
    -u "pgshovel:$(cat "$DIR/users/pgshovel.password")" "$URL/subjects"
}

up() {
  mkdir -p "$DIR/users" "$DIR/tmp"
  command -v nginx >/dev/null || die "nginx missing: run scripts/install.sh (Debian's nginx)"
  [ -f "$REGISTRY_HOME/app/registry-runner.jar" ] || die "Apicurio Registry missing in $REGISTRY_HOME: run scripts/install.sh"
  certs
  if ! alive "$DIR/backend.pid"; then
    require_free_port secure-registry-backend "$SECURE_REGISTRY_BACKEND_PORT" SECURE_REGISTRY_BACKEND_PORT
    nohup "$REPO/scripts/registry/start.sh" "$REGISTRY_HOME" "$SECURE_REGISTRY_BACKEND_PORT" > "$DIR/backend.log" 2>&1 &
    echo $! > "$DIR/backend.pid"
  fi
  if ! alive "$DIR/nginx.pid.copy"; then
    require_free_port secure-registry "$SECURE_REGISTRY_PORT" SECURE_REGISTRY_PORT
    write_config
    nohup nginx -c "$DIR/nginx.conf" -p "$DIR" -e "$DIR/error.log" > "$DIR/nginx.out" 2>&1 &
    echo $! > "$DIR/nginx.pid.copy"
  fi
  wait_for secure-registry-backend 120 curl -sf "http://127.0.0.1:$SECURE_REGISTRY_BACKEND_PORT/health/ready"
  wait_for secure-registry 30 ready
  log "secure schema registry ready at $URL (TLS, client certificate, basic auth)"
}

case "${1:-}" in
  up) up ;;
  down) stop_pid "$DIR/nginx.pid.copy"; stop_pid "$DIR/backend.pid"; log "secure schema registry stopped" ;;
  status) if alive "$DIR/nginx.pid.copy"; then echo "up    secure/registry"; else echo "down  secure/registry"; fi ;;
  env)
    echo "export PGSHOVEL_SCHEMA_REGISTRY=$URL"
    echo "export PGSHOVEL_SCHEMA_REGISTRY_USER_INFO=file:$DIR/users/pgshovel.userinfo"
    echo "export PGSHOVEL_SCHEMA_REGISTRY_CA=$CERTS/ca.pem"
    echo "export PGSHOVEL_SCHEMA_REGISTRY_CERT=$CERTS/client.pem PGSHOVEL_SCHEMA_REGISTRY_KEY=$CERTS/client.key" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
