"""`pgshovel tail --format pretty` against the real stack: a table with odd column names and
values of many types, relayed in both encodings and both envelopes; every row the command
prints must be PostgreSQL's own text of the row (each column's output function, TimeZone UTC)."""

import re
import signal

import pytest

from tests.helpers import caught_up, pgshovel, write_config

# column -> type; names needing quotes on purpose
COLUMNS = {"id": "int PRIMARY KEY", "person.name/sur": "text", "Mixed Case": "boolean", "naïve ümlaut": "real",
           "1st": "double precision", 'with"quote': "numeric(12,4)", "nu": "numeric", "i8": "bigint",
           "d": "date", "ts": "timestamp", "tz": "timestamptz", "t": "time", "ttz": "timetz", "iv": "interval",
           "b": "bytea", "j": "jsonb", "js": "json", "ia": "int[]", "ta": "text[]", "da": "date[]",
           "u": "uuid", "ip": "inet", "mood": "mood"}
BARE = {"Mixed Case", "naïve ümlaut", "1st", 'with"quote', "nu", "i8", "id"}  # numbers and booleans
ROWS = [
    "1, 'O''Brien é 🐘', true, 3.4028235e38, 0.1, -0.01, 0.1000000000000000000000000001, -9000000000, "
    "'2024-02-29', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.5+02', '23:59:59.999999', '12:34:56.5+03', "
    "'1 year 2 mons 3 days 04:05:06.5', '\\x00ff00', '{\"a\": [1, null, \"x\"]}', '{\"k\": 1}', '{1,NULL,3}', "
    "'{\"a b\",NULL,\"x\\\"y\",\"\"}', '{2024-01-01,NULL,infinity}', '6ecd8c99-4036-403d-bf84-cf8400f67836', "
    "'192.168.0.1/24', 'happy'",
    "2, E'line1\\nline2', false, 'NaN', '-Infinity', 12345678.5, 'NaN', 0, 'infinity', '0044-03-15 12:00:00.5 BC', "
    "'-infinity', '24:00:00', '00:00:00-05:30', '-1 days +02:00:00', '\\x', '[]', '[]', '{}', '{}', '{}', "
    "NULL, '::1', 'sad'",
    "3, " + ", ".join(["NULL"] * (len(COLUMNS) - 1)),
    "4, 'x', false, 1e-5, 1e15, 0, 1e-20, 1, '10000-01-01', '10000-01-01 00:00:00', '2000-01-01 00:00:00+00', "
    "'00:00:00', '23:59:59+14', '-3 mons -2 days -00:00:00.000001', '\\x00', 'true', '\"s\"', '{-1}', '{é}', "
    "'{0044-03-15 BC}', NULL, NULL, NULL",
]


def quote_ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def shown(column: str, text: str | None) -> str:
    """How the pretty form shows PostgreSQL's text of a value (docs/consumer.rst)."""
    if text is None:
        return "NULL"
    if column in BARE:
        return text
    if "\n" in text:
        return "E'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return "'" + text.replace("'", "''") + "'"


def pg_rows(db, schema: str) -> dict[int, str]:
    """id -> the shown row, from PostgreSQL's text of every column."""
    with db.cursor() as cur:
        cur.execute("SET TimeZone = 'UTC'")
        # format('%s') is the output function's text (boolean 't'; a cast to text would say 'true')
        cur.execute("SELECT " + ", ".join(f"CASE WHEN {quote_ident(c)} IS NOT NULL THEN format('%s', {quote_ident(c)}) "
                                          "END" for c in COLUMNS) +
                    f' FROM "{schema}"."Odd.Table" ORDER BY id')
        rows = cur.fetchall()
        cur.execute("RESET TimeZone")
    return {int(r[0]): "{" + ", ".join(f"{quote_ident(c)}: {shown(c, v)}" for c, v in zip(COLUMNS, r, strict=True))
            + "}" for r in rows}


def assert_lines(got: list[str], want: list[str]) -> None:
    """got == want, else fail showing where the first differing line differs."""
    for g, w in zip(got, want, strict=False):
        if g != w:
            at = next(i for i, (a, b) in enumerate(zip(g + "\0", w + "\0", strict=False)) if a != b)
            raise AssertionError(f"line differs at {at}:\n got: ...{g[max(0, at - 100):at + 80]}\n"
                                 f"want: ...{w[max(0, at - 100):at + 80]}")
    assert len(got) == len(want), (got, want)


@pytest.mark.parametrize(("encoding", "envelope"), [("avro", "row"), ("json", "row"), ("avro", "debezium"),
                                                    ("json", "debezium")])
def test_tail_pretty_prints_postgres_text(stack, cluster, db, schema, tmp_path, relay_factory, encoding, envelope):
    with db.cursor() as cur:
        cur.execute("DO $$ BEGIN CREATE TYPE mood AS ENUM ('happy', 'sad'); EXCEPTION WHEN duplicate_object "
                    "THEN NULL; END $$")
        cur.execute(f'CREATE TABLE "{schema}"."Odd.Table" (' +
                    ", ".join(f"{quote_ident(c)} {t}" for c, t in COLUMNS.items()) + ")")
        for row in ROWS:
            cur.execute(f'INSERT INTO "{schema}"."Odd.Table" VALUES ({row})')
    before = pg_rows(db, schema)
    name = f"tl{encoding[0]}{envelope[0]}"
    # debezium: pgshovel2's own forms (schemas: false), whose values are exact (Debezium's Connect
    # forms keep no interval months/days and no timetz offset: docs/wire.rst)
    extra = {"debezium": {"schemas": False}} if envelope == "debezium" else {}
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "Odd.Table"}], encoding=encoding,
                       envelope=envelope, topic_prefix=f"{name}{cluster}", **extra)
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    relay = relay_factory(name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT txid_current()")
        txid = cur.fetchone()[0]
        cur.execute(f'UPDATE "{schema}"."Odd.Table" SET "person.name/sur" = %s, "naïve ümlaut" = 1.1, iv = %s '
                    "WHERE id = 1", ("it's new", "-1 mon 2 days -3 hours"))
        cur.execute(f'DELETE FROM "{schema}"."Odd.Table" WHERE id = 2')
        cur.execute("COMMIT")
    after = pg_rows(db, schema)
    caught_up(stack, cluster, name)
    out = pgshovel(stack, cluster, "tail", name, "--from-beginning").stdout.splitlines()
    relay.stop(signal.SIGTERM)

    table = f"{schema}.Odd.Table"
    assert_lines(sorted(line for line in out if line.startswith("  r ")),
                 sorted(f"  r {table} {{id: {i}}} -> {row}" for i, row in before.items()))
    start = out.index(next(line for line in out if line.startswith(f"BEGIN txid {txid} ")))
    end = out.index("COMMIT", start)
    if envelope == "row":
        expected = [f"  u {table} {{id: 1}} -> {after[1]}", f"  d {table} {{id: 2}}"]
    else:
        expected = [f"  u {table} {{id: 1}} before {before[1]} -> {after[1]}",
                    f"  d {table} {{id: 2}} before {before[2]}", f"  d {table} {{id: 2}}"]
    assert_lines(out[start + 1:end], expected)
