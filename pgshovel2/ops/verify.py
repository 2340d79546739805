"""Verify a set end to end: the state rebuilt from its Kafka topics equals the
source tables, row for row (keyed tables), or as a multiset (unkeyed ones).

Rebuild rule: per key the last message by offset wins, a tombstone (or a
Debezium delete event) removes the key, and a TRUNCATE record removes every
row whose position precedes it. Unkeyed tables: every after-image adds a row,
every before-image of a delete or update removes one (row envelope: the value
of an op ``d`` message, which an UPDATE's ``u`` follows at the same position;
Debezium: a ``d`` or ``u`` event's ``before``). Rows are compared as
encoded bytes (the envelope's row images): the source rows are encoded by the
same codec, so equal bytes mean equal values, once each message is in the table's current
layout (pgshovel2.ops.verify_forms: a message written before a DDL is read as the current schema
reads it); a difference is said in decoded values.
"""

import io
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import fastavro
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from pgshovel2 import backends, kafkaconf, wire
from pgshovel2.backends.snapshot import TableReader
from pgshovel2.catalog import Table
from pgshovel2.codec.avro import TRANSACTION_SCHEMA
from pgshovel2.consumer.dead_letters import DeadLetters
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.errors import RelayError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.ops.verify_forms import CurrentForm, describe
from pgshovel2.registryconf import Registry
from pgshovel2.relay import Envelope, table_routes
from pgshovel2.setrecord import SetRecord
from pgshovel2.sinks.registry import SchemaRegistry


@dataclass
class TopicState:
    """Rebuilt state of one table topic."""

    messages: int = 0
    keyed: dict = field(default_factory=dict)       # key bytes -> (position, row image|None)
    unkeyed: list = field(default_factory=list)     # (position, row image) added
    removed: list = field(default_factory=list)     # (position, row image) deleted (unkeyed)
    truncated_at: str = ""                          # position of the last TRUNCATE
    cut: dict = field(default_factory=dict)         # key bytes -> pgshovel.truncated of its last message


@dataclass
class TableReport:
    """Comparison of one table: counts and the first difference, if any."""

    table: str
    topic: str
    messages: int
    rebuilt_rows: int
    source_rows: int
    first_difference: str | None
    note: str | None = None  # a table that ended in the set (dropped at a position): not compared

    @property
    def ok(self) -> bool:
        return self.first_difference is None


def read_topics(bootstrap: Kafka, topics: list[str], timeout: float = 60.0,
                start: dict[tuple[str, int], int] | None = None) -> dict[str, list]:
    """Every committed message (read_committed) of topics, up to the committed end (last stable
    offset) each partition had when the call began, and possibly some after it; from the offsets
    in start ({(topic, partition): offset}) where it has one, else from the beginning.

    A partition is done at once when that end is 0, at its end-of-partition event, or once a
    message at or past the end minus one arrives: under a steady stream of Kafka transactions the
    end-of-partition event of a read_committed consumer may not come for minutes, and the last
    offset before the end is usually a transaction marker, which is never delivered.
    Returns topic -> [(key, value, headers dict)] in offset order per partition.
    Raises ConsumerError naming a missing topic or Kafka's error, TimeoutError when no message
    arrives within timeout (s).
    """
    admin = kafkaconf.admin(bootstrap)
    counts = partition_counts(admin, topics, bootstrap, "to read", timeout)
    ends = end_offsets(admin, [[(t, p) for t in topics for p in range(counts[t])]], bootstrap, timeout)
    consumer = kafkaconf.consumer(bootstrap, "verify", **{"isolation.level": "read_committed",
                                                          "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                                          "enable.partition.eof": True})
    try:
        start = start or {}
        consumer.assign([TopicPartition(t, p, start.get((t, p), OFFSET_BEGINNING)) for t, p in ends])
        out: dict[str, list] = {t: [] for t in topics}
        pending = {where for where, end in ends.items() if end > start.get(where, 0)}
        while pending:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no message within {timeout}s; still reading {sorted(pending)}")
            where = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(where)
                continue
            if where not in pending:
                continue  # past the end of a partition already done
            out[msg.topic()].append((msg.key(), msg.value(), {k: v.decode() for k, v in (msg.headers() or [])}))
            if msg.offset() >= ends[where] - 1:
                pending.discard(where)
        return out
    finally:
        consumer.close()


def resolve_dead_letters(bootstrap: Kafka, messages: dict[str, list]) -> dict[str, list]:
    """messages (read_topics') with each placeholder's value (header ``pgshovel.dead_letter``)
    replaced by the message it stands for, read back from the dead-letter topic."""
    if not any(wire.DEAD_LETTER in h for msgs in messages.values() for _, _, h in msgs):
        return messages
    dead = DeadLetters(bootstrap)
    try:
        return {topic: [(k, dead.value(topic, h[wire.POSITION], k, h[wire.DEAD_LETTER]), h)
                        if wire.DEAD_LETTER in h else (k, v, h) for k, v, h in msgs]
                for topic, msgs in messages.items()}
    finally:
        dead.close()


def truncates(records: list, txn_decode, visible: Callable[[int], bool] = lambda txid: True) -> dict[str, str]:
    """topic -> position of its last TRUNCATE among the transactions topic's records (key, value,
    headers), counting only the records whose txid visible(txid) accepts.

    txn_decode: value bytes -> transaction record dict (:func:`txn_decoder`).
    """
    out: dict[str, str] = {}
    for _, value, _ in records:
        rec = txn_decode(value) if value is not None else {}
        if rec.get("type") == "TRUNCATE" and visible(rec["txid"]):
            out[rec["table"]] = max(out.get(rec["table"], ""), rec["position"])
    return out


def rebuild(messages: list, truncated_at: str, envelope: Envelope, form: CurrentForm | None = None) -> TopicState:
    """Rebuild one topic's state from its messages (key, value, headers).

    envelope: the table's envelope, which turns values into row images; form: brings messages of
    older layouts to the table's current one (None: they are all in it).
    """
    state = TopicState(messages=len(messages), truncated_at=truncated_at)
    moved: tuple[str, bytes] | None = None  # (position, after-image) of the last keyed delete
    for key, value, headers in messages:
        position = headers.get(wire.POSITION, "")
        if headers.get(wire.OP) == "t":
            continue  # a Debezium truncate event: truncated_at (the TRUNCATE record) stands for it
        if form is None:
            before, after = envelope.images(value)
        else:
            before, after = (form.image(i) for i in envelope.images(form.value(value)))
        if key is not None:
            unchanged = headers.get(wire.UNCHANGED)
            if unchanged is not None and after is not None:
                after = _fill(envelope, key, after, json.loads(unchanged), state, moved, position)
            old = state.keyed.get(key)
            if after is None and old is not None and old[1] is not None:
                moved = (position, old[1])
            state.keyed[key] = (position, after)
            state.cut[key] = headers.get(wire.TRUNCATED)
        else:
            _rebuild_unkeyed(state, headers.get(wire.OP), position, before, after)
    return state


def _rebuild_unkeyed(state: TopicState, op: str | None, position: str, before: bytes | None,
                     after: bytes | None) -> None:
    """An unkeyed table's message (images of Envelope.images, op its pgshovel.op) into state: a
    row envelope's ``d`` has its deleted row as the value (images gives it as after)."""
    if op == "d" and before is None:
        before, after = after, None
    if before is not None and op in ("u", "d"):
        state.removed.append((position, before))
    if after is not None:
        state.unkeyed.append((position, after))


def _fill(envelope: Envelope, key: bytes, after: bytes, columns: list[str], state: TopicState,
          moved: tuple[str, bytes] | None, position: str) -> bytes:
    """after with the unchanged columns' values of the row's previous image: the key's (an UPDATE)
    or the row deleted at the same position (an UPDATE of the key). A row never seen before keeps
    the nulls (and so differs from the source: verify reports it)."""
    previous = state.keyed.get(key, (None, None))[1]
    if previous is None and moved is not None and moved[0] == position:
        previous = moved[1]
    if previous is None:
        return after
    return envelope.fill_image(after, previous, envelope.encoder.fields_of(columns))


def rebuilt_rows(state: TopicState) -> tuple[dict, Counter]:
    """(key bytes -> row image of every live keyed row, Counter of unkeyed row images) of a
    rebuilt topic: rows written after its last TRUNCATE."""
    live = lambda pos: pos > state.truncated_at  # noqa: E731
    keyed = {k: v for k, (pos, v) in state.keyed.items() if v is not None and live(pos)}
    unkeyed = Counter(v for pos, v in state.unkeyed if live(pos))
    unkeyed.subtract(v for pos, v in state.removed if live(pos))
    return keyed, unkeyed  # a negative count: a delete of a row never added


def source_images(table: Table, envelope: Envelope, snap: TableReader) -> tuple[dict, Counter]:
    """(key bytes -> row image, Counter of unkeyed row images) of the table's rows in snap, encoded
    by the table's envelope as the relay encodes them (equal bytes: equal values)."""
    keyed: dict = {}
    unkeyed: Counter = Counter()
    encoder = envelope.encoder
    controls = encoder.controls  # with column controls, table is the controlled one
    for row in snap.rows(table if controls is None else controls.source):
        conv = encoder.convert(row)
        key, value = encoder.key(conv), envelope.row_image(conv)
        if key is None:
            unkeyed[value] += 1
        else:
            keyed[key] = value
    return keyed, unkeyed


def compare(table: Table, topic: str, state: TopicState, envelope: Envelope, snap: TableReader,
            form: CurrentForm | None = None) -> TableReport:
    """Compare a rebuilt topic with the table's rows in snap; form (verify_forms.CurrentForm) says a
    difference in decoded values."""
    keyed, unkeyed = rebuilt_rows(state)
    source_keyed, source_unkeyed = source_images(table, envelope, snap)
    diff = None
    if table.key:
        for key in source_keyed.keys() | keyed.keys():
            if source_keyed.get(key) != keyed.get(key):
                diff = describe(form or CurrentForm(table, envelope, None), key, source_keyed.get(key), keyed.get(key))
                if state.cut.get(key):
                    diff += f" (the relay cut {state.cut[key]} to fit Kafka: oversized policy truncate)"
                break
        rebuilt, source = len(keyed), len(source_keyed)
    else:
        if source_unkeyed != unkeyed:
            missing = source_unkeyed - unkeyed
            extra = unkeyed - source_unkeyed
            sample = next(iter(missing or extra))
            diff = (f"{sum(missing.values())} row(s) missing from kafka, {sum(extra.values())} "
                    f"extra; e.g. {sample!r:.120}")
        rebuilt, source = sum(unkeyed.values()), sum(source_unkeyed.values())
    return TableReport(table.qualified, topic, state.messages, rebuilt, source, diff)


def txn_decoder(record: SetRecord) -> Callable[[bytes], dict]:
    """value bytes -> dict of a record of the set's transactions topic (its encoding)."""
    if record.config.encoding == "avro":
        parsed = fastavro.parse_schema(TRANSACTION_SCHEMA)
        return lambda value: fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed)
    return json.loads


def ended_tables(record: SetRecord) -> list[dict]:
    """The set's tables that ended (dropped) as ``{table, topic, position}`` (position: the
    ``pgshovel.position`` of the DROP TABLE in the stream), from the record's retired topics."""
    return [{"table": r["table"], "topic": r["topic"], "position": wire.change_header(record.backend, r["tick"],
                                                                                       r["ordinal"])}
            for r in record.retired if r.get("why") == "dropped"]


def missing_tables(snap: TableReader, tables: list[Table]) -> set[str]:
    """Tags of the tables that do not exist in snap's database (dropped before the relay ended them)."""
    with snap.conn.cursor() as cur:
        cur.execute("SELECT t FROM unnest(%s::text[]) t WHERE pg_catalog.to_regclass(t) IS NULL",
                    ([t.sql_name for t in tables],))
        gone = {r[0] for r in cur.fetchall()}
    return {t.qualified for t in tables if t.sql_name in gone}


MISSING = "not in the source: dropped, and not ended in the set yet (the relay ends it within seconds)"


def verify_set(record: SetRecord, bootstrap: Kafka, registry_url: Registry | None) -> list[TableReport]:
    """Rebuild every table of the set (record: its current version) from Kafka and compare with
    the source now; the tables that ended (dropped) are reported as such, not compared, and so is
    a table the source no longer has.

    The source must be quiescent and the relay caught up for the comparison to be meaningful.
    """
    registry = SchemaRegistry(registry_url, max_wait=30) if registry_url else None
    routes, _ = table_routes(record, registry)
    txn_topic = record.topics.transactions
    txn_decode = txn_decoder(record)
    topics = [r.topic for r in routes.values()]
    messages = resolve_dead_letters(bootstrap, read_topics(bootstrap, topics + [txn_topic]))
    truncated = truncates(messages[txn_topic], txn_decode)
    reports = [TableReport(e["table"], e["topic"], 0, 0, 0, None, f"dropped at position {e['position']}: ended in "
                           "the set, not compared") for e in ended_tables(record)]
    with backends.reader(record, RelayError) as snap:
        missing = missing_tables(snap, [r.table for r in routes.values()])
        for route in routes.values():
            form = CurrentForm(route.table, route.envelope, registry)
            state = rebuild(messages[route.topic], truncated.get(route.topic, ""), route.envelope, form)
            if route.table.qualified in missing:
                reports.append(TableReport(route.table.qualified, route.topic, state.messages, len(rebuilt_rows(
                    state)[0]), 0, MISSING))
                continue
            reports.append(compare(route.table, route.topic, state, route.envelope, snap, form))
    return reports
