"""decoder: pgoutput gives what our plugin gives: every sweep type and special value, read from
the WAL through pgoutput (text in the pinned settings) and from a snapshot as text, converted by
pgshovel2.codec.textforms, equals our plugin's capture forms (JSON, so -0.0, 1 vs 1.0 and array
bounds count); and two sets on the same tables, one per decoder, write the same Kafka keys and
values byte for byte."""

import json
import uuid

import psycopg2
import pytest

from pgshovel2 import names
from pgshovel2.backends import pgoutput
from pgshovel2.backends.snapshot import TableReader
from pgshovel2.catalog import Column, Table
from pgshovel2.codec.rows import as_values
from pgshovel2.errors import RelayError
from pgshovel2.ops.verify import read_topics
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder, SetTable
from pgshovel2.relay.logical.relation_layout import Redo, RelationLayout
from pgshovel2.relay.source import Change
from tests.helpers import RelayProcess, caught_up, pgshovel, write_config
from tests.integration.sweep_types import OWN_TYPES, sweep_columns
from tests.integration.test_types import SPECIAL

ODD_SETTINGS = ("SET DateStyle = 'SQL, DMY'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 0; "
                "SET bytea_output = 'escape'; SET TimeZone = 'Asia/Kathmandu'")


def _forms_table(cur, schema: str) -> tuple[Table, str]:
    """forms (every sweep type, the special values) with 5 rows; (its Table, the values' SQL)."""
    cur.execute("CREATE EXTENSION IF NOT EXISTS citext; CREATE EXTENSION IF NOT EXISTS hstore; "
                "CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder")
    cur.execute(f'SET search_path = "{schema}", public')
    cur.execute(OWN_TYPES)
    cols, values, _ = sweep_columns(cur, schema)
    special = [(f"s_{n}", t, vals) for n, t, vals in SPECIAL]
    defs = [f"{c.name} {c.pg_type}" for c in cols] + [f"{n} {t}" for n, t, _ in special]
    cur.execute(f"CREATE TABLE forms (id int PRIMARY KEY, {', '.join(defs)})")
    cur.execute("ALTER TABLE forms REPLICA IDENTITY FULL")
    cur.execute("SELECT attnum, attname FROM pg_attribute WHERE attrelid = 'forms'::regclass AND attnum > 0 "
                "ORDER BY attnum")
    columns = tuple(Column(n, a, "?", "?", False, True) for a, n in cur.fetchall())
    inserts = ["INSERT INTO forms VALUES (0, " + ", ".join(values[c.name] for c in cols) + ", " +
               ", ".join("NULL" for _ in special) + ")"]
    inserts += [f"INSERT INTO forms (id, {', '.join(n for n, _, _ in special)}) "
                f"VALUES ({row + 1}, {', '.join(vals[row] for _, _, vals in special)})" for row in range(4)]
    return Table(schema, "forms", columns, ("id",), "primary key"), inserts


def settled(decoder: PgoutputDecoder, items: list) -> list:
    """items as the logical source passes them on: layouts settled (unchanged), held changes decoded."""
    out = []
    for item in items:
        if isinstance(item, RelationLayout):
            decoder.settle(item)
        elif isinstance(item, Redo):
            out += decoder.feed(item.data, item.lsn)
        else:
            out.append(item)
    return out


def _dumps(row: list | bytes) -> str:
    """A row (a list, or the native decoder's JSON text) as sorted JSON."""
    return json.dumps(as_values(row), sort_keys=True)


def test_pgoutput_text_gives_the_plugin_forms(stack, db, schema):
    slot, pub = f"pgo_{uuid.uuid4().hex[:8]}", f"pgo_{uuid.uuid4().hex[:8]}"
    conn = psycopg2.connect(stack.dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            table, inserts = _forms_table(cur, schema)
            cur.execute(f"CREATE PUBLICATION {pub} FOR TABLE forms")
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true)", (slot,))
            cur.execute(ODD_SETTINGS)  # the writer's settings do not matter
            for statement in inserts:
                cur.execute(statement)
            cur.execute("UPDATE forms SET id = id + 100 WHERE id = 1")
            pgoutput.pin_settings(cur)
            cur.execute("SHOW search_path")
            path = cur.fetchone()[0]
            cur.execute("SET search_path = pg_catalog")  # as the relay's walsender (pgoutput.libpq_options)
            cur.execute("SELECT lsn::text::pg_lsn - '0/0'::pg_lsn, data FROM pg_logical_slot_get_binary_changes("
                        "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)", (slot, pub))
            messages = [(int(lsn), bytes(data)) for lsn, data in cur.fetchall()]
            cur.execute(f"SET search_path = {path}")
            attnums = ",".join(str(c.attnum) for c in table.columns)
            cur.execute(f"SELECT pgshovel2_decoder.encode_row(f, '{{{attnums}}}') FROM forms f ORDER BY id")
            plugin_rows = [_dumps(json.loads(r[0])) for r in cur.fetchall()]
            types = pgoutput.column_types(cur, table)
    finally:
        conn.close()
    decoder = PgoutputDecoder({table.qualified: SetTable(table, types.type_oids, types.converters)})
    items = [i for lsn, data in messages for i in settled(decoder, decoder.feed(data, lsn))]
    changes = [i for i in items if isinstance(i, Change)]
    assert [c.op for c in changes] == ["I"] * 5 + ["U"]
    inserted = [_dumps(c.row) for c in changes[:5]]
    # rows 0, 2..4, then 101 (row 1 with its new key): ORDER BY id of the table now
    assert inserted[:1] + inserted[2:] == plugin_rows[:4]
    assert _dumps(changes[5].before) == inserted[1] and _dumps(changes[5].row) == plugin_rows[4]
    assert '"lower_bounds": [0]' in inserted[2] and "-0.0" in inserted[1]
    odd = " ".join(f"-c {s.split(' = ')[0].removeprefix('SET ')}={s.split(' = ')[1].strip(chr(39))}"
                   for s in ODD_SETTINGS.replace(", ", ",").split("; "))
    with TableReader(f"{stack.dsn} options='{odd}'", None, RelayError) as reader:  # pinned over odd defaults
        snapshot = sorted(reader.rows(table), key=lambda r: r[0])
    assert [_dumps(r) for r in snapshot] == plugin_rows


def _kafka(stack, topic: str) -> list[tuple]:
    return [(k, v, h.get("pgshovel.op")) for k, v, h in read_topics(stack.bootstrap, [topic])[topic]]


def _strip_ids(value: bytes | None) -> bytes | None:
    """Avro data without its schema id (the two sets register under different subjects)."""
    return value[5:] if value and value[:1] == b"\x00" else value


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_both_decoders_write_the_same_kafka_bytes(stack, cluster, db, schema, tmp_path, encoding):
    with db.cursor() as cur:
        table, inserts = _forms_table(cur, schema)
    tables = [{"schema": schema, "name": "forms"}]
    prefixes, relays = {}, []
    for decoder in ("pgshovel2", "pgoutput"):
        name = f"same{decoder[:5]}{encoding}"
        prefixes[decoder] = f"{name}{cluster}"
        cfg = write_config(tmp_path, stack, tables, encoding=encoding, backend="logical", decoder=decoder,
                           topic_prefix=prefixes[decoder])
        out = pgshovel(stack, cluster, "set", "create", name, str(cfg)).stdout
        assert f"decoder: {'pgshovel2_decoder' if decoder == 'pgshovel2' else 'pgoutput'}" in out
        relay = RelayProcess(stack, cluster, name, log_path=tmp_path / f"{name}.log")
        relay.wait_for("snapshot done")
        relays.append((name, relay))
    with db.cursor() as cur:
        cur.execute(f'SET search_path = "{schema}", public')
        for statement in inserts[:3]:
            cur.execute(statement)
        cur.execute(ODD_SETTINGS)
        for statement in inserts[3:]:
            cur.execute(statement)
        cur.execute("UPDATE forms SET id = id + 100 WHERE id = 1")
        cur.execute("UPDATE forms SET s_f4 = 'NaN' WHERE id = 2")
        cur.execute("DELETE FROM forms WHERE id = 3")
        cur.execute("TRUNCATE forms")
    got = {}
    for (name, relay), decoder in zip(relays, prefixes, strict=True):
        caught_up(stack, cluster, name)
        assert relay.stop() == 0
        topic = names.table_topic(prefixes[decoder], schema, "forms")
        got[decoder] = [(_strip_ids(k), _strip_ids(v), op) for k, v, op in _kafka(stack, topic)]
    assert len(got["pgoutput"]) >= 9
    assert got["pgoutput"] == got["pgshovel2"]
