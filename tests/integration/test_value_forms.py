"""Value forms and what depends on them, against the real stack: the output
plugin writes exactly the capture trigger's forms (both compile
sql/capture/encode.c), the array schemas are BACKWARD compatible with the ones
registered before in the real registry, and a value that cannot be encoded
stops the relay with an error naming table, column, type and position."""

import struct
import uuid

import psycopg2
import pytest
from psycopg2 import sql

from pgshovel2 import names
from pgshovel2.backends import trigger
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.errors import SchemaRejectedError
from pgshovel2.ops.verify import read_topics
from pgshovel2.relay.logical.records import records
from pgshovel2.relay.logical.source import RECORD_FORMAT
from pgshovel2.setrecord import queue_name
from pgshovel2.sinks.registry import SchemaRegistry
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config
from tests.integration.sweep_types import OWN_TYPES, sweep_columns
from tests.integration.test_types import SPECIAL


def _plugin_rows(data: list[bytes]) -> list[str]:
    """The new rows of the INSERT records of pgshovel2_decoder output (sql/decoder/README.rst:
    kind, change LSN, table index, flags, row length, row)."""
    rows = []
    for record in data:
        if record[:1] == b"I":
            (length,) = struct.unpack(">I", record[12:16])
            rows.append(record[16:16 + length].decode("utf-8"))
    return rows


def test_plugin_writes_the_trigger_forms(stack, db, schema):
    """Rows of every sweep type and of the special values, captured by the trigger (ev_data) and
    decoded by the plugin from the WAL: the same text, byte for byte; snapshot rows too
    (pgshovel2.encode_row vs pgshovel2_decoder.encode_row)."""
    queue, slot = f"forms_{uuid.uuid4().hex[:8]}", f"forms_{uuid.uuid4().hex[:8]}"
    conn = psycopg2.connect(stack.dsn)  # the temporary slot lives as long as this session
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore; "
                        "CREATE EXTENSION IF NOT EXISTS pgq; CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder")
            trigger.ensure_extension(cur)
            cur.execute(f'SET search_path = "{schema}", public')
            cur.execute(OWN_TYPES)
            cols, values, _ = sweep_columns(cur, schema)
            special = [(f"s_{n}", t, vals) for n, t, vals in SPECIAL]
            defs = [f"{c.name} {c.pg_type}" for c in cols] + [f"{n} {t}" for n, t, _ in special]
            cur.execute(f"CREATE TABLE forms (id int PRIMARY KEY, {', '.join(defs)})")
            cur.execute("SELECT 'forms'::regclass::oid, count(*) FROM pg_attribute "
                        "WHERE attrelid = 'forms'::regclass AND attnum > 0")
            oid, ncols = cur.fetchone()
            attnums = ",".join(str(i) for i in range(1, ncols + 1))
            cur.execute("SELECT pgq.create_queue(%s)", (queue,))
            cur.execute(sql.SQL("CREATE TRIGGER forms_capture AFTER INSERT ON forms FOR EACH ROW EXECUTE FUNCTION "
                                "pgshovel2.capture({}, 'forms', {}, '1', 'all')").format(
                                    sql.Literal(queue), sql.Literal(attnums)))
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgshovel2_decoder', true)", (slot,))
            cur.execute("INSERT INTO forms VALUES (0, " + ", ".join(values[c.name] for c in cols) + ", " +
                        ", ".join("NULL" for _ in special) + ")")
            for row in range(4):
                cur.execute(f"INSERT INTO forms (id, {', '.join(n for n, _, _ in special)}) "
                            f"VALUES ({row + 1}, {', '.join(vals[row] for _, _, vals in special)})")
            cur.execute("SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = %s", (queue,))
            cur.execute(f"SELECT ev_data FROM {cur.fetchone()[0]} ORDER BY ev_id")
            by_trigger = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'format', %s, "
                        "'tables', %s)", (slot, RECORD_FORMAT, f"{oid}:{attnums}"))
            by_plugin = _plugin_rows([rec for r in cur.fetchall() for rec in records(bytes(r[0]))])
            cur.execute(f"SELECT pgshovel2.encode_row(f, '{{{attnums}}}'), "
                        f"pgshovel2_decoder.encode_row(f, '{{{attnums}}}') FROM forms f ORDER BY id")
            snapshot = cur.fetchall()
            cur.execute("SELECT pgq.drop_queue(%s)", (queue,))
    finally:
        conn.close()
    assert len(by_trigger) == 5 and '"lower_bounds":[0]' in by_trigger[2] and "-0.0" in by_trigger[1]
    assert by_plugin == by_trigger
    assert [a for a, _ in snapshot] == by_trigger and [b for _, b in snapshot] == by_trigger


def _old_array(items: str) -> dict:
    return {"type": "array", "items": ["null", items]}


def test_array_schemas_are_backward_compatible_in_the_registry(stack):
    """The subjects of a table with array columns, registered with the schemas of earlier versions
    and set to BACKWARD, take the new value and key schemas."""
    cols = (Column("id", 1, "integer[]", "int4", True, False), Column("a", 2, "integer[]", "int4", True, True),
            Column("b", 3, "date[]", "date", True, False), Column("c", 4, "numeric(5,2)[]", "numeric", True, True,
                                                                  5, 2))
    table = Table("public", "arr", cols, ("id",), "primary key")
    new_value, new_key = avro.value_schema("s", table), avro.key_schema("s", table)
    old_value = {**new_value, "fields": [
        {**new_value["fields"][0], "type": _old_array("int")},
        {**new_value["fields"][1], "type": ["null", _old_array("int")]},
        {**new_value["fields"][2], "type": _old_array({"type": "int", "logicalType": "date"})},
        {**new_value["fields"][3], "type": ["null", _old_array({"type": "bytes", "logicalType": "decimal",
                                                                 "precision": 5, "scale": 2})]}]}
    old_key = {**new_key, "fields": [{**new_key["fields"][0], "type": _old_array("int")}]}
    registry = SchemaRegistry(stack.registry)
    subject = f"compat-{uuid.uuid4().hex[:8]}"
    for suffix, old, new in (("value", old_value, new_value), ("key", old_key, new_key)):
        first = registry.register(f"{subject}-{suffix}", old)
        registry.require_backward(f"{subject}-{suffix}")
        assert registry.register(f"{subject}-{suffix}", new) != first  # SchemaRejectedError if incompatible
    registry.register(f"{subject}-control", old_value)  # the registry does check: a real break is refused
    registry.require_backward(f"{subject}-control")
    broken = {**old_value, "fields": [{**old_value["fields"][0], "type": "string"}, *old_value["fields"][1:]]}
    with pytest.raises(SchemaRejectedError):
        registry.register(f"{subject}-control", broken)


def test_unencodable_value_stops_the_relay_naming_it(stack, cluster, db, schema, tmp_path, backend):
    """numeric(p,s) NaN has no Avro decimal (docs/wire.rst): the relay stops, naming table, column,
    type and position, and the change is not acknowledged."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".n (id int PRIMARY KEY, v numeric(5,2))')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "n"}], backend=backend)
    pgshovel(stack, cluster, "set", "create", "nan", str(cfg))
    relay = RelayProcess(stack, cluster, "nan", "--skip-snapshot", log_path=tmp_path / "relay.log")
    relay.wait_for("skipping the initial snapshot")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".n VALUES (1, 'NaN')")
    code = relay.proc.wait(120)
    log = relay.log()
    assert code != 0, log
    table = names.qualified(schema, "n")
    assert f'table {table}, column "v" (numeric(5,2))' in log and "at position " in log, log


def test_rows_queued_by_older_capture_code_are_read(stack, cluster, db, schema, tmp_path):
    """Events in the forms older capture code queued (-0 for negative zero, multi-dimensional
    arrays of own-form types as array text): the relay reads them exactly."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".o (id int PRIMARY KEY, f float8, ad date[], af float8[], a1 real[])')
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "o"}], encoding="json")
    pgshovel(stack, cluster, "set", "create", "old", str(cfg))
    relay = RelayProcess(stack, cluster, "old", "--skip-snapshot", log_path=tmp_path / "relay.log")
    try:
        relay.wait_for("skipping the initial snapshot")
        with db.cursor() as cur:
            cur.execute("SELECT pgq.insert_event(%s, 'I', %s, %s, NULL, NULL, NULL)",
                        (queue_name(cluster, "old"), '[1,-0,"{{2024-02-29,NULL}}","{{-0,1}}",[-0,0]]',
                         names.qualified(schema, "o")))
        caught_up(stack, cluster, "old")
    finally:
        relay.stop()
    topic = names.table_topic("old", schema, "o")
    [(_, value, _)] = read_topics(stack.bootstrap, [topic])[topic]
    assert value == b'{"id":1,"f":-0.0,"ad":[["2024-02-29",null]],"af":[[-0.0,1.0]],"a1":[-0.0,0]}'
