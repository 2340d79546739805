"""Values no set may die of (issue #66, item 6), on the four capture paths (trigger with C and
PL/pgSQL capture, logical with our plugin and with pgoutput), in the initial snapshot and in
the stream, rebuilt from Kafka by the consumer library and compared in PostgreSQL:

- a jsonb and a json value nested 100,000 deep (PostgreSQL accepts them with a larger stack;
  the relay reads nothing recursively), a 1M-element int[] and text[], a 50 MB text, numeric
  NaN/±Infinity, BC and infinite dates and timestamps, a composite value, a multirange, citext,
  hstore, ltree and cube (pgvector is not packaged for Debian's PostgreSQL 15: cube, another
  extension's base type with its own text form, stands in for it);
Messages Kafka cannot take: test_oversized_messages.py.
"""

import pytest

from tests.helpers import RelayProcess, caught_up, verify
from tests.integration.hostile_helpers import (
    DEEP_STACK,
    compare_in_postgres,
    create_set,
    rebuilt,
    set_table,
)

DEEP = 100_000
MB = 1024 * 1024
# column -> (type, SQL of rows 1-4); {s} is the test's schema. Row 1 holds the 50 MB text, row 2
# the 1M-element arrays (apart: together they would pass the 64 MiB a message may take).
VALUES = {
    "big": ("text", [f"repeat('x', {50 * MB})", "NULL", "'é😀''\"\\'", "''"]),
    "ai": ("integer[]", ["NULL", "(SELECT array_agg(g) FROM generate_series(1, 1000000) g)", "'{}'",
                         "'[0:1]={1,NULL}'"]),
    "at": ("text[]", ["NULL", "(SELECT array_agg('v' || g) FROM generate_series(1, 1000000) g)",
                      "'{\"a,b\",NULL,\"\"}'", "'{}'"]),
    "n": ("numeric", ["'NaN'", "'Infinity'", "'-Infinity'", "'-0.000000000000000000000000000001'"]),
    "ts": ("timestamp", ["'infinity'", "'-infinity'", "'4713-01-01 00:00:00 BC'", "'294247-01-10 04:00:54.775806'"]),
    "tz": ("timestamptz", ["'-infinity'", "'infinity'", "'0044-03-15 12:00:00+00 BC'",
                           "'1999-12-31 23:59:59.999999+14'"]),
    "d": ("date", ["'infinity'", "'-infinity'", "'4713-01-01 BC'", "'5874897-12-31'"]),
    "comp": ("{s}.comp", ["ROW(1, 'a,\"b\"', 'NaN', '-infinity')::{s}.comp", "ROW(NULL, NULL, NULL, NULL)::{s}.comp",
                          "ROW(-1, '', 'Infinity', '0044-03-15 BC')::{s}.comp", "NULL"]),
    "mr": ("int4multirange", ["'{[1,3),[5,9)}'", "'{}'", "'{(,0),[10,)}'", "NULL"]),
    "ci": ("citext", ["'MiXeD ÉÀ'", "''", "NULL", "'x'"]),
    "hs": ("hstore", ["'a=>1, \"b c\"=>NULL, \"\"=>\"\\\\\"'", "''", "NULL", "'k=>v'"]),
    "lt": ("ltree", ["'Top.Science.Astronomy'", "''", "NULL", "'a'"]),
    "cu": ("cube", ["'(1, 2.5, -3e10)'", "'(0),(1)'", "NULL", "'(-0)'"]),
    "j": ("jsonb", ["'{\"k\": [1, \"x\", null]}'", "'null'",
                    f"(repeat('{{\"a\":', {DEEP}) || '1' || repeat('}}', {DEEP}))::jsonb",
                    f"(repeat('[', {DEEP}) || repeat(']', {DEEP}))::jsonb"]),
    "w": ("json", ["' [1, {\"a\" : 2}] '", "NULL", f"(repeat('[', {DEEP}) || repeat(']', {DEEP}))::json", "'\"s\"'"]),
}
SETUP = ("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore; "
         "CREATE EXTENSION IF NOT EXISTS ltree; CREATE EXTENSION IF NOT EXISTS cube")
# (path, envelope): every path in the row envelope, the debezium envelope on one path of each
# backend (its events wrap the same values); each with a set in each encoding
COMBOS = [(p, "row") for p in ("trigger-c", "trigger-plpgsql", "logical-pgshovel2", "logical-pgoutput")]
COMBOS += [("trigger-plpgsql", "debezium"), ("logical-pgoutput", "debezium")]


def _insert(db, schema: str, ids: range) -> None:
    with db.cursor() as cur:
        cur.execute(DEEP_STACK)
        for row, row_id in enumerate(ids):
            values = ", ".join(sql[row].replace("{s}", f'"{schema}"') for _, sql in VALUES.values())
            cur.execute(f'INSERT INTO "{schema}".hv (id, {", ".join(VALUES)}) VALUES ({row_id}, {values})')
        cur.execute("RESET max_stack_depth")


@pytest.mark.parametrize(("path", "envelope"), COMBOS)
def test_hostile_values_round_trip(stack, cluster, db, schema, tmp_path, path, envelope):
    """Rows 1-4 go out in the initial snapshot, the same values as rows 11-14 in the stream, through
    a set in each encoding on the same table: the consumer library rebuilds all eight from each
    set's topics, equal to the source in PostgreSQL; set verify agrees."""
    with db.cursor() as cur:
        cur.execute(SETUP)
        cur.execute(f'CREATE TYPE "{schema}".comp AS (a int, b text, c numeric, d date)')
        cols = ", ".join(f"{n} {t.replace('{s}', f'{chr(34)}{schema}{chr(34)}')}" for n, (t, _) in VALUES.items())
        cur.execute(f'CREATE TABLE "{schema}".hv (id int PRIMARY KEY, {cols})')
    _insert(db, schema, range(1, 5))
    sets = {"hva": "avro", "hvj": "json"}
    for name, encoding in sets.items():
        # debezium: pgshovel2's own forms (schemas: false), exact for every value (Debezium's Connect
        # forms are not: docs/wire.rst; the Connect form's values are checked in test_materialize_wire)
        extra = {"debezium": {"schemas": False}} if envelope == "debezium" else {}
        create_set(stack, cluster, tmp_path, name, schema, "hv", path, encoding, envelope=envelope, **extra)
    relays = [RelayProcess(stack, cluster, name, log_path=tmp_path / f"{name}.log") for name in sets]
    try:
        for relay in relays:
            relay.wait_for("snapshot done", timeout=300)
        _insert(db, schema, range(11, 15))
        for name in sets:
            caught_up(stack, cluster, name, timeout=300)
    finally:
        for relay in relays:
            relay.stop()
    for name, encoding in sets.items():
        rows = rebuilt(stack, cluster, name, envelope)
        assert sorted(rows) == [1, 2, 3, 4, 11, 12, 13, 14], encoding
        failures = compare_in_postgres(db, schema, set_table(stack, cluster, name), rows, encoding)
        assert not failures, f"{encoding}:\n" + "\n".join(failures)
        reports = verify(stack, cluster, name)
        assert all(r.ok for r in reports), [r.first_difference[:300] for r in reports if not r.ok]
