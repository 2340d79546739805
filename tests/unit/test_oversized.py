"""The oversized policy (pgshovel2.relay.emit.oversized) through the Emitter, with a sink that keeps what
it is given and a small limit: every message of a change is checked before any is produced; fail
names set, table, key, size and limit; dead-letter chunks the message and leaves a placeholder;
truncate cuts the named columns until the message fits; the native lane leaves an oversized
change to Python. And the config, and an Avro timestamp the encoding cannot hold."""

import json

import pytest

from pgshovel2 import wire
from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, native, temporal
from pgshovel2.config import OversizedConfig, parse_config
from pgshovel2.errors import ConfigError, EncodeError
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.lane import TableLanes
from pgshovel2.relay.emit.oversized import OversizedError, usable
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.source import Change
from tests.unit.test_native_codec import encoders

LIMIT = 64 * 1024
COLS = (Column("id", 1, "integer", "int4", False, False), Column("body", 2, "text", "text", False, True),
        Column("b", 3, "bytea", "bytea", False, True), Column("note", 4, "text", "text", False, True))
TABLE = Table("public", "t", COLS, ("id",), "primary key")
TOPIC = "p.public.t"


class Sink:
    """A KafkaSink stand-in: produce keeps (topic, key, value, headers); message_limit is LIMIT."""

    def __init__(self):
        self.produced: list[tuple] = []

    def produce(self, topic, key, value, headers):
        self.produced.append((topic, key, value, dict(headers)))

    def message_limit(self, topic):
        return LIMIT, f"topic {topic!r} max.message.bytes {LIMIT}"


def emitter(policy: OversizedConfig, use_avro: bool = False, envelope: str = "row") -> tuple[Emitter, Sink]:
    sink = Sink()
    enc = encoders(TABLE, use_avro, envelope)
    env = None
    if envelope == "debezium":
        writer = avro.AvroWriter(avro.debezium_value_schema("s", TABLE), 9) if use_avro else None
        env = DebeziumEnvelope(enc, SourceInfo("s", "db", "public", "t"), TOPIC, writer, clock=lambda: 10**18)
    em = Emitter("s", {TABLE.qualified: TableRoute(TABLE, TOPIC, enc, env)}, "p.transactions", None, sink)
    em.use_policy(policy, "p.dead-letter")
    return em, sink


def change(row: list, op: str = "I", before: list | None = None) -> Change:
    return Change(7, 1000, op, row, TABLE.qualified, before, 5, 0)


def data(sink: Sink) -> list[tuple]:
    return [m for m in sink.produced if m[0] == TOPIC]


def test_fitting_messages_go_as_they_are():
    em, sink = emitter(OversizedConfig())
    em.change(change([1, "x" * 1000, None, "n"]), "0000000000000005:0000000000")
    assert len(data(sink)) == 1 and wire.TRUNCATED not in data(sink)[0][3]


def test_fail_names_set_table_key_size_and_limit_and_produces_nothing():
    em, sink = emitter(OversizedConfig())
    with pytest.raises(OversizedError) as raised:
        em.change(change([42, "x" * LIMIT, None, "n"]), "0000000000000005:0000000000")
    text = str(raised.value)
    for part in ("set 's'", 'table "public"."t"', 'key {"id": 42}', f"topic {TOPIC!r}", f"{usable(LIMIT)}",
                 f"max.message.bytes {LIMIT}", "policy 'fail'"):
        assert part in text, part
    assert isinstance(raised.value, EncodeError) and sink.produced == []


def test_a_key_move_is_checked_whole_before_anything_is_produced():
    """An UPDATE of the key: the tombstone of the old key fits, the create does not: neither goes."""
    em, sink = emitter(OversizedConfig())
    with pytest.raises(OversizedError):
        em.change(change([2, "x" * LIMIT, None, "n"], "U", [1, "", None, "n"]), "0000000000000005:0000000000")
    assert sink.produced == []


@pytest.mark.parametrize("use_avro", [False, True], ids=["json", "avro"])
def test_dead_letter_chunks_and_placeholder(use_avro):
    em, sink = emitter(OversizedConfig("dead-letter"), use_avro)
    body = "é" * (LIMIT * 2)  # 256 KiB of UTF-8: 5 chunks
    em.change(change([3, body, None, "n"]), "0000000000000005:0000000000")
    (placeholder,) = data(sink)
    chunks = [m for m in sink.produced if m[0] == "p.dead-letter"]
    note = json.loads(placeholder[3][wire.DEAD_LETTER])
    assert placeholder[2] == b"" and note["topic"] == "p.dead-letter" and note["chunks"] == len(chunks) >= 4
    assert all(c[1] == placeholder[1] for c in chunks)  # keyed as the message was
    assert [c[3][wire.DEAD_LETTER_CHUNK] for c in chunks] == [f"{i + 1}/{len(chunks)}" for i in range(len(chunks))]
    assert all(c[3][wire.DEAD_LETTER_TOPIC] == TOPIC and c[3][wire.POSITION] == placeholder[3][wire.POSITION]
               for c in chunks)
    value = b"".join(c[2] for c in chunks)
    assert len(value) == note["bytes"] and all(len(c[2]) < LIMIT for c in chunks)
    if not use_avro:
        assert json.loads(value)["body"] == body


@pytest.mark.parametrize("envelope", ["row", "debezium"])
@pytest.mark.parametrize("use_avro", [False, True], ids=["json", "avro"])
def test_truncate_cuts_the_named_columns_to_fit(use_avro, envelope):
    em, sink = emitter(OversizedConfig("truncate", ("body", "b")), use_avro, envelope)
    body, blob = "😀" * LIMIT, "ab" * (LIMIT * 2)
    before = [4, body, blob, "old"] if envelope == "debezium" else None
    em.change(change([4, body, blob, "n"], "U" if before else "I", before), "0000000000000005:0000000000")
    (msg,) = data(sink)
    assert json.loads(msg[3][wire.TRUNCATED]) == {"body": LIMIT, "b": LIMIT * 2}
    size = len(msg[1]) + len(msg[2]) + sum(len(k) + len(v.encode()) for k, v in msg[3].items())
    assert usable(LIMIT) // 2 < size <= usable(LIMIT)  # cut to fit, not to nothing
    if not use_avro:
        value = json.loads(msg[2])
        row = value["after"] if envelope == "debezium" else value
        assert body.startswith(row["body"]) and row["note"] == "n" and row["id"] == 4


def test_truncate_without_a_named_column_to_cut_fails():
    em, _ = emitter(OversizedConfig("truncate", ("b",)))
    with pytest.raises(OversizedError, match="even with b cut to nothing"):
        em.change(change([5, "x" * LIMIT * 2, None, "n"]), "0000000000000005:0000000000")


def test_snapshot_rows_follow_the_policy_too():
    em, sink = emitter(OversizedConfig("dead-letter"))
    em.snapshot_row(TABLE, [6, "x" * LIMIT * 2, None, None], "0000000000000005:s0000000000", 1000)
    assert data(sink)[0][2] == b"" and wire.DEAD_LETTER in data(sink)[0][3]
    em, _ = emitter(OversizedConfig())
    with pytest.raises(OversizedError, match="op r"):
        em.snapshot_row(TABLE, [6, "x" * LIMIT * 2, None, None], "0000000000000005:s0000000000", 1000)


def test_the_native_lane_leaves_an_oversized_change_to_python():
    """A ChangeRun of trigger rows: the lane writes the small one and stops at the large one."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    em, _ = emitter(OversizedConfig())
    lanes = TableLanes(em.routes, None, em.guard.lane_limit)
    rows = [(7, 1000, "I", json.dumps([1, "small", None, None]), TABLE.qualified, None),
            (7, 1000, "I", json.dumps([2, "x" * LIMIT, None, None]), TABLE.qualified, None)]
    messages, done, _, _, _ = lanes.lane.encode(rows, 0, "00000000000000000005:", 0, (("o", "c"),) * 3,
                                             (("t", "7"), ("m", "1"), ("s", "s"), ("v", "1")), "pos")
    assert done == 1 and len(messages) == 1


def test_oversized_config_is_validated():
    base = {"database": {"dsn": "x"}, "tables": ["t"]}
    assert parse_config(base, "f").oversized == OversizedConfig("fail", ())
    assert parse_config({**base, "oversized": {"policy": "truncate", "columns": ["body"]}}, "f").oversized == \
        OversizedConfig("truncate", ("body",))
    for bad, field in (({"policy": "drop"}, "oversized.policy"), ({"policy": "truncate"}, "oversized.columns"),
                       ({"policy": "dead-letter", "columns": ["a"]}, "oversized.columns"),
                       ({"columns": "a"}, "oversized.columns"), ({"limit": 1}, "oversized.limit"), ("x", "oversized")):
        with pytest.raises(ConfigError) as raised:
            parse_config({**base, "oversized": bad}, "f")
        assert raised.value.field == field, bad


def test_an_avro_timestamp_past_its_range_is_named():
    with pytest.raises(ValueError, match="294276-12-31T23:59:59.999999 is after 294247-01-10"):
        temporal.timestamp_to_avro(9223371331199999999)
    assert temporal.timestamp_to_avro(temporal.INT64_MAX) == temporal.INT64_MAX
