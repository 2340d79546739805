#!/usr/bin/env bash
# Insert cost of the capture triggers: single-row INSERTs into a ten-column mixed table with
# no trigger, the C trigger (pgshovel2.capture) and the PL/pgSQL trigger (pgshovel2_pl.capture).
#   PGHOST=127.0.0.1 PGPORT=55432 PGDATABASE=pgshovel PGUSER=postgres bench/capture_pl_insert.sh [seconds] [clients]
# Needs pgq, the pgshovel2 extension and pgshovel2_pl in the database; prints tps per variant.
set -euo pipefail
SECONDS_EACH="${1:-15}"
CLIENTS="${2:-2}"
PGBENCH="${PGBENCH:-/usr/lib/postgresql/15/bin/pgbench}"
SCRIPT="$(mktemp)"
trap 'rm -f "$SCRIPT"' EXIT
cat > "$SCRIPT" <<'SQL'
\set id random(1, 1000000000)
INSERT INTO bench_pl (k, i, b, f, r, t, d, ts, j, by)
VALUES (:id, :id % 1000, :id % 2 = 0, :id / 7.0, :id / 3.0, 'text ' || :id, current_date,
        now(), '{"a": 1}', '\x0102');
SQL
COLS="1,2,3,4,5,6,7,8,9,10"
setup() {
  psql -q -v ON_ERROR_STOP=1 <<SQL
DROP TABLE IF EXISTS bench_pl;
CREATE TABLE bench_pl (k bigint, i int, b bool, f float8, r real, t text, d date, ts timestamptz,
                       j jsonb, by bytea);
SELECT pgq.create_queue('bench_pl') WHERE NOT EXISTS (SELECT 1 FROM pgq.queue WHERE queue_name = 'bench_pl');
SQL
  case "$1" in
    c) psql -q -c "CREATE TRIGGER cap AFTER INSERT OR UPDATE OR DELETE ON bench_pl FOR EACH ROW
                   EXECUTE FUNCTION pgshovel2.capture('bench_pl', 'bench_pl', '$COLS', '', 'all')" ;;
    plpgsql) psql -q -c "CREATE TRIGGER cap AFTER INSERT OR UPDATE OR DELETE ON bench_pl FOR EACH ROW
                         EXECUTE FUNCTION pgshovel2_pl.capture('bench_pl', 'bench_pl', '$COLS', '', 'all')" \
                     -c "SELECT pgshovel2_pl.register('bench_pl', 'bench_pl', 'bench_pl', '{$COLS}', '{}', 'all')" ;;
  esac
}
for variant in none c plpgsql; do
  setup "$variant"
  tps=$("$PGBENCH" -n -f "$SCRIPT" -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_EACH" 2>/dev/null \
        | awk '/^tps/ {print $3; exit}')
  echo "$variant tps=$tps"
done
psql -q -c "DROP TABLE bench_pl" -c "SELECT pgq.drop_queue('bench_pl')" >/dev/null
