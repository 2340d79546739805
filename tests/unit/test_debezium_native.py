"""The debezium envelope's native event writer (pgshovel2_native.DebeziumEvents) against its
Python paths, byte for byte: random rows of every WIRE.md type (test_native_codec's generator)
through inserts, updates with and without the old row (REPLICA IDENTITY FULL or not), updates
of the key, deletes of whole rows and of key-only rows, and snapshot reads; Avro and JSON;
logical contexts (LSNs, commit µs) and trigger ones; keyed and unkeyed tables; a clock that moves
on every call, so each event must take its processing time when Python's would, and one
transaction numbering across the whole run, so a row left to Python must not number twice.

Fails (does not skip) when the extension is not installed: scripts/install.sh builds it.
"""

import json
import random

import pytest

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro, native
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo, native_events
from pgshovel2.relay.emit.envelopes import (
    SNAPSHOT_FALSE,
    SNAPSHOT_FIRST,
    SNAPSHOT_LAST,
    SNAPSHOT_TRUE,
    Context,
    TxnOrder,
)
from tests.unit.test_native_codec import ARRAYS, TYPES, table, value

UNKEYED = Table("s", "log é", (Column("msg", 1, "text", "text", False, True),
                               Column("n", 2, "bigint", "int8", False, True)), (), "none")


class Clock:
    """ns since the epoch, a little later on every call."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_123_456_789

    def __call__(self) -> int:
        self.now += 1_234_567
        return self.now


def envelope(tbl: Table, use_avro: bool, path: str) -> DebeziumEnvelope:
    """The envelope of tbl with its events written by path: ``native`` (whole events), ``spliced``
    (native rows, Python event) or ``python`` (PGSHOVEL2_NATIVE=0's path)."""
    key_schema = avro.key_schema("set", tbl) if use_avro else None
    key_w = avro.AvroWriter(key_schema, 7) if key_schema else None
    writer = avro.AvroWriter(avro.debezium_value_schema("set", tbl), 9) if use_avro else None
    env = DebeziumEnvelope(RowEncoder(tbl, use_avro, key_w, None), SourceInfo("set", "db ü", tbl.schema, tbl.name),
                           "topic", writer, clock=Clock())
    if path != "native":
        env._events = None
    if path == "python":
        env.encoder.native = env._native = None
    return env


def script(seed: int, tbl: Table, types: list[tuple], count: int) -> list[tuple]:
    """count random steps: ("change", op, row, before, Context fields) or ("read", row, snapshot
    marker, Context fields), all in one source transaction (snapshot rows: txid 0)."""
    rng = random.Random(seed)

    def row(n: int) -> list:
        if not tbl.key:
            return [value(rng, "text", False, None, None), rng.choice([None, n])]
        return [n] + [value(rng, t[0], t[2], t[3], t[4]) for t in types]

    logical = rng.random() < 0.5
    txid = rng.choice([4242, (7 << 32) + 99, 2**63 - 1])
    lsn, steps = rng.randrange(2**40), []
    for n in range(count):
        lsn += rng.randrange(1, 500)
        where = {"txid": txid, "position": f"{n:020d}:{rng.randrange(10**10):010d}", "ts_ms": 1_699_999_999_000 + n,
                 "lsn": lsn if logical else None, "last_lsn": rng.choice([None, lsn - 700]) if logical else None,
                 "ts_us": 1_699_999_999_000_123 + n if logical else None}
        new = row(n)
        kind = rng.random()
        if kind < 0.1:
            marker = rng.choice([SNAPSHOT_FIRST, SNAPSHOT_TRUE, SNAPSHOT_LAST])
            steps.append(("read", new, marker, {**where, "txid": 0, "ts_us": None, "last_lsn": None}))
        elif kind < 0.35:
            steps.append(("change", "I", new, None, where))
        elif kind < 0.75:
            before = rng.choice([None, row(n), row(n - 1)])  # none, the same key, another key
            if before is not None and tbl.key and rng.random() < 0.5:
                before[:2] = new[:2]  # same key (id, c1), other values
            steps.append(("change", "U", new, before, where))
        else:
            key_only = [v if i < 2 else None for i, v in enumerate(new)] if tbl.key and rng.random() < 0.3 else new
            steps.append(("change", "D", key_only, None, where))
    return steps


def run(env: DebeziumEnvelope, steps: list[tuple], as_text: bool) -> list:
    """Every step's messages (or the name of the error it raised), with one transaction numbering."""
    order, out = TxnOrder(), []
    form = (lambda r: r if r is None else json.dumps(r)) if as_text else (lambda r: r)
    for step in steps:
        try:
            if step[0] == "read":
                _, row, marker, where = step
                out.append(env.read(form(row), Context(snapshot=marker, **where)))
            else:
                _, op, row, before, where = step
                ctx = Context(order=order, snapshot=SNAPSHOT_FALSE, **where)
                out.append(env.change(op, form(row), form(before), ctx))
        except Exception as exc:  # noqa: BLE001 -- every path must raise the same
            out.append(type(exc).__name__)
    return out


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
@pytest.mark.parametrize("arrays", [False, True], ids=["scalars", "with-arrays"])
@pytest.mark.parametrize("as_text", [False, True], ids=["lists", "text"])
def test_native_events_equal_python(use_avro, arrays, as_text):
    """Whole events by the native writer == the spliced path == the pure-Python path; with arrays
    some rows are left to Python mid-transaction (the numbering must carry on once)."""
    assert native.module() is not None, "pgshovel2_native is not installed (scripts/install.sh builds it)"
    types = TYPES + ARRAYS if arrays else TYPES
    tbl = table(True, types)
    for seed in range(4):
        steps = script(seed, tbl, types, 150)
        envs = {path: envelope(tbl, use_avro, path) for path in ("native", "spliced", "python")}
        assert envs["native"]._events is not None
        want = run(envs["python"], steps, as_text)
        assert run(envs["spliced"], steps, as_text) == want
        got = run(envs["native"], steps, as_text)
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g == w, (seed, n, steps[n])
        assert envs["native"]._clock.now == envs["python"]._clock.now, "the clock was read a different number of times"


@pytest.mark.parametrize("use_avro", [True, False], ids=["avro", "json"])
def test_native_events_of_an_unkeyed_table(use_avro):
    """No key: key None, a delete has no tombstone."""
    steps = script(5, UNKEYED, [], 200)
    want = run(envelope(UNKEYED, use_avro, "python"), steps, True)
    assert run(envelope(UNKEYED, use_avro, "native"), steps, True) == want
    assert any(m.op == "d" and m.key is None for msgs in want if isinstance(msgs, list) for m in msgs)


def test_native_events_take_most_rows():
    """Most rows without arrays are written natively: DebeziumEvents gives messages, not None
    (the generator's odd values -- money, numerics beyond 28 digits -- are left to Python)."""
    tbl = table(True, TYPES)
    for use_avro in (True, False):
        env = envelope(tbl, use_avro, "native")
        taken = changes = 0
        for step in script(6, tbl, TYPES, 200):
            if step[0] == "change":
                changes += 1
                _, op, row, before, where = step
                ctx = Context(order=TxnOrder(), snapshot=SNAPSHOT_FALSE, **where)
                taken += env._events.change(op, json.dumps(row), before and json.dumps(before), ctx) is not None
        assert taken > changes // 2, (taken, changes)


def test_other_avro_tail_stays_python():
    """An Envelope schema whose source block is not the one the native writer knows: no native events."""
    tbl = table(True, TYPES)
    schema = avro.debezium_value_schema("set", tbl)
    schema["fields"] = schema["fields"][:-1]  # no ts_ns
    env = DebeziumEnvelope(RowEncoder(tbl, True, avro.AvroWriter(avro.key_schema("set", tbl), 7), None),
                           SourceInfo("set", "db", "s", "t"), "topic", avro.AvroWriter(schema, 9))
    assert env._events is None and env._native is not None


def test_a_name_without_utf8_form_stays_python():
    """A source name the native writer cannot hold (a lone surrogate): no native events."""
    env = envelope(UNKEYED, False, "native")
    assert native_events(env._native, SourceInfo("set", "db\udc80", "s", "t"), "topic", None, Clock()) is None
