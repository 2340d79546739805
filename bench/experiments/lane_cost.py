"""CPU per change of the relay's native lane with its producer, in process (no database): our
plugin's INSERT records of the ``mixed`` table (bench/experiments/codec_cost.py's row, a new key each), or
with ``--source pgoutput`` pgoutput's Insert messages of the same row (its columns' texts as
PostgreSQL prints them), in ChangeRuns of 512 through ``Emitter.change_run`` into a KafkaSink at the bench broker (an
idempotent-only producer with a long linger: nothing is sent while it is timed; the producer is
dropped, purging its queue, after each run), with the native producer (the lane produces into it
itself) and with confluent_kafka's (the lane returns its messages for ``produce_many``). Row and
debezium envelopes, JSON and Avro. CPU time of this process, the minimum of ``--runs`` (the least
disturbed on a busy machine).

For a count that does not depend on the machine's load, run one form and producer under
callgrind at two sizes and divide the difference of the instruction counts by that of the sizes:

    valgrind --tool=callgrind .venv/bin/python -m bench.experiments.lane_cost --changes 2000 --runs 1 \
        --only row/json:native

    .venv/bin/python -m bench.experiments.lane_cost [--changes 100000] [--runs 5]
        [--only <envelope>/<encoding>:<producer>] [--source plugin|pgoutput]
"""

import argparse
import json
import os
import struct
import time

from bench.experiments.codec_cost import ROW, TABLE, envelope
from bench.peer.common import BOOTSTRAP, save_result
from pgshovel2.codec import native, textforms
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.logical.records import RecordDecoder
from pgshovel2.relay.source import ChangeRun
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.wire import LOGICAL, position_prefix

UNIT, TXID = 0x1_0000_0010, (3 << 32) | 77
QUEUE = {"queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 4_000_000, "linger.ms": 60_000}
ROW_VALUES = json.loads(ROW)
# the mixed row's columns after the key as PostgreSQL's output functions print them (TimeZone UTC)
TEXTS = [b"345", ROW_VALUES[2].encode(), ROW_VALUES[3].encode(), b"1763.57", b"4115", b"f",
         b"2025-12-31 00:00:00+00", ROW_VALUES[8].encode(),
         b'{"n": 12345, "tag": "' + b"a1" * 16 + b'", "tags": ["a", "b", 5]}']
# (type OID, element OID) of the columns, for their text forms (textforms.converter)
OIDS = [(20, 0), (23, 0), (25, 0), (1043, 0), (1700, 0), (701, 0), (16, 0), (1184, 0), (2950, 0), (3802, 0)]


def records(changes: int) -> list[bytes]:
    """Plugin INSERT records (format 3) of the mixed row with keys 1..changes."""
    out = []
    for n in range(changes):
        row = json.dumps([n + 1, *ROW_VALUES[1:]]).encode()
        out.append(b"I" + struct.pack(">QHBI", UNIT + 24 * n, 0, 0, len(row)) + row)
    return out


def pgoutput_records(changes: int) -> list[tuple]:
    """pgoutput Insert messages of the mixed row with keys 1..changes, as the lane's records
    (PgoutputDecoder.lane_record: the relation's PgoutputRows, table index, message, LSN)."""
    forms = [textforms.native_form(textforms.converter(*oids)) for oids in OIDS]
    rows = native.module().PgoutputRows(list(range(len(OIDS))), forms)
    out = []
    for n in range(changes):
        texts = [str(n + 1).encode(), *TEXTS]
        data = b"I" + struct.pack(">I", 4242) + b"N" + struct.pack(">H", len(texts))
        data += b"".join(b"t" + struct.pack(">I", len(t)) + t for t in texts)
        out.append((rows, 0, data, UNIT + 24 * n, None))
    return out


def change_runs(recs: list, source: str) -> list[ChangeRun]:
    """recs in ChangeRuns of 512 as the source's decoder makes them."""
    if source == "pgoutput":
        def expand(*_):
            raise AssertionError("the lane left a change to Python")
        return [ChangeRun(TXID, 1_000, UNIT, i, recs[i:i + 512], [TABLE.qualified], expand)
                for i in range(0, len(recs), 512)]
    dec = RecordDecoder([TABLE.qualified], "slot", raw_rows=True)
    dec.decode(b"B" + struct.pack(">QQq", UNIT, TXID, 1_000_007))
    return [dec.run(recs[i:i + 512]) for i in range(0, len(recs), 512)]


def run(recs: list, kind: str, use_avro: bool, native_producer: bool, source: str = "plugin") -> float:
    """CPU µs per change of recs through the lane into a new sink."""
    os.environ["PGSHOVEL2_NATIVE_PRODUCER"] = "1" if native_producer else "0"
    env = envelope(kind, use_avro)
    route = TableRoute(TABLE, "bench-lane", env.encoder, env if kind == "debezium" else None)
    sink = KafkaSink(BOOTSTRAP, None, QUEUE)
    assert (type(sink._producer).__module__ == "pgshovel2_native") == native_producer
    em = Emitter("bench", {TABLE.qualified: route}, "bench-lane-txns", None, sink)
    em.version = 1
    runs = change_runs(recs, source)
    prefix = position_prefix(LOGICAL, UNIT)
    em.begin(TXID, prefix, 1_000, ts_us=1_000_007, last_lsn=UNIT - 10)
    started = time.process_time()
    for r in runs:
        assert em.change_run(r, 0, prefix) == len(r.records)
    used = time.process_time() - started
    del em, sink  # drops the producer, which purges what it holds
    return used * 1e6 / len(recs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="one form and producer, e.g. row/json:native (no result file)")
    parser.add_argument("--source", choices=("plugin", "pgoutput"), default="plugin")
    args = parser.parse_args()
    recs = records(args.changes) if args.source == "plugin" else pgoutput_records(args.changes)
    if args.only:
        form, producer = args.only.split(":")
        kind, encoding = form.split("/")
        print(min(run(recs, kind, encoding == "avro", producer == "native", args.source) for _ in range(args.runs)))
        return
    result: dict = {"changes": args.changes, "runs": args.runs, "source": args.source}
    for kind in ("row", "debezium"):
        for use_avro in (False, True):
            name = f"{kind}/{'avro' if use_avro else 'json'}"
            got = {p: min(run(recs, kind, use_avro, p == "native", args.source) for _ in range(args.runs))
                   for p in ("confluent", "native")}
            result[name] = {**{f"{p}_us": round(v, 2) for p, v in got.items()},
                            "ratio": round(got["native"] / got["confluent"], 3)}
            print(name, result[name], flush=True)
    print(f"results: {save_result('lane-cost', result)}")


if __name__ == "__main__":
    main()
