"""The PL/pgSQL capture (schema pgshovel2_pl, sql/capture_pl) against the C capture
(sql/capture) on the real stack: the same statements feed a C trigger (queue A) and a PL
trigger (queue B) on the same tables, under several session settings, and the queued events
are compared byte for byte; encode_row too. Then DDL without event triggers, a
non-superuser install, and a set with ``capture: plpgsql`` relayed to Kafka."""

import json
import random
import threading
import uuid

import psycopg2
import pytest
from psycopg2 import sql

from pgshovel2.backends import plcapture, trigger
from tests.helpers import RelayProcess, assert_verified, caught_up, pgshovel, verify, write_config
from tests.integration.sweep_types import OWN_TYPES, sweep_columns
from tests.integration.test_types import SPECIAL

SETTINGS = [  # session settings the statements run under: the events must not depend on them
    {},
    {"DateStyle": "SQL, DMY", "TimeZone": "America/St_Johns", "IntervalStyle": "sql_standard",
     "extra_float_digits": "0", "bytea_output": "escape"},
    {"DateStyle": "German", "TimeZone": "Asia/Kathmandu", "IntervalStyle": "postgres_verbose",
     "extra_float_digits": "-15", "bytea_output": "hex"},
    {"DateStyle": "Postgres, MDY", "TimeZone": "UTC", "IntervalStyle": "iso_8601", "extra_float_digits": "3"},
]
ODD = 'Odd "tbl" ü'  # a quoted table name with a space, a quote and non-ASCII
ODD_COLS = '"ID" int PRIMARY KEY, "a b" text, "q""uote" float8, "ünï" date[], "MixedCase" int, skipped text'


def _events(cur, queue: str) -> list[tuple]:
    cur.execute("SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = %s", (queue,))
    cur.execute(f"SELECT ev_type, ev_data, ev_extra1, ev_extra2 FROM {cur.fetchone()[0]} ORDER BY ev_id")
    return cur.fetchall()


def _capture_both(cur, queues: tuple[str, ...], table: str, cols: str, keys: str, mode: str) -> None:
    """C trigger into queues[0], the generated PL row trigger (what sets use) into queues[1],
    and, when given, the generic pgshovel2_pl.capture() (EXECUTE per row) into queues[2];
    each with its TRUNCATE trigger."""
    target = sql.SQL(table)
    generated = "pgshovel2_pl." + plcapture.register(cur, queues[1], table, cols, keys, mode)
    if len(queues) > 2:
        plcapture.register(cur, queues[2], table, cols, keys, mode)
    functions = ("pgshovel2.capture", generated, "pgshovel2_pl.capture")
    for i, (queue, function) in enumerate(zip(queues, functions[:len(queues)], strict=True)):
        args = [sql.Literal(v) for v in (queue, table, cols, keys, mode)]
        cur.execute(sql.SQL("CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW "
                            "EXECUTE FUNCTION {}({})").format(sql.Identifier(f"cap{i}"), target, sql.SQL(function),
                                                              sql.SQL(", ").join(args)))
        cur.execute(sql.SQL("CREATE TRIGGER {} AFTER TRUNCATE ON {} FOR EACH STATEMENT "
                            "EXECUTE FUNCTION {}({}, {}, '', '', 'all')").format(
                                sql.Identifier(f"cap{i}_t"), target, sql.SQL(function), sql.Literal(queue),
                                sql.Literal(table)))


def _setup(cur, schema: str, queues: tuple[str, ...], capture=None) -> tuple[str, dict, str, list[str]]:
    """The tables and their captures (capture: a function like :func:`_capture_both`, the
    default; :func:`_capture_pl` needs no C extension); returns (forms attnums, sweep values by
    column, forms sweep columns, the type of each forms column in attnum order)."""
    cur.execute("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore")
    if capture is None:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        trigger.ensure_extension(cur)
    plcapture.ensure(cur)
    cur.execute(f'SET search_path = "{schema}", public')
    cur.execute(OWN_TYPES)
    cols, values, _ = sweep_columns(cur, schema)
    special = [(f"s_{n}", t) for n, t, _ in SPECIAL]
    defs = [f"{c.name} {c.pg_type}" for c in cols] + [f"{n} {t}" for n, t in special]
    cur.execute(f"CREATE TABLE forms (id int PRIMARY KEY, {', '.join(defs)})")
    cur.execute(f'CREATE TABLE "{ODD.replace(chr(34), chr(34) * 2)}" ({ODD_COLS})')
    cur.execute("CREATE TABLE bm (k int, v float4, w interval)")
    for q in queues:
        cur.execute("SELECT pgq.create_queue(%s)", (q,))
    attnums = ",".join(str(i) for i in range(1, len(defs) + 2))
    odd = sql.Identifier(schema, ODD).as_string(cur)
    capture = capture or _capture_both
    capture(cur, queues, sql.Identifier(schema, "forms").as_string(cur), attnums, "1", "all")
    capture(cur, queues, odd, "1,2,3,4,5", "5,1", "subset")
    capture(cur, queues, sql.Identifier(schema, "bm").as_string(cur), "1,2,3", "", "all,before")
    types = ["int", *(c.pg_type for c in cols), *(t for _, t in special)]
    return attnums, values, ", ".join(c.name for c in cols), types


def _capture_pl(cur, queues: tuple[str, ...], table: str, cols: str, keys: str, mode: str) -> None:
    """The generated PL row trigger and the TRUNCATE trigger into queues[0], as set create makes them."""
    function = sql.Identifier("pgshovel2_pl", plcapture.register(cur, queues[0], table, cols, keys, mode))
    args = sql.SQL(", ").join(sql.Literal(v) for v in (queues[0], table, cols, keys, mode))
    cur.execute(sql.SQL("CREATE TRIGGER cap AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW "
                        "EXECUTE FUNCTION {}({})").format(sql.SQL(table), function, args))
    cur.execute(sql.SQL("CREATE TRIGGER cap_t AFTER TRUNCATE ON {} FOR EACH STATEMENT "
                        "EXECUTE FUNCTION pgshovel2_pl.capture({}, {}, '', '', 'all')").format(
                            sql.SQL(table), sql.Literal(queues[0]), sql.Literal(table)))


def _statements(cur, values: dict, names: str, base: int) -> None:
    """Every kind of change on the three tables (ids from base)."""
    cur.execute(f"INSERT INTO forms (id, {names}) VALUES ({base}, {', '.join(values.values())})")
    for row in range(4):
        special = ", ".join(f"s_{n}" for n, _, _ in SPECIAL)
        cur.execute(f"INSERT INTO forms (id, {special}) VALUES ({base + row + 1}, "
                    f"{', '.join(vals[row] for _, _, vals in SPECIAL)})")
    cur.execute(f"INSERT INTO forms (id) VALUES ({base + 5})")
    cur.execute(f"UPDATE forms SET s_f8 = 'NaN' WHERE id = {base + 1}")
    cur.execute(f"UPDATE forms SET id = id + 100 WHERE id = {base + 2}")
    cur.execute(f"UPDATE forms SET s_f8 = s_f8 WHERE id = {base + 3}")  # no change: 'all' still writes
    cur.execute(f"DELETE FROM forms WHERE id = {base + 4}")
    odd = sql.Identifier(ODD).as_string(cur)
    cur.execute(f"""INSERT INTO {odd} VALUES ({base}, E'x\\by\\f\\\\b', '-0', '{{2024-02-29,infinity}}', 7, 's'),
                    ({base + 1}, NULL, 'Infinity', '[0:0]={{-infinity}}', NULL, NULL)""")
    cur.execute(f'UPDATE {odd} SET skipped = \'t\' WHERE "ID" = {base}')  # subset: nothing captured changed
    cur.execute(f'UPDATE {odd} SET "q""uote" = \'0\' WHERE "ID" = {base}')  # -0 -> 0: binary change
    cur.execute(f'UPDATE {odd} SET "MixedCase" = 8 WHERE "ID" = {base}')  # key change
    cur.execute(f'UPDATE {odd} SET "a b" = "a b" WHERE "ID" = {base + 1}')  # subset, same value
    cur.execute(f'DELETE FROM {odd} WHERE "ID" = {base + 1}')
    cur.execute(f"INSERT INTO bm VALUES ({base}, 0.1, '1 mon -1 day 00:00:00.000001'), (NULL, NULL, NULL)")
    cur.execute(f"UPDATE bm SET v = v WHERE k = {base}")  # before always, no key
    cur.execute("DELETE FROM bm WHERE k IS NULL")


def test_pl_capture_writes_the_c_events_byte_for_byte(stack, db, schema):
    """The C, generated PL and generic PL triggers on the same tables, statements over every
    sweep type and the special values, quoted names, a column subset, key updates, ',before',
    TRUNCATE, under several session settings: the same events (type, data, tag, before-image)
    in the same order; and encode_row C vs PL on the same rows."""
    queues = tuple(f"plc_{x}_{uuid.uuid4().hex[:8]}" for x in "abc")
    with db.cursor() as cur:
        attnums, values, names, _ = _setup(cur, schema, queues)
        snapshots = []
        for i, settings in enumerate(SETTINGS):
            for name, value in settings.items():
                cur.execute("SELECT set_config(%s, %s, false)", (name, value))
            _statements(cur, values, names, 1000 * (i + 1))
            cur.execute(f"SELECT pgshovel2.encode_row(f, '{{{attnums}}}'), "
                        f"pgshovel2_pl.encode_row(f, '{{{attnums}}}') FROM forms f ORDER BY id")
            snapshots += cur.fetchall()
            cur.execute("TRUNCATE forms, bm")
            cur.execute("RESET ALL")
            cur.execute(f'SET search_path = "{schema}", public')
        by_c, by_pl, by_generic = (_events(cur, q) for q in queues)
    kinds = [e[0] for e in by_c]
    assert len(by_c) > 60 and {"I", "U", "D", "T"} <= set(kinds), kinds
    assert any(e[3] is not None and e[0] == "U" for e in by_c)  # key changes and ',before' have before-images
    for n, (c, pl) in enumerate(zip(by_c, by_pl, strict=False)):  # the first difference, then the lengths
        assert pl == c, f"event {n}: C {c!r}\nPL {pl!r}"
    assert len(by_pl) == len(by_c)
    assert by_generic == by_c
    assert len(snapshots) == 4 * 5 and all(a == b for a, b in snapshots), [s for s in snapshots if s[0] != s[1]][:1]


def _random_text(rnd: random.Random, longest: int) -> str:
    """Text mixing every control character, quotes, backslashes, non-ASCII and astral characters,
    in runs: what the C encoder copies whole and what it escapes."""
    pick = [lambda: chr(rnd.randint(1, 31)), lambda: rnd.choice('"\\'), lambda: chr(rnd.randint(32, 126)),
            lambda: chr(rnd.randint(0x80, 0x2FFF)), lambda: "\U0001F418"]
    return "".join(rnd.choice(pick)() for _ in range(rnd.choice([0, 1, 7, 60, longest])))


def _random_row(rnd: random.Random) -> list:
    """A row of test_c_and_pl_encode_random_values_alike's table r, a twentieth of its values NULL."""
    ints = [(-2**15, 2**15 - 1), (-2**31, 2**31 - 1), (-2**63, 2**63 - 1), (0, 2**32 - 1)]
    row = [rnd.choice([lo, hi, 0, rnd.randint(lo, hi)]) for lo, hi in ints]
    row += [_random_text(rnd, 300), _random_text(rnd, 40)[:40], _random_text(rnd, 9)[:9],
            str(uuid.UUID(int=rnd.getrandbits(128))), rnd.choice(["infinity", "2024-02-29", "0044-03-15 BC"]),
            rnd.choice(["00:00", "23:59:59.999999"]), rnd.choice(["-infinity", "2024-01-01 00:00:00.000001+05:30"]),
            rnd.choice(["1 year 2 mons -3 days 04:05:06.789", "-178000000 years", "-00:00:00.000001"]),
            _random_text(rnd, 3000)]
    return [None if rnd.random() < 0.05 else v for v in row]


def test_c_and_pl_encode_random_values_alike(stack, db, schema):
    """encode_row() of the C capture (its integer, text, uuid and interval forms written without
    the types' output functions) and of the PL/pgSQL capture, over 2,000 random rows: the same text."""
    rnd = random.Random(1205)
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        trigger.ensure_extension(cur)
        plcapture.ensure(cur)
        cur.execute(f'CREATE TABLE "{schema}".r (i2 int2, i4 int4, i8 int8, o oid, t text, v varchar(40), '
                    "b char(9), u uuid, d date, tm time, tz timestamptz, iv interval, big text)")
        cur.executemany(f'INSERT INTO "{schema}".r VALUES ({", ".join(["%s"] * 13)})',
                        [_random_row(rnd) for _ in range(2000)])
        attnums = "'{1,2,3,4,5,6,7,8,9,10,11,12,13}'::int2[]"
        cur.execute(f"SELECT pgshovel2.encode_row(r, {attnums}), pgshovel2_pl.encode_row(r, {attnums}) "
                    f'FROM "{schema}".r r')
        pairs = cur.fetchall()
    assert len(pairs) == 2000 and any("\\u0001" in c for c, _ in pairs) and any('\\"' in c for c, _ in pairs)
    assert [(c, pl) for c, pl in pairs if c != pl][:1] == []

def _s_events(cur, queue: str) -> list[tuple]:
    return [(t, json.loads(d) if t == "S" else d, x2) for t, d, _, x2 in _events(cur, queue)]


def test_ddl_reaches_the_queue_at_its_position(stack, db, schema):
    """ADD / RENAME / DROP COLUMN of a PL-captured table, each in its own transaction: the next
    write appends an S event (the same layout as the C extension's event trigger writes) before
    its row, and encodes the row in the new layout; concurrent first writers after a DDL write
    one S event, before both rows."""
    queues = (f"plc_a_{uuid.uuid4().hex[:8]}", f"plc_b_{uuid.uuid4().hex[:8]}")
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        trigger.ensure_extension(cur)
        plcapture.ensure(cur)
        cur.execute(f'SET search_path = "{schema}", public')
        cur.execute("CREATE TABLE d (id int PRIMARY KEY, a text, b int)")
        for q in queues:
            cur.execute("SELECT pgq.create_queue(%s)", (q,))
        _capture_both(cur, queues, sql.Identifier(schema, "d").as_string(cur), "1,2,3", "1", "all")
        cur.execute("INSERT INTO d VALUES (1, 'x', 1)")
        cur.execute("ALTER TABLE d ADD COLUMN c float8 DEFAULT 0.5")
        cur.execute("INSERT INTO d VALUES (2, 'y', 2, '-0')")
        cur.execute("ALTER TABLE d RENAME COLUMN a TO a2")
        cur.execute("UPDATE d SET b = 3 WHERE id = 1")
        cur.execute("ALTER TABLE d DROP COLUMN b")
        _concurrent_inserts(stack, schema, [(3, "z"), (4, "w")])
        by_c, by_pl = _s_events(cur, queues[0]), _s_events(cur, queues[1])
    assert [e[0] for e in by_pl] == ["I", "S", "I", "S", "U", "S", "I", "I"], by_pl
    assert [e[:2] for e in by_pl] == [e[:2] for e in by_c]  # same rows, same layouts in the same places
    assert by_pl[2][1] == '[2,"y",2,-0.0]' and by_pl[6][1] in ('[3,"z",0.5]', '[4,"w",0.5]')
    assert [c[0] for c in by_pl[5][1]["columns"]] == ["id", "a2", "c"]
    assert all("not known" in json.loads(e[2]) for e in by_pl if e[0] == "S")


def _concurrent_inserts(stack, schema: str, rows: list[tuple[int, str]]) -> None:
    """Insert rows from concurrent transactions: the first holds its transaction open until the
    others have started their insert (they wait on the layout record's lock)."""
    conns = [psycopg2.connect(stack.dsn) for _ in rows]
    try:
        first = conns[0].cursor()
        first.execute(f'INSERT INTO "{schema}".d (id, a2) VALUES (%s, %s)', rows[0])
        threads = [threading.Thread(target=_insert_commit, args=(c, schema, r))
                   for c, r in zip(conns[1:], rows[1:], strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(0.5)
        conns[0].commit()
        for t in threads:
            t.join(30)
    finally:
        for c in conns:
            c.close()


def _insert_commit(conn, schema: str, row: tuple[int, str]) -> None:
    with conn.cursor() as cur:
        cur.execute(f'INSERT INTO "{schema}".d (id, a2) VALUES (%s, %s)', row)
    conn.commit()


@pytest.fixture
def owner_db(stack):
    """(dsn of a fresh database, owned by a new non-superuser role that may use PgQ, role name)."""
    role, dbname = f"plc_{uuid.uuid4().hex[:8]}", f"plc_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(stack.dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        cur.execute(f"CREATE DATABASE {dbname} OWNER {role}")
    dsn = stack.dsn.replace("dbname=pgshovel", f"dbname={dbname}")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:  # PgQ's own installation is not what this test is about
        cur.execute(f"CREATE EXTENSION pgq; CREATE EXTENSION pgshovel2; GRANT pgq_admin, pgq_writer TO {role}")
    conn.close()
    yield dsn.replace("user=postgres", f"user={role}"), dsn, role
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
        cur.execute(f"DROP ROLE {role}")
    admin.close()


def test_installs_and_captures_as_a_non_superuser_table_owner(owner_db):
    """pgshovel2_pl installed by a role without superuser, on its own table; its writes are
    queued with the rows the C encoder gives for them."""
    dsn, admin_dsn, role = owner_db
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cur.fetchone() == (False,)
        plcapture.ensure(cur)
        cur.execute("CREATE TABLE t (id int PRIMARY KEY, f float8, d date, b bytea, iv interval)")
        cur.execute("SELECT pgq.create_queue('q')")
        function = plcapture.register(cur, "q", '"public"."t"', "1,2,3,4,5", "1", "all")
        cur.execute(f"CREATE TRIGGER c AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW "
                    f"EXECUTE FUNCTION pgshovel2_pl.{function}('q', '\"public\".\"t\"', '1,2,3,4,5', '1', 'all')")
        cur.execute("INSERT INTO t VALUES (1, '-0', 'infinity', '\\x01', '-1 day'), (2, 1e-7, '1999-12-31', '', '1h')")
        cur.execute("UPDATE t SET id = 3 WHERE id = 2")
    conn.close()
    admin = psycopg2.connect(admin_dsn)
    with admin.cursor() as cur:
        events = _events(cur, "q")
        cur.execute("SELECT pgshovel2.encode_row(t, '{1,2,3,4,5}') FROM t ORDER BY id")
        rows = [r[0] for r in cur.fetchall()]
    admin.close()
    assert [e[0] for e in events] == ["I", "I", "U"]
    assert [events[0][1], events[2][1]] == rows and events[2][3] == events[1][1]
    assert rows[0] == '[1,-0.0,2147483647,"01",[0,-1,0]]'


def test_plpgsql_set_relayed_to_kafka_equals_the_table(stack, cluster, db, schema, tmp_path):
    """A trigger set with capture: plpgsql (set create says so): snapshot, writes, a key update,
    ADD COLUMN mid-stream, TRUNCATE-free deletes; the topic state equals the table."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".e (id int PRIMARY KEY, f float8, d date, t text, a float8[])')
        cur.execute(f"INSERT INTO \"{schema}\".e SELECT i, i / 3.0, '2024-01-01'::date + i, 'r' || i, "
                    f"ARRAY[i, -0.0] FROM generate_series(1, 50) i")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "e"}], capture="plpgsql")
    out = pgshovel(stack, cluster, "set", "create", "pl", str(cfg)).stdout
    assert "capture plpgsql: set config 'capture: plpgsql'" in out, out
    relay = RelayProcess(stack, cluster, "pl", log_path=tmp_path / "relay.log")
    try:
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO \"{schema}\".e VALUES (100, 'NaN', 'infinity', E'q\\\"\\n', '[0:1]={{1,2}}')")
            cur.execute(f'UPDATE "{schema}".e SET id = id + 1000 WHERE id <= 5')
            cur.execute(f'DELETE FROM "{schema}".e WHERE id BETWEEN 10 AND 15')
            cur.execute(f'ALTER TABLE "{schema}".e ADD COLUMN n int')
            cur.execute(f'UPDATE "{schema}".e SET n = id WHERE id > 40')
        caught_up(stack, cluster, "pl")
    finally:
        relay.stop()
    assert_verified(verify(stack, cluster, "pl"))


PGQ_PL_ONLY = "/usr/share/postgresql/15/contrib/pgq_pl_only.sql"  # PgQ without C (Debian's pgq package)


def _pl_events(cur, schema: str, queue: str) -> tuple[list[tuple], list[str]]:
    """The PL events of the same statements as the C-vs-PL test (every SETTINGS round), and the
    type of each forms column; cur's database has PgQ, cur's role may use it."""
    _, values, names, types = _setup(cur, schema, (queue,), capture=_capture_pl)
    for i, settings in enumerate(SETTINGS):
        for name, value in settings.items():
            cur.execute("SELECT set_config(%s, %s, false)", (name, value))
        _statements(cur, values, names, 1000 * (i + 1))
        cur.execute("TRUNCATE forms, bm")
        cur.execute("RESET ALL")
        cur.execute(f'SET search_path = "{schema}", public')
    return _events(cur, queue), types


def _by_type(events: list[tuple], types: list[str], tag: str) -> list[tuple]:
    """The events with the row arrays of table tag as {column type: value's JSON text}: the
    sweep's column set differs between majors; the types both have must be written alike."""
    keys = [f"{t}#{types[:i].count(t)}" for i, t in enumerate(types)]  # a type may occur twice

    def keyed(data):
        if data is None:
            return None
        return dict(zip(keys, (json.dumps(v) for v in json.loads(data, parse_float=str)), strict=True))
    return [(t, keyed(d), x1, keyed(x2)) if x1 == tag else (t, d, x1, x2) for t, d, x1, x2 in events]


def test_pl_capture_on_stock_servers_equals_pg15(stack, stock_pg, db, schema):
    """pgshovel2_pl installed and used by the non-superuser app on stock PostgreSQL (14, 17; PgQ
    from its PL-only script, loaded by the admin) writes, for the statements of the C-vs-PL test,
    the events the PL capture writes on PG 15 (proven equal to C above): the same events in the
    same order; forms rows compared by column type over the types both majors have."""
    stock_pg.reset()
    queue = f"plc_{uuid.uuid4().hex[:8]}"
    admin = stock_pg.connect(admin=True)
    with admin.cursor() as cur, open(PGQ_PL_ONLY) as script:
        cur.execute(script.read())
        cur.execute("GRANT pgq_admin, pgq_writer TO app")
        cur.execute("GRANT SELECT ON pg_statistic_ext_data TO app")  # the sweep's pg_ndistinct etc. values
        cur.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION app')
    admin.close()
    conn = stock_pg.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cur.fetchone() == (False,)
        got, got_types = _pl_events(cur, schema, queue)
    conn.close()
    with db.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        want, want_types = _pl_events(cur, schema, queue)
    # values, not their forms, differ: a clock reading, and a node tree with the server's own query positions
    volatile = {"information_schema.time_stamp#0", "information_schema.time_stamp[]#0", "pg_node_tree#0"}
    common = ({f"{t}#{got_types[:i].count(t)}" for i, t in enumerate(got_types)}
              & {f"{t}#{want_types[:i].count(t)}" for i, t in enumerate(want_types)}) - volatile
    assert len(common) > 150, sorted(set(got_types) ^ set(want_types))
    tag = sql.Identifier(schema, "forms").as_string(db)

    def restricted(events, types):
        return [tuple({k: v for k, v in f.items() if k in common} if isinstance(f, dict) else f for f in e)
                for e in _by_type(events, types, tag)]
    assert len(got) == len(want) and len(got) > 60
    for n, (g, w) in enumerate(zip(restricted(got, got_types), restricted(want, want_types), strict=True)):
        diff = {k: (g[1][k], w[1][k]) for k in g[1] if g[1][k] != w[1][k]} if isinstance(g[1], dict) else None
        assert g == w, f"event {n}: stock {stock_pg.major} vs pg15: {diff or (g, w)!r}"
