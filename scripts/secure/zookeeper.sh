#!/usr/bin/env bash
# A secured ZooKeeper (Debian's 3.8) for tests and the secured stack: every client must
# authenticate with SASL DIGEST-MD5 (enforce.auth), on the plain port SECURE_ZK_PORT and on the
# TLS port SECURE_ZK_TLS_PORT (Netty, mutual TLS: a client certificate signed by the stack's CA).
# State under $STACK_DIR/secure/zookeeper; 127.0.0.1 only.
#   scripts/secure/zookeeper.sh up|down|status
#
# Users of its JAAS file (passwords made at the first `up`, one file each, mode 600):
#   secrets/admin.password     the principal pgshovel2 runs as (sasl:admin)
#   secrets/intruder.password  a second principal, for tests that another identity is refused
# Certificates in certs/ (ca.pem, server.pem/.key, client.pem/.key, server.p12, truststore.p12, the
# stores' password in store.password): made by scripts/secure/certs.sh when it exists, else here alike.
set -euo pipefail
source "$(dirname "$0")/../env.sh"

DIR="$STACK_DIR/secure/zookeeper"
PORT="$SECURE_ZK_PORT"
TLS_PORT="$SECURE_ZK_TLS_PORT"
USERS=(admin intruder)
CP=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/metrics-core.jar
for jar in buffer codec common handler resolver transport transport-native-epoll transport-native-unix-common; do
  CP="$CP:/usr/share/java/netty-$jar.jar"
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

secret() {  # name: the secret's file, made on first use
  local file="$DIR/secrets/$1.password"
  if [ ! -s "$file" ]; then
    (umask 077; openssl rand -hex 16 > "$file")
  fi
  echo "$file"
}

own_certs() {  # dir: a CA and, signed by it, a server (localhost, 127.0.0.1) and a client certificate
  local d=$1 store
  [ -s "$d/truststore.p12" ] && return
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    [ -s store.password ] || openssl rand -hex 16 > store.password
    store=$(cat store.password)
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
      -subj "/CN=pgshovel2 secured stack CA" 2>/dev/null
    for who in server client; do
      local cn=localhost ext="subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"
      [ "$who" = client ] && cn=pgshovel2-client ext="extendedKeyUsage=clientAuth"
      openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" -subj "/CN=$cn" 2>/dev/null
      openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$who.pem" -days 3650 \
        -extfile <(printf "$ext\n") 2>/dev/null
      rm -f "$who.csr"
    done
    openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name server \
      -out server.p12 -passout "pass:$store"
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 -storetype PKCS12 \
      -storepass "$store" >/dev/null 2>&1
    chmod 644 ca.pem server.pem client.pem
  )
}

certs() {
  local d="$DIR/certs"
  if [ -x "$REPO/scripts/secure/certs.sh" ]; then
    "$REPO/scripts/secure/certs.sh" "$d" >/dev/null
  else
    own_certs "$d"
  fi
}

configure() {
  mkdir -p "$DIR/data" "$DIR/secrets"
  chmod 700 "$DIR/secrets"
  local store
  certs
  store=$(cat "$DIR/certs/store.password")
  (
    umask 077
    {
      echo "Server {"
      echo "  org.apache.zookeeper.server.auth.DigestLoginModule required"
      for user in "${USERS[@]}"; do printf '  user_%s="%s"\n' "$user" "$(cat "$(secret "$user")")"; done
      echo "  ;"
      echo "};"
    } > "$DIR/jaas.conf"
  )
  (umask 077; cat > "$DIR/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
secureClientPort=$TLS_PORT
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
maxSessionTimeout=60000
authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
enforce.auth.enabled=true
enforce.auth.schemes=sasl
ssl.keyStore.location=$DIR/certs/server.p12
ssl.keyStore.password=$store
ssl.keyStore.type=PKCS12
ssl.trustStore.location=$DIR/certs/truststore.p12
ssl.trustStore.password=$store
ssl.trustStore.type=PKCS12
ssl.clientAuth=need
CFG
  )
}

up() {
  if alive "$DIR/zk.pid"; then log "secured zookeeper already running on $PORT (TLS $TLS_PORT)"; return; fi
  for p in "$PORT" "$TLS_PORT"; do
    port_in_use "$p" && die "secured zookeeper: port 127.0.0.1:$p is in use (set SECURE_ZK_PORT / SECURE_ZK_TLS_PORT)"
  done
  configure
  nohup java -Xmx256m -Dzookeeper.jmx.log4j.disable=true \
    -Djava.security.auth.login.config="$DIR/jaas.conf" \
    -cp "$CP" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zoo.cfg" > "$DIR/zookeeper.log" 2>&1 &
  echo $! > "$DIR/zk.pid"
  for _ in $(seq 1 300); do
    if echo ruok | timeout 2 nc -q1 127.0.0.1 "$PORT" 2>/dev/null | grep -q imok && port_open "$TLS_PORT"; then
      log "secured zookeeper ready on 127.0.0.1:$PORT (SASL) and 127.0.0.1:$TLS_PORT (TLS + SASL)"
      return
    fi
    alive "$DIR/zk.pid" || break
    sleep 0.1
  done
  tail -20 "$DIR/zookeeper.log" >&2
  die "secured zookeeper did not start (see $DIR/zookeeper.log)"
}

down() {
  if alive "$DIR/zk.pid"; then
    local pid; pid=$(cat "$DIR/zk.pid")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/zk.pid"
}

status() {
  if alive "$DIR/zk.pid"; then
    echo "secured zookeeper: running (pid $(cat "$DIR/zk.pid")) on 127.0.0.1:$PORT, TLS 127.0.0.1:$TLS_PORT"
  else
    echo "secured zookeeper: stopped"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
