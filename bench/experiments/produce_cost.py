"""What producing one message costs the relay's process, enqueue only (no broker: 127.0.0.1:1
never answers, so nothing is sent): confluent_kafka's Producer.produce from Python -- the call
KafkaSink.produce_many makes for every message -- with the six headers of a data message
(WIRE.md; pgshovel.op, txid, position, ts_ms, set, version) and without headers; and, when cargo is
on PATH, librdkafka's produce called from Rust (bench/experiments/produce_cost_rs, the rdkafka crate; built on
first use, about 3 minutes) with the same headers built per message, and without. CPU µs a message
(time.process_time: all threads), per round; the producer settings are the relay's
(pgshovel2.sinks.kafka.PRODUCER_DEFAULTS, without a transactional id).

It tells what moving the relay's produce calls out of Python (a producer the native lane writes
into) could save against what the encoding costs. The relay's own native producer
(``pgshovel2_native.Producer``, pgshovel2.sinks.producer) is measured as KafkaSink calls it: one
``produce`` call a message (``sink_native_headers_us``), and ``produce_many`` of the whole list
(``sink_native_many_us``); ``sink_confluent_*`` the same through confluent_kafka.

    .venv/bin/python -m bench.experiments.produce_cost [--messages 200000] [--rounds 3] [--no-native]
"""

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.peer.common import save_result, summary
from pgshovel2.sinks.kafka import PRODUCER_DEFAULTS
from pgshovel2.sinks.producer import new_producer

CRATE = Path(__file__).parent / "produce_cost_rs"
VALUE, KEY = b"x" * 300, b'{"id": 12345}'


def headers(ordinal: int) -> list[tuple[str, str]]:
    """A data message's headers (the relay's forms: str values)."""
    return [("pgshovel.op", "c"), ("pgshovel.txid", "123456"),
            ("pgshovel.position", f"0000000001/0000000001/{ordinal:010d}"), ("pgshovel.ts_ms", "1700000000000"),
            ("pgshovel.set", "myset"), ("pgshovel.version", "3")]


def python_round(producer: Producer, messages: int, with_headers: bool) -> float:
    """CPU µs a message of messages produce calls (the messages built beforehand, as the lane does)."""
    batch = [("topic.t", KEY, VALUE, headers(i) if with_headers else None) for i in range(messages)]
    produce = producer.produce
    started = time.process_time()
    for topic, key, value, hdrs in batch:
        produce(topic, value, key, headers=hdrs)
    used = time.process_time() - started
    producer.purge(in_queue=True)
    producer.poll(0)
    return used * 1e6 / messages


def sink_round(settings: dict, messages: int, native: bool, many: bool) -> float:
    """CPU µs a message through the producer KafkaSink makes (pgshovel2.sinks.producer), native or
    confluent_kafka's; many: one produce_many call of the list (native only)."""
    os.environ["PGSHOVEL2_NATIVE"] = "1" if native else "0"
    producer = new_producer(settings, lambda err: None, lambda err, topic, key: None)
    batch = [("topic.t", KEY, VALUE, headers(i)) for i in range(messages)]
    started = time.process_time()
    if many:
        assert producer.produce_many(batch, 0) == messages
    else:
        produce = producer.produce
        for topic, key, value, hdrs in batch:
            produce(topic, value, key, headers=hdrs)
    used = time.process_time() - started
    del producer  # purges what it holds
    return used * 1e6 / messages


def native_rounds(messages: int, rounds: int) -> dict:
    """{native_headers_us, native_no_headers_us}: per round, from bench/experiments/produce_cost_rs."""
    subprocess.run(["cargo", "build", "--release", "-q", "--manifest-path", str(CRATE / "Cargo.toml")], check=True)
    out = subprocess.run([str(CRATE / "target" / "release" / "produce_cost_rs"), str(messages), str(rounds)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-native", action="store_true")
    args = parser.parse_args()
    settings = {"bootstrap.servers": "127.0.0.1:1", **PRODUCER_DEFAULTS, "log_level": 0,
                "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 4_000_000}
    producer = Producer(settings)
    runs: dict[str, list[float]] = {"python_headers_us": [], "python_no_headers_us": []}
    for _ in range(args.rounds):
        runs["python_headers_us"].append(python_round(producer, args.messages, True))
        runs["python_no_headers_us"].append(python_round(producer, args.messages, False))
    if not args.no_native:
        sink = {k: v for k, v in settings.items() if k != "log_level"}
        for name, native, many in (("sink_confluent_headers_us", False, False),
                                   ("sink_native_headers_us", True, False), ("sink_native_many_us", True, True)):
            runs[name] = [sink_round(sink, args.messages, native, many) for _ in range(args.rounds)]
    if not args.no_native and shutil.which("cargo"):
        runs.update(native_rounds(args.messages, args.rounds))
    result = {"messages": args.messages, "rounds": args.rounds, **{k: summary(v) for k, v in runs.items()}}
    print(json.dumps({k: round(v["median"], 2) for k, v in result.items() if isinstance(v, dict)}, indent=2))
    print(f"results: {save_result('produce-cost', result)}")


if __name__ == "__main__":
    main()
