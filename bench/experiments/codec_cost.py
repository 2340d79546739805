"""CPU per change of the row codec alone, in process (no database, no Kafka): a row of the
``mixed`` table (bench/peer/workloads.py; the row its generator writes for key 12345, as the capture's
JSON text) through each envelope's ``change`` (decode the text, convert, encode key and value),
with the native codec and with the Python codec. CPU time of this process (time.process_time),
so less sensitive to a busy machine than the drains.

    .venv/bin/python -m bench.experiments.codec_cost [--changes 20000]
"""

import argparse
import json
import time

from pgshovel2.catalog import Column, Table
from pgshovel2.codec import avro
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.emit.debezium import DebeziumEnvelope, SourceInfo
from pgshovel2.relay.emit.envelopes import Context, RowEnvelope, TxnOrder

COLUMNS = [("id", "bigint", "int8", None, None), ("qty", "integer", "int4", None, None),
           ("name", "text", "text", None, None), ("code", "character varying(32)", "varchar", None, None),
           ("price", "numeric(12,2)", "numeric", 12, 2), ("score", "double precision", "float8", None, None),
           ("active", "boolean", "bool", None, None),
           ("created_at", "timestamp with time zone", "timestamptz", None, None),
           ("ref", "uuid", "uuid", None, None), ("attrs", "jsonb", "jsonb", None, None)]
TABLE = Table("bench", "mixed", tuple(Column(n, i + 1, t, k, False, False, p, s)
                                      for i, (n, t, k, p, s) in enumerate(COLUMNS)), ("id",), "primary key")
ROW = json.dumps([12345, 345, "customer 827ccb0eea8a706c4c34a16891f84e7b 3e9a1e5a0cbb1a1e1d17e2c3e7d4e2b1",
                  "C-00012345", "1763.57", 4115.0, False, 820454400000000, "827ccb0e-ea8a-706c-4c34-a16891f84e7b",
                  json.dumps({"n": 12345, "tag": "a1" * 16, "tags": ["a", "b", 5]})])


def envelope(kind: str, use_avro: bool):
    """The envelope of kind (row/debezium) for TABLE, Avro or JSON (schema ids 1..3)."""
    key_w = avro.AvroWriter(avro.key_schema("s", TABLE), 1) if use_avro else None
    if kind == "row":
        value_w = avro.AvroWriter(avro.value_schema("s", TABLE), 2) if use_avro else None
        return RowEnvelope(RowEncoder(TABLE, use_avro, key_w, value_w))
    env_w = avro.AvroWriter(avro.debezium_value_schema("s", TABLE), 3) if use_avro else None
    return DebeziumEnvelope(RowEncoder(TABLE, use_avro, key_w, None), SourceInfo("s", "db", "bench", "mixed"),
                            "topic", env_w)


def cost(env, changes: int) -> float:
    """CPU µs per INSERT through env."""
    ctx = Context(1, "p", 1, order=TxnOrder())
    started = time.process_time()
    for _ in range(changes):
        env.change("I", ROW, None, ctx)
    return (time.process_time() - started) * 1e6 / changes


def measure(changes: int) -> dict:
    """{"<envelope>/<encoding>": {"native_us", "python_us", "ratio"}}."""
    out = {}
    for kind in ("row", "debezium"):
        for use_avro in (True, False):
            env = envelope(kind, use_avro)
            native_us = cost(env, changes)
            env.encoder.native = None
            if kind == "debezium":
                env._native = None
            python_us = cost(env, changes)
            out[f"{kind}/{'avro' if use_avro else 'json'}"] = {
                "native_us": round(native_us, 2), "python_us": round(python_us, 2),
                "ratio": round(python_us / native_us, 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=20000)
    print(json.dumps(measure(parser.parse_args().changes), indent=2))


if __name__ == "__main__":
    main()
