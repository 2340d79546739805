"""The consumer library reads the debezium envelope's JSON with Connect schemas back to the values the
schemaless form gives (pgshovel2.consumer.connectjson), except where Debezium's forms hold less
(docs/wire.rst): intervals as µs, NaN numerics as null, timetz in UTC, bit strings' leading zeros and
unconstrained numerics' trailing fraction zeros."""

import dataclasses

from pgshovel2.catalog import Column, Table
from pgshovel2.codec.connect import ConnectRowEncoder, table_schemas
from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.consumer.decode import Decoder
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context
from tests.unit.test_connect_values import CASES

# iv: 1 mon 2 days 3.5 s is (730.5 + 48) h 3.5 s; bit strings come without leading zeros, unconstrained
# numerics without the fraction's trailing zeros
LOSSY = {"nan": None, "iv": "PT778H30M3.5S", "tz": "09:34:56.5Z", "bt": "1", "v": "1.5"}
EXTRA = [(Column("jnull", 0, "jsonb", "jsonb", False, True), "null"),
         (Column("jarr", 0, "jsonb[]", "jsonb", True, True), ['[1, 2]', '{"a": 1}']),
         (Column("big", 0, "numeric(40,10)", "numeric", False, True, 40, 10),
          "-123456789012345678901234567890.0000000001"),
         (Column("inf", 0, "date", "date", False, True), 2**31 - 1)]


def _table() -> Table:
    cols = [dataclasses.replace(c, attnum=i + 1, nullable=c.name != "i")
            for i, c in enumerate([c for c, *_ in CASES] + [c for c, _ in EXTRA])]
    return Table("s", "t", tuple(cols), ("i",), "primary key")


def _events(table: Table, row: list) -> tuple[bytes, bytes, bytes, bytes]:
    ctx = Context(5, "p", 1_700_000_000_000)
    connect = DebeziumEnvelope(ConnectRowEncoder(table, table_schemas("p.s.t", table)),
                               SourceInfo("p", "db", "s", "t"), "p.s.t")
    plain = DebeziumEnvelope(RowEncoder(table, False), SourceInfo("p", "db", "s", "t"), "p.s.t")
    (c,), (p,) = connect.change("I", row, None, ctx), plain.change("I", row, None, ctx)
    return c.key, c.value, p.key, p.value


def test_decoded_connect_event_is_the_schemaless_one():
    table = _table()
    row = [t for _, t, *_ in CASES] + [t for _, t in EXTRA]
    ckey, cvalue, pkey, pvalue = _events(table, row)
    decoder = Decoder()
    assert decoder.decode(ckey, "k") == decoder.decode(pkey, "k") == {"i": 7}
    got, want = decoder.decode(cvalue, "v"), decoder.decode(pvalue, "v")
    assert set(got) == set(want)
    assert decoder.decode(cvalue, "v") == got  # the cached reader gives the same
    for name in LOSSY:
        assert got["after"].pop(name) == LOSSY[name]
        want["after"].pop(name)
    assert got["after"] == want["after"]
    assert got["after"]["jnull"] == JsonValue("null") and got["after"]["jarr"] == [JsonValue("[1, 2]"), {"a": 1}]
    assert got["after"]["inf"] == "infinity" and got["after"]["n"] == "1.5000"
    assert {k: v for k, v in got.items() if k not in ("after", "ts_ms", "ts_us", "ts_ns")} == \
           {k: v for k, v in want.items() if k not in ("after", "ts_ms", "ts_us", "ts_ns")}
