#!/usr/bin/env bash
# The secured stack's certificates (scripts/secure/*): one CA and, signed by it, a server
# certificate for localhost / 127.0.0.1 and a client certificate (mTLS), as PEM files and, for
# the JVM services (Kafka, ZooKeeper), PKCS12 keystores and a truststore. Idempotent: existing
# files are kept. Keys are unencrypted PKCS#8 (mode 600); the PKCS12 stores' password is in
# store.password (mode 600). 127.0.0.1 only: nothing here is fit for another host.
#   scripts/secure/certs.sh DIR
#
# DIR/ca.pem ca.key               the CA (self-signed, 10 years)
# DIR/server.pem server.key       CN=localhost, SAN DNS:localhost, IP:127.0.0.1 (serverAuth, clientAuth)
# DIR/client.pem client.key       CN=pgshovel-client (clientAuth): the mTLS client
# DIR/server.p12 client.p12       PKCS12 keystores (key + certificate + CA), password store.password
# DIR/truststore.p12              PKCS12 truststore holding the CA (alias ca)
set -euo pipefail
DIR=${1:?usage: $0 DIR}
DAYS=3650
mkdir -p "$DIR"
cd "$DIR"
umask 077

log() { echo "[secure] $*" >&2; }

# key FILE: an RSA key in PKCS#8 (what Java's PEM support and libpq take), made once
key() {
  [ -s "$1" ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
}

# sign NAME SUBJECT EXTENSIONS: NAME.pem signed by the CA, made once
sign() {
  local name=$1 subject=$2 ext=$3
  [ -s "$name.pem" ] && return 0
  key "$name.key"
  printf '%b\n' "$ext" > "$name.ext"
  openssl req -new -key "$name.key" -subj "$subject" -out "$name.csr" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$DAYS" -sha256 \
    -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  log "certificate $DIR/$name.pem ($subject)"
}

if [ ! -s ca.pem ]; then
  key ca.key
  openssl req -x509 -new -key ca.key -sha256 -days "$DAYS" -subj "/CN=pgshovel2 test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.pem 2>/dev/null
  rm -f server.pem client.pem  # signed by a CA that is gone
  log "CA $DIR/ca.pem"
fi
sign server "/CN=localhost" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1"
sign client "/CN=pgshovel-client" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"

[ -s store.password ] || openssl rand -hex 16 > store.password
pass=$(cat store.password)
for name in server client; do
  [ -s "$name.p12" ] && [ "$name.p12" -nt "$name.pem" ] && continue
  openssl pkcs12 -export -in "$name.pem" -inkey "$name.key" -certfile ca.pem -name "$name" \
    -passout "pass:$pass" -out "$name.p12"
done
if [ ! -s truststore.p12 ] || [ ca.pem -nt truststore.p12 ]; then
  rm -f truststore.p12
  keytool -importcert -noprompt -storetype PKCS12 -keystore truststore.p12 -storepass "$pass" \
    -alias ca -file ca.pem >/dev/null 2>&1
fi
chmod 644 ca.pem server.pem client.pem
