"""CPU per change of the relay's per-change path in process, without PostgreSQL: the pgoutput
decoder (native decoder on when the module is there) fed an Insert of the mixed table
(bench/experiments/pgoutput_decode.py's row), the change's position header, and the emitter with the row
envelope and Avro producing to a real broker (a plain producer: nothing is sent before the
linger, the queue is purged after each run). Runs ``--runs`` times; reports every run and the
minimum (the least disturbed on a busy machine).

For a count that does not depend on the machine's load, run it under callgrind at two sizes
and divide the difference of the instruction counts by the difference of the sizes:

    valgrind --tool=callgrind .venv/bin/python -m bench.experiments.relay_glue --changes 2000 --runs 1
    valgrind --tool=callgrind .venv/bin/python -m bench.experiments.relay_glue --changes 12000 --runs 1

    .venv/bin/python -m bench.experiments.relay_glue [--changes 50000] [--runs 9]
"""

import argparse
import os
import time

from bench.experiments.pgoutput_decode import INSERT, TABLE, decoder
from bench.peer.common import BOOTSTRAP
from pgshovel2.codec import avro
from pgshovel2.codec.rows import RowEncoder
from pgshovel2.relay.emit.emitter import Emitter
from pgshovel2.relay.emit.routes import TableRoute
from pgshovel2.relay.source import Change
from pgshovel2.sinks.kafka import KafkaSink
from pgshovel2.wire import LOGICAL, change_header_at, position_prefix

QUEUE = {"queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 60_000}


def run(changes: int) -> float:
    """Process CPU µs per change of decode + header + emit + produce of changes Inserts."""
    encoder = RowEncoder(TABLE, True, avro.AvroWriter(avro.key_schema("bench", TABLE), 7),
                         avro.AvroWriter(avro.value_schema("bench", TABLE), 8))
    sink = KafkaSink(BOOTSTRAP, None, QUEUE)
    emitter = Emitter("bench", {TABLE.qualified: TableRoute(TABLE, "bench-glue", encoder)}, "bench-glue-txn",
                      None, sink)
    dec, prefix = decoder(False), position_prefix(LOGICAL, 0x90)
    emitter.begin(5, change_header_at(prefix, 0), 0, 0, 0)
    started = time.process_time()
    for lsn in range(changes):
        for item in dec.feed(INSERT, lsn):
            if type(item) is Change:
                emitter.change(item, change_header_at(prefix, item.ordinal))
    took = time.process_time() - started
    sink._producer.purge()
    return took * 1e6 / changes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    runs = [round(run(args.changes), 2) for _ in range(args.runs)]
    print(f"  µs/change: runs {runs}, min {min(runs)}, load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
