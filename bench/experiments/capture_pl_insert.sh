#!/usr/bin/env bash
# Insert cost of the capture triggers on a ten-column mixed table: no trigger, the C trigger
# (pgshovel2.capture), the generic PL/pgSQL trigger (pgshovel2_pl.capture, one EXECUTE per
# row) and the generated one (what pgshovel2_pl.register returns, what sets use).
#   PGHOST=127.0.0.1 PGPORT=55432 PGDATABASE=pgshovel PGUSER=postgres bench/experiments/capture_pl_insert.sh [seconds] [clients] [rows]
# Needs pgq, the pgshovel2 extension and pgshovel2_pl in the database. Prints per variant the
# single-row INSERT tps (pgbench, seconds each) and the time per row of one INSERT ... SELECT
# of rows rows (µs/row, median of 3), which leaves out commit costs.
set -euo pipefail
SECONDS_EACH="${1:-15}"
CLIENTS="${2:-2}"
ROWS="${3:-20000}"
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
ARGS="'bench_pl', 'bench_pl', '$COLS', '', 'all'"
setup() {
  psql -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
DROP TABLE IF EXISTS bench_pl;
CREATE TABLE bench_pl (k bigint, i int, b bool, f float8, r real, t text, d date, ts timestamptz,
                       j jsonb, by bytea);
SELECT pgq.create_queue('bench_pl') WHERE NOT EXISTS (SELECT 1 FROM pgq.queue WHERE queue_name = 'bench_pl');
SQL
  local fn
  case "$1" in
    c) fn=pgshovel2.capture ;;
    plpgsql-generic) fn=pgshovel2_pl.capture ;;
    plpgsql) fn="pgshovel2_pl.$(psql -qAt -c "SELECT pgshovel2_pl.register('bench_pl', 'bench_pl', 'bench_pl', '{$COLS}', '{}', 'all')")" ;;
    *) return 0 ;;
  esac
  psql -q -c "SELECT pgshovel2_pl.register('bench_pl', 'bench_pl', 'bench_pl', '{$COLS}', '{}', 'all')" \
       -c "CREATE TRIGGER cap AFTER INSERT OR UPDATE OR DELETE ON bench_pl FOR EACH ROW EXECUTE FUNCTION $fn($ARGS)" >/dev/null
}
per_row() {  # µs per row of INSERT ... SELECT of ROWS rows, median of 3 (each rolled back)
  for _ in 1 2 3; do
    psql -qAt -v ON_ERROR_STOP=1 <<SQL
BEGIN;
SELECT clock_timestamp() AS t0 \gset
INSERT INTO bench_pl (k, i, b, f, r, t, d, ts, j, by)
SELECT g, g % 1000, g % 2 = 0, g / 7.0, g / 3.0, 'text ' || g, current_date, now(), '{"a": 1}', '\x0102'
FROM generate_series(1, $ROWS) g;
SELECT round((extract(epoch FROM clock_timestamp() - :'t0') * 1e6 / $ROWS)::numeric, 1);
ROLLBACK;
SQL
  done | sort -n | sed -n 2p
}
for variant in ${VARIANTS:-none c plpgsql-generic plpgsql}; do
  setup "$variant"
  us=$(per_row)
  tps=$("$PGBENCH" -n -f "$SCRIPT" -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_EACH" 2>/dev/null \
        | awk '/^tps/ {print $3; exit}')
  echo "$variant tps=$tps us_per_row=$us"
done
psql -q -c "DROP TABLE bench_pl" -c "DELETE FROM pgshovel2_pl.layout WHERE queue = 'bench_pl'" \
     -c "SELECT pgq.drop_queue('bench_pl')" >/dev/null
