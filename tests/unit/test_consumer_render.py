"""The text forms of `pgshovel tail` (pgshovel2.consumer.render)."""

import datetime as dt
import json

import click

from pgshovel2.consumer import Change, JsonValue, Transaction
from pgshovel2.consumer.render import change_json, change_line, iso_ms, jsonable, pretty
from tests.unit.test_consumer_decode import RAW, avro, decoder


def change(op: str, key, value, txid: int = 5) -> Change:
    return Change("p.public.t", "public.t", op, key, value, txid, "00000000000000000001:0000000000",
                  1_763_632_800_123, 0, 3)


def test_json_lines_use_the_json_encodings_forms():
    value = decoder().decode(avro(RAW), "v") | {"f": float("nan")}
    line = json.loads(change_json(change("u", {"id": 1}, value)))
    assert line == {"txid": 5, "position": "00000000000000000001:0000000000", "ts_ms": 1_763_632_800_123,
                    "table": "public.t", "op": "u", "key": {"id": 1},
                    "value": {"id": 1, "d": "2022-01-08", "ts": "2023-11-14T22:13:20.123456Z",
                              "lts": "1970-01-01T00:00:00", "n": "123.45",
                              "u": "0b7e8c36-4c36-4a1f-9f5a-2b0f4a6a3c11", "b": "AP8=",
                              "ds": ["1970-01-01", None, "infinity"], "f": "NaN"}}
    assert json.loads(change_json(change("t", None, None)))["key"] is None


def test_pretty_block():
    txn = Transaction(1234, "p", 1_763_632_800_123, [change("u", {"aid": 5}, {"aid": 5, "abalance": 10}),
                                                      change("d", {"aid": 6}, None), change("t", None, None),
                                                      change("c", None, {"x": "y" * 100})])
    lines = [click.unstyle(line) for line in pretty(txn)]
    assert lines[0] == "BEGIN txid 1234 (4 changes, 2025-11-20T10:00:00.123Z)"
    assert lines[1:4] == ["  u public.t {aid: 5} -> {aid: 5, abalance: 10}", "  d public.t {aid: 6}", "  t public.t"]
    assert lines[4].startswith('  c public.t {x: "yyy') and lines[4].endswith("…}") and len(lines[4]) < 90
    assert lines[5] == "COMMIT"
    snap = Transaction(0, "p", 0, [change("r", {"aid": 1}, {"aid": 1}, txid=0)], snapshot=True)
    assert [click.unstyle(line) for line in pretty(snap)] == [
        "SNAPSHOT (1 row, 1970-01-01T00:00:00.000Z)", "  r public.t {aid: 1} -> {aid: 1}", "END SNAPSHOT"]


def test_iso_and_jsonable_edges():
    assert iso_ms(1) == "1970-01-01T00:00:00.001Z"
    assert jsonable({"a": [float("inf"), -float("inf"), 1.5, dt.time(1, 2)]}) == {"a": ["Infinity", "-Infinity",
                                                                                        1.5, "01:02:00"]}


def test_json_values_and_arrays_render_as_the_json_encoding_writes_them():
    value = {"j": JsonValue("null"), "n": None, "a": {"lower_bounds": [0], "elements": [[-0.0, None]]}}
    assert json.dumps(jsonable(value)) == \
        '{"j": {"pgshovel.json": "null"}, "n": null, "a": {"lower_bounds": [0], "elements": [[-0.0, null]]}}'
    change = Change("t", "public.t", "c", {"id": 1}, {"id": 1, **value}, 5, "p", 0, 0, 0)
    assert click.unstyle(change_line(change)) == \
        "  c public.t {id: 1} -> {id: 1, j: json:null, n: null, a: {lower_bounds: [0], elements: [[-0.0, null]]}}"
