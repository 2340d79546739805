"""DDL the PL/pgSQL capture's cheap per-transaction check (the catalog signature
``pgshovel2_pl._sig_of``, sql/capture_pl/README.rst) must see without event triggers: a
column's type, a domain's and its base type's names, their schema's name, and a second
change within the transaction that already wrote the first; and DDL that changes no layout
(no S event, the generated function regenerated once)."""

import json
import uuid

from psycopg2 import sql

from pgshovel2.backends import plcapture
from tests.integration.test_plcapture import _capture_pl, _events


def _s_columns(cur, queue: str) -> list[tuple]:
    """(ev_type, {column name: (format_type, base type name)} for S events, else ev_data)."""
    return [(t, {c[0]: (c[2], c[4]) for c in json.loads(d)["columns"]} if t == "S" else d)
            for t, d, _, _ in _events(cur, queue)]


def _sig_current(cur, table: str) -> bool:
    """Whether the recorded signature of table's generated function is the live one."""
    cur.execute("SELECT s.sig = pgshovel2_pl._sig(s.rel) "
                "FROM pgshovel2_pl.layout_sig s WHERE s.rel = %s::regclass", (table,))
    return cur.fetchone()[0]


def test_type_domain_and_schema_changes_reach_the_queue(stack, db, schema):
    """ALTER COLUMN TYPE, renaming the enum a column's domain is over (the base type), the
    domain, and their schema: the next write appends an S event with the new type names
    before its row; SET STATISTICS and ALTER DOMAIN ADD CONSTRAINT append none; a domain
    renamed twice in one transaction, the first write in between: the next transaction
    appends the second name."""
    queue = f"plc_{uuid.uuid4().hex[:8]}"
    ts = f"{schema}_t"
    t = sql.Identifier(ts).as_string(db)
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        plcapture.ensure(cur)
        cur.execute(f'SET search_path = "{schema}", public')
        cur.execute(f"CREATE SCHEMA {t}; CREATE TYPE {t}.en AS ENUM ('x', 'y'); CREATE DOMAIN {t}.dm AS {t}.en")
        try:
            cur.execute(f"CREATE TABLE d (id int PRIMARY KEY, b int, m {t}.dm)")
            cur.execute("SELECT pgq.create_queue(%s)", (queue,))
            table = sql.Identifier(schema, "d").as_string(cur)
            _capture_pl(cur, (queue,), table, "1,2,3", "1", "all")
            cur.execute("INSERT INTO d VALUES (1, 1, 'x')")
            cur.execute("ALTER TABLE d ALTER COLUMN b TYPE bigint")
            cur.execute("INSERT INTO d VALUES (2, 5000000000, 'y')")
            cur.execute(f"ALTER TYPE {t}.en RENAME TO en2")
            cur.execute("INSERT INTO d VALUES (3, 3, 'x')")
            cur.execute(f"ALTER DOMAIN {t}.dm RENAME TO dm2")
            cur.execute("INSERT INTO d VALUES (4, 4, 'x')")
            t2 = sql.Identifier(f"{schema}_u").as_string(db)
            cur.execute(f"ALTER SCHEMA {t} RENAME TO {t2}")
            t = t2
            cur.execute("INSERT INTO d VALUES (5, 5, 'x')")
            cur.execute("ALTER TABLE d ALTER COLUMN b SET STATISTICS 50")
            cur.execute(f"ALTER DOMAIN {t}.dm2 ADD CONSTRAINT c CHECK (VALUE IS NOT NULL)")
            cur.execute("INSERT INTO d VALUES (6, 6, 'x')")
            regenerated = _sig_current(cur, table)
            cur.execute("BEGIN")
            cur.execute(f"ALTER DOMAIN {t}.dm2 RENAME TO dm3")
            cur.execute("INSERT INTO d VALUES (7, 7, 'x')")
            cur.execute(f"ALTER DOMAIN {t}.dm3 RENAME TO dm4")
            cur.execute("COMMIT")
            cur.execute("INSERT INTO d VALUES (8, 8, 'y')")
            events = _s_columns(cur, queue)
        finally:
            cur.execute("ROLLBACK")
            cur.execute(f"DROP SCHEMA IF EXISTS {t} CASCADE")
    assert [e[0] for e in events] == ["I", "S", "I", "S", "I", "S", "I", "S", "I", "I", "S", "I", "S", "I"], events
    assert events[2][1] == '[2,5000000000,"y"]'
    s = [e[1] for e in events if e[0] == "S"]
    assert s[0]["b"] == ("bigint", "int8") and s[0]["m"] == (f"{ts}.dm", "en")
    assert s[1]["m"] == (f"{ts}.dm", "en2")
    assert s[2]["m"] == (f"{ts}.dm2", "en2")
    assert s[3]["m"] == (f"{schema}_u.dm2", "en2")
    assert s[4]["m"] == (f"{schema}_u.dm3", "en2") and s[5]["m"] == (f"{schema}_u.dm4", "en2")
    assert regenerated
