"""No escalation through search_path (issue #67, CVE-2018-1058 pattern): no function of ours -- the
C extension's (sql/capture), the decoder extension's (sql/decoder), pgshovel2_pl's and the ones it
generates per table and queue -- resolves an operator or a function through its caller's
search_path. A role that may create objects in a schema on that path makes an operator
``=(int4,int4)`` / ``=(oid,regclass)`` that records who runs it: neither a writer of a captured
table (whose row runs the SECURITY DEFINER capture function as the set's role) nor a superuser
issuing DDL on a captured table (the event triggers run as the DDL's role) runs it."""

import uuid

import psycopg2
import pytest

from tests.helpers import pgshovel, write_config

PINNED = "search_path=pg_catalog, pg_temp"
OUR_SCHEMAS = ("pgshovel2", "pgshovel2_pl", "pgshovel2_decoder")


@pytest.fixture
def attacker(stack, db):
    """A LOGIN role with its own schema (named as the role) holding operators =(int4,int4) and
    =(oid,regclass) and a function to_json(int2[]) that append current_user to <schema>.ran (which
    anyone may write) before answering as the built-in ones do; the role's name."""
    name = f"evil{uuid.uuid4().hex[:8]}"
    with db.cursor() as cur:
        cur.execute(f"CREATE ROLE {name} LOGIN; CREATE SCHEMA {name} AUTHORIZATION {name}")
    conn = psycopg2.connect(stack.dsn.replace("user=postgres", f"user={name}"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"""
            CREATE TABLE {name}.ran (who text, what text);
            GRANT USAGE ON SCHEMA {name} TO PUBLIC; GRANT INSERT ON {name}.ran TO PUBLIC;
            CREATE FUNCTION {name}.eq4(a int4, b int4) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO {name}.ran VALUES (current_user, '=(int4,int4)');
                  RETURN a OPERATOR(pg_catalog.=) b; END $$;
            CREATE OPERATOR {name}.= (LEFTARG = int4, RIGHTARG = int4, FUNCTION = {name}.eq4);
            CREATE FUNCTION {name}.eqoid(a oid, b regclass) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO {name}.ran VALUES (current_user, '=(oid,regclass)');
                  RETURN a OPERATOR(pg_catalog.=) b::oid; END $$;
            CREATE OPERATOR {name}.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = {name}.eqoid);
            CREATE FUNCTION {name}.to_json(v int2[]) RETURNS json LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO {name}.ran VALUES (current_user, 'to_json(int2[])'); RETURN pg_catalog.to_json(v); END $$;
        """)
    conn.close()
    yield name
    with db.cursor() as cur:
        cur.execute(f"DROP SCHEMA {name} CASCADE; DROP OWNED BY {name}; DROP ROLE {name}")


def _ran(db, attacker: str) -> list[tuple]:
    with db.cursor() as cur:
        cur.execute(f"SELECT who, what FROM {attacker}.ran")
        return cur.fetchall()


def test_every_function_of_ours_pins_search_path(stack, cluster, db, schema, tmp_path):
    """Catalog check, after sets of every capture path installed what they install (the generated
    functions included): every SQL and PL/pgSQL function in our schemas pins search_path. The C
    functions (capture, encode_row) look no name up (sql/capture/pgshovel2--0.3--0.4.sql)."""
    tables = []
    for i, (backend, extra) in enumerate([("trigger", {"capture": "c"}), ("trigger", {"capture": "plpgsql"}),
                                          ("logical", {"decoder": "pgshovel2"})]):
        with db.cursor() as cur:
            cur.execute(f'CREATE TABLE "{schema}".t{i} (id int PRIMARY KEY, v text)')
        tables.append(f"t{i}")
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": f"t{i}"}], backend=backend,
                           topic_prefix=f"p{i}{cluster}", **extra)
        pgshovel(stack, cluster, "set", "create", f"p{i}", str(cfg))
    with db.cursor() as cur:
        cur.execute("SELECT p.oid::regprocedure::text, l.lanname, coalesce(p.proconfig, '{}') FROM pg_proc p "
                    "JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang "
                    "WHERE n.nspname = ANY(%s) ORDER BY 1", (list(OUR_SCHEMAS),))
        rows = cur.fetchall()
    assert any(name.startswith("pgshovel2_pl.c") for name, _, _ in rows), "no generated capture function"
    assert any(name.startswith("pgshovel2_pl.q") for name, _, _ in rows), "no generated queue function"
    unpinned = [name for name, lang, config in rows if lang != "c" and PINNED not in config]
    assert unpinned == [], unpinned
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                    "WHERE l.lanname = 'c' AND p.pronamespace::regnamespace::text = ANY(%s)", (list(OUR_SCHEMAS),))
        assert cur.fetchone()[0] == 3  # pgshovel2.capture, pgshovel2.encode_row, pgshovel2_decoder.encode_row


def test_a_writer_cannot_run_code_as_the_set_role(stack, cluster, db, schema, tmp_path, attacker):
    """PL/pgSQL capture: the writer's row runs the SECURITY DEFINER capture functions as the set's
    role (here the superuser); the writer's own search_path, its schema first, is not theirs."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".w (id int PRIMARY KEY, n int, v text)')
        cur.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {attacker}; '
                    f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{schema}".w TO {attacker}')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "w"}], capture="plpgsql",
                       topic_prefix=f"esc{cluster}")
    pgshovel(stack, cluster, "set", "create", "esc", str(cfg))
    conn = psycopg2.connect(stack.dsn.replace("user=postgres", f"user={attacker}"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"SET search_path = {attacker}, pg_catalog")
        cur.execute(f'INSERT INTO "{schema}".w VALUES (1, 1, $$a$$), (2, 2, $$b$$)')
        cur.execute(f'UPDATE "{schema}".w SET n = n + 1 WHERE id = 1')
        cur.execute(f'DELETE FROM "{schema}".w WHERE id = 2')
        cur.execute("SELECT 1 = 1")  # the operator works where it is asked for: the writer's own query
    conn.close()
    ran = _ran(db, attacker)
    assert ran and all(who == attacker for who, _ in ran), ran


def test_ddl_by_a_superuser_runs_no_code_of_others(stack, cluster, db, schema, tmp_path, attacker):
    """C capture: the event triggers (ALTER TABLE, DROP TABLE) run as the superuser issuing the DDL,
    with its search_path, on which the attacker's schema is."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".d (id int PRIMARY KEY, v text)')
        cur.execute(f'CREATE TABLE "{schema}".gone (id int PRIMARY KEY)')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "d"}, {"schema": schema, "name": "gone"}],
                       capture="c", topic_prefix=f"ddl{cluster}", encoding="json")
    pgshovel(stack, cluster, "set", "create", "ddl", str(cfg))
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"SET search_path = {attacker}, public")
        cur.execute(f'ALTER TABLE "{schema}".d ADD COLUMN extra int')
        cur.execute(f'INSERT INTO "{schema}".d VALUES (1, $$x$$, 7)')
        cur.execute(f'DROP TABLE "{schema}".gone')
    conn.close()
    assert _ran(db, attacker) == []
    with db.cursor() as cur:  # the event trigger did its work: the capture trigger follows the new column
        cur.execute(f"SELECT (pgshovel2.trigger_args(tgargs))[3] FROM pg_trigger WHERE tgrelid = "
                    f"'\"{schema}\".d'::regclass AND tgname LIKE 'pgshovel2%%' AND tgname NOT LIKE '%%\\_t'")
        assert cur.fetchall() == [("1,2,3",)]
