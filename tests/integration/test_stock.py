"""The stock PostgreSQL servers (tests/stock.py, scripts/pg-stock.sh) are what a managed service
gives: logical decoding with built-in plugins, an application role that owns its database and may
replicate but is no superuser, and none of our C. PgQ is not there either: Zonky's binaries do
not ship it, so a PgQ on these servers can only be PgQ's PL-only build
(/usr/share/postgresql/15/contrib/pgq_pl_only.sql), run as plain SQL by the owner."""

import struct

import psycopg2
import psycopg2.errors
import pytest
from psycopg2.extras import LogicalReplicationConnection

from tests.stock import on_every_server as stack  # noqa: F401 (the last test runs on every server)


@pytest.fixture
def fresh(stock_pg):
    """The stock server with an empty database pgshovel owned by app."""
    stock_pg.reset()
    return stock_pg


def test_version_and_managed_service_settings(stock_pg):
    (num,), = stock_pg.query("SELECT current_setting('server_version_num')::int")
    assert num // 10000 == stock_pg.major
    settings = dict(stock_pg.query("SELECT name, setting FROM pg_settings WHERE name IN ('wal_level', "
                                   "'max_prepared_transactions', 'max_wal_senders', 'max_replication_slots', "
                                   "'listen_addresses')"))
    assert settings["wal_level"] == "logical"
    assert settings["max_prepared_transactions"] == "0"
    assert int(settings["max_wal_senders"]) >= 10 and int(settings["max_replication_slots"]) >= 10
    assert settings["listen_addresses"] == "127.0.0.1"


def test_app_owns_the_database_and_may_replicate_but_is_no_superuser(stock_pg):
    (user, sup, repl, createrole, owner), = stock_pg.query(
        "SELECT current_user, rolsuper, rolreplication, rolcreaterole, pg_get_userbyid(datdba) "
        "FROM pg_roles, pg_database WHERE rolname = current_user AND datname = current_database()")
    assert (user, sup, repl, createrole, owner) == ("app", False, True, False, "app")
    (admin_super,), = stock_pg.query("SELECT rolsuper FROM pg_roles WHERE rolname = current_user", admin=True)
    assert admin_super


def pgoutput_messages(rows) -> dict[str, list[bytes]]:
    """pgoutput protocol 1 messages (bytea rows of pg_logical_slot_*_binary_changes) by type byte."""
    by_type: dict[str, list[bytes]] = {}
    for (data,) in rows:
        data = bytes(data)
        by_type.setdefault(chr(data[0]), []).append(data)
    return by_type


def insert_values(msg: bytes) -> list[bytes | None]:
    """The new tuple of a pgoutput Insert message: 'I', relid int32, 'N', ncols int16, columns."""
    assert msg[0:1] == b"I" and msg[5:6] == b"N"
    (ncols,), pos, values = struct.unpack_from("!h", msg, 6), 8, []
    for _ in range(ncols):
        kind, pos = msg[pos:pos + 1], pos + 1
        if kind == b"t":
            (length,) = struct.unpack_from("!i", msg, pos)
            values.append(msg[pos + 4:pos + 4 + length])
            pos += 4 + length
        else:
            values.append(None)
    return values


def test_app_reads_its_publication_through_a_pgoutput_slot(fresh):
    conn = fresh.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        cur.execute("CREATE PUBLICATION pub FOR TABLE t")
        cur.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        cur.execute("INSERT INTO t VALUES (1, 'hello')")
        args = "'proto_version', '1', 'publication_names', 'pub'"
        cur.execute(f"SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, {args})")
        peeked = pgoutput_messages(cur.fetchall())
        assert sorted(peeked) == ["B", "C", "I", "R"]
        assert b"public\x00t\x00" in peeked["R"][0]
        assert insert_values(peeked["I"][0]) == [b"1", b"hello"]
        cur.execute(f"SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, {args})")
        assert pgoutput_messages(cur.fetchall()) == peeked
        cur.execute(f"SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, {args})")
        assert cur.fetchall() == []
    conn.close()


def test_built_in_output_plugins_only(fresh):
    with fresh.connect().cursor() as cur:
        cur.execute("CREATE TABLE t (id int PRIMARY KEY)")
        cur.execute("SELECT pg_create_logical_replication_slot('td', 'test_decoding')")
        cur.execute("INSERT INTO t VALUES (42)")
        cur.execute("SELECT data FROM pg_logical_slot_get_changes('td', NULL, NULL)")
        assert "table public.t: INSERT: id[integer]:42" in [r[0] for r in cur.fetchall()]
    with fresh.connect(admin=True).cursor() as cur:
        with pytest.raises(psycopg2.errors.UndefinedFile, match="pgshovel2_decoder"):
            cur.execute("SELECT pg_create_logical_replication_slot('ours', 'pgshovel2_decoder')")


@pytest.mark.parametrize("admin", [False, True], ids=["app", "postgres"])
def test_replication_connections_on_loopback(stock_pg, admin):
    dsn = stock_pg.admin_dsn if admin else stock_pg.dsn
    conn = psycopg2.connect(dsn, connection_factory=LogicalReplicationConnection)
    try:
        with conn.cursor() as cur:
            cur.execute("IDENTIFY_SYSTEM")
            (_system_id, timeline, _lsn, dbname), = cur.fetchall()
        assert (timeline, dbname) == (1, "pgshovel")
    finally:
        conn.close()


# PG 14: "could not open extension control file" (58P01); 15+: "extension ... is not available" (0A000)
NOT_AVAILABLE = (psycopg2.errors.UndefinedFile, psycopg2.errors.FeatureNotSupported)


def test_neither_our_c_nor_pgq_is_there(stock_pg):
    available = {r[0] for r in stock_pg.query("SELECT name FROM pg_available_extensions")}
    assert "plpgsql" in available and "hstore" in available   # contrib is there
    assert not {"pgshovel2", "pgq", "pgq_node", "wal2json"} & available
    with pytest.raises(NOT_AVAILABLE, match=r"\bpgshovel2\b"):
        stock_pg.query("CREATE EXTENSION pgshovel2")
    with pytest.raises(NOT_AVAILABLE, match=r"\bpgq\b"):
        stock_pg.query("CREATE EXTENSION pgq", admin=True)   # not even for the superuser


def test_app_cannot_create_event_triggers_or_c_functions(fresh):
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="event trigger"):
        fresh.query("CREATE FUNCTION f() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END';"
                    "CREATE EVENT TRIGGER e ON ddl_command_end EXECUTE FUNCTION f()")
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="language c"):
        fresh.query("CREATE FUNCTION g() RETURNS int LANGUAGE c AS '$libdir/test_decoding', 'g'")


def test_app_can_capture_with_plpgsql_triggers(fresh):
    fresh.query("CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE log (row json);"
                "CREATE FUNCTION cap() RETURNS trigger LANGUAGE plpgsql AS "
                "'BEGIN INSERT INTO log VALUES (row_to_json(NEW)); RETURN NEW; END';"
                "CREATE TRIGGER cap AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION cap();"
                "INSERT INTO t VALUES (7)")
    assert fresh.query("SELECT row FROM log") == [({"id": 7},)]


def test_reset_leaves_an_empty_database_owned_by_app(fresh):
    fresh.query("CREATE TABLE t (id int)")
    fresh.query("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    held = fresh.connect()   # a session the reset must end
    fresh.reset()
    with pytest.raises(psycopg2.OperationalError):
        held.cursor().execute("SELECT 1")
    assert fresh.query("SELECT count(*) FROM pg_class WHERE relname = 't'") == [(0,)]
    assert fresh.query("SELECT count(*) FROM pg_replication_slots", admin=True) == [(0,)]
    assert fresh.query("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'pgshovel'") == [("app",)]


def test_every_server_target_is_what_its_flags_say(stack, db, schema):  # noqa: F811
    with db.cursor() as cur:
        cur.execute("SELECT current_setting('server_version_num')::int / 10000, "
                    "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user), "
                    "EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pgshovel2')")
        assert cur.fetchone() == (stack.major, stack.is_superuser, stack.has_our_c)
        cur.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY)')   # as pgshovel2's role
    admin = psycopg2.connect(stack.admin_dsn)
    with admin.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cur.fetchone() == (True,)
    admin.close()
