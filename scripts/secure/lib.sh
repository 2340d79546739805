# Shared by the secured services' scripts (scripts/secure/*.sh): settings (../env.sh) and the
# process helpers they need (the same as scripts/stack.sh's). Sourced, not run.
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
SECURE_DIR="$STACK_DIR/secure"
CERTS="$SECURE_DIR/certs"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

require_free_port() {  # name port variable
  port_in_use "$2" && die "$1: port 127.0.0.1:$2 is already in use (set $3 to another port)"
  return 0
}

wait_for() {  # name seconds command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$name did not become ready within ${secs}s (see the logs under $SECURE_DIR)"
}

stop_pid() {  # pidfile: SIGTERM, then SIGKILL after 10 s
  if alive "$1"; then
    local pid; pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

# secret FILE: a random password kept in FILE (mode 600), made once; printed
secret() {
  [ -s "$1" ] || (umask 077; openssl rand -hex 12 > "$1")
  cat "$1"
}

certs() { "$REPO/scripts/secure/certs.sh" "$CERTS"; }
