"""The benchmark tables, shared by every tool measured (pgshovel2 and Debezium) so both move the
same rows.

- ``narrow``: pgbench_accounts-like rows (id int PRIMARY KEY, n int, s text of 100 bytes).
- ``mixed``: ten mixed-type columns, about 300 bytes a row (bigint, int, text, varchar, numeric,
  double precision, boolean, timestamptz, uuid, jsonb), the "realistic row" of GOALS.md.

A workload gives the column list for CREATE TABLE, an INSERT ... SELECT over generate_series that
writes rows ``first..last`` of it, and an UPDATE statement for the latency runs (``%s`` = key).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One benchmark table: columns (SQL column list, key ``id``), the SELECT list over ``g``
    (generate_series' value, a bigint from 1) that fills one row, and an UPDATE's SET list."""

    name: str
    columns: str
    select: str
    update_set: str

    def fill_sql(self, table: str, first: str = "%s", last: str = "%s") -> str:
        """INSERT writing rows first..last (SQL expressions, default two parameters; inclusive) into
        table (a qualified name)."""
        return f"INSERT INTO {table} SELECT {self.select} FROM generate_series(({first})::bigint, ({last})::bigint) g"

    def update_sql(self, table: str) -> str:
        """UPDATE of the row whose key is %s (one parameter) in table."""
        return f"UPDATE {table} SET {self.update_set} WHERE id = %s"


NARROW = Workload(
    "narrow",
    "id int PRIMARY KEY, n int, s text",
    "g, g, repeat('x', 100)",
    "n = n + 1",
)

MIXED = Workload(
    "mixed",
    "id bigint PRIMARY KEY, qty int NOT NULL, name text NOT NULL, code varchar(32) NOT NULL,"
    " price numeric(12,2) NOT NULL, score double precision NOT NULL, active boolean NOT NULL,"
    " created_at timestamptz NOT NULL, ref uuid NOT NULL, attrs jsonb NOT NULL",
    "g, mod(g, 1000)::int, 'customer ' || md5(g::text) || ' ' || md5((g * 7)::text),"
    " 'C-' || lpad(mod(g, 100000)::text, 8, '0'), round(mod(g, 100000) / 7.0, 2), g / 3.0,"
    " mod(g, 2) = 0, timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second',"
    " md5(g::text)::uuid,"
    " jsonb_build_object('n', g, 'tag', md5((g * 3)::text), 'tags', jsonb_build_array('a', 'b', mod(g, 10)))",
    "qty = qty + 1, score = score + 0.5, active = NOT active",
)

WORKLOADS = {w.name: w for w in (NARROW, MIXED)}


def fill(cur, workload: Workload, table: str, changes: int, per_transaction: int = 5000) -> None:
    """changes rows of workload inserted into table (keys 1..changes), per_transaction rows per
    source transaction (cur must be autocommit; small transactions are committed by a DO block's
    loop, one statement from here, without waiting for each commit's WAL flush: the same WAL, in a
    third of the time); then the table vacuumed and analyzed and a checkpoint, so that neither
    autovacuum (the inserts pass its insert threshold; a worker vacuuming a 400k-row table was seen
    in a 3 s drain) nor the checkpointer (the fill's dirty pages) works in the drain that follows,
    whichever tool drains it (under a second for 1M mixed rows)."""
    if per_transaction < 100:
        one = workload.fill_sql(table, "s", f"least(s + {per_transaction - 1}, {changes})")
        cur.execute("SET synchronous_commit = off")
        try:
            cur.execute(f"DO $$ BEGIN FOR s IN 1..{changes} BY {per_transaction} LOOP {one}; COMMIT; END LOOP; END $$")
        finally:
            cur.execute("RESET synchronous_commit")
    else:
        sql = workload.fill_sql(table)
        for start in range(0, changes, per_transaction):
            cur.execute(sql, (start + 1, min(start + per_transaction, changes)))
    cur.execute(f"VACUUM ANALYZE {table}")
    cur.execute("CHECKPOINT")
