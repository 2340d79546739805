"""``pgshovel set status NAME``: how far a set's relay is, from every place that knows.

- queue lag (events, seconds) of the relay's PgQ consumer: pgq.get_consumer_info on the
  set's database (``None`` when the database does not answer; ``error`` says why);
- the active relay and standbys: the election znodes (pgshovel2.relay.election.status);
- the last committed position: the set's positions topic (pgshovel2.relay.positions);
- read_committed end offsets of the set's topics (Kafka).
"""

import time
import uuid
from typing import Any

import psycopg2
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pgshovel2 import names
from pgshovel2.bootstrap.export import redacted
from pgshovel2.capture.trigger import CONSUMER
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.consumer.topics import SetTopics
from pgshovel2.errors import PgshovelError, UnavailableError
from pgshovel2.relay import election, logical_source, pgq_source
from pgshovel2.relay.positions import Position


def wait_caught_up(record: dict[str, Any], timeout: float = 120.0) -> None:
    """Wait until the set's relay has relayed everything committed before the call (either backend:
    its PgQ consumer finished the events, or its slot confirmed the WAL). Raises RelayError on timeout."""
    dsn = record["config"]["dsn"]
    if record["config"]["backend"] == "logical":
        logical_source.wait_caught_up(dsn, record["slot"], timeout)
    else:
        pgq_source.wait_caught_up(dsn, record["queue"], record["consumer"], timeout)


def _one_row(dsn: str, query: str, params: tuple) -> tuple | dict[str, str] | None:
    """The first row of query on dsn, None when there is none, or {error} when the database fails."""
    try:
        conn = psycopg2.connect(dsn, connect_timeout=5)
    except psycopg2.Error as exc:
        return {"error": f"database does not answer: {str(exc).strip()}"}
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchone()
    except psycopg2.Error as exc:
        return {"error": str(exc).strip()}
    finally:
        conn.close()


def queue_lag(dsn: str, queue: str) -> dict[str, Any]:
    """{lag_seconds, pending_events, last_tick} of the relay's consumer, or {error}."""
    row = _one_row(dsn, "SELECT extract(epoch FROM lag)::float8, pending_events, last_tick "
                        "FROM pgq.get_consumer_info(%s, %s)", (queue, CONSUMER))
    if row is None:
        return {"error": f"no consumer {CONSUMER} on queue {queue}"}
    return row if isinstance(row, dict) else dict(zip(("lag_seconds", "pending_events", "last_tick"), row,
                                                      strict=True))


def slot_lag(dsn: str, slot: str) -> dict[str, Any]:
    """{lag_seconds, lag_bytes, retained_bytes, wal_status} of a logical set's slot, or {error}."""
    row = _one_row(dsn, "SELECT lag_seconds, lag_bytes, retained_bytes, wal_status FROM pgshovel2_decoder.slot_lag "
                        "WHERE slot_name = %s", (slot,))
    if row is None:
        return {"error": f"no replication slot {slot} (the relay creates it on its first start)"}
    return row if isinstance(row, dict) else dict(zip(("lag_seconds", "lag_bytes", "retained_bytes", "wal_status"),
                                                      row, strict=True))


def kafka_status(set_name: str, record: dict[str, Any], bootstrap: str) -> dict[str, Any]:
    """{position: last committed position record or None, end_offsets: {topic: {partition: offset}}}."""
    prefix = record["config"].get("topic_prefix") or set_name
    topics = SetTopics.from_record(set_name, record)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names_ = [t.topic for t in topics.tables] + [topics.transactions]
    try:
        counts = partition_counts(admin, names_, bootstrap, f"of set {set_name!r}", 10)
        offsets = end_offsets(admin, [[(t, p) for t in names_ for p in range(counts[t])]], bootstrap, 10)
    except PgshovelError as exc:
        return {"error": str(exc), "position": None, "end_offsets": {}}
    nested: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        nested.setdefault(t, {})[str(p)] = o
    return {"position": None, "end_offsets": nested, "positions_topic": names.positions_topic(prefix)}


def last_position(bootstrap: str, topic: str, key: str, timeout: float = 10.0) -> Position | None:
    """The last committed position record with key among the last 256 records of topic, read up
    to the end offset as of the call (a busy relay keeps writing: never wait for the end).
    Raises UnavailableError when Kafka does not answer within timeout (s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pgshovel2-status-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        except KafkaException as exc:
            raise UnavailableError(f"cannot read the relay position from {topic!r}: {exc}") from exc
        consumer.assign([TopicPartition(topic, 0, max(low, high - 256))])
        last, deadline = None, time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.key() == key.encode():
                last = msg.value()
            if msg.offset() >= high - 1:
                break
        return Position.decode(last) if last is not None else None
    finally:
        consumer.close()


def set_status(store: ClusterStore, set_name: str, bootstrap: str) -> dict[str, Any]:
    """Everything above as one JSON-able dict. Raises ClusterError for no such set."""
    record, _ = store.get_set(set_name)
    out: dict[str, Any] = {"set": set_name, "version": record["version"], "queue": record["queue"],
                           "database": redacted(record["config"]["dsn"])}
    if record["config"]["backend"] == "logical":
        out["slot_lag"] = slot_lag(record["config"]["dsn"], record["slot"])
    else:
        out["queue_lag"] = queue_lag(record["config"]["dsn"], record["queue"])
    out["relays"] = election.status(store, set_name)
    out["last_error"] = store.get_relay_record(set_name, "last_error")
    out["kafka"] = kafka_status(set_name, record, bootstrap)
    try:
        pos = last_position(bootstrap, out["kafka"]["positions_topic"], f"{store.cluster}/{set_name}") \
            if "positions_topic" in out["kafka"] else None
        out["kafka"]["position"] = None if pos is None else pos.__dict__
    except PgshovelError as exc:
        out["kafka"]["position_error"] = str(exc)
    return out


def lines(info: dict[str, Any]) -> list[str]:
    """set_status's dict as a short table for the terminal."""
    if "slot_lag" in info:
        lag = info["slot_lag"]
        lag_text = lag.get("error") or (f"slot {lag['lag_bytes']} bytes behind, {lag['retained_bytes']} retained, "
                                        f"{lag['lag_seconds'] or 0:.1f}s, WAL {lag['wal_status']}")
    else:
        lag = info["queue_lag"]
        lag_text = lag.get("error") or \
            f"{lag['pending_events']} events, {lag['lag_seconds'] or 0:.1f}s (tick {lag['last_tick']})"
    active = (info["relays"]["active"] or {}).get("identity", "none")
    kafka = info["kafka"]
    pos = kafka.get("position")
    out = [f"set {info['set']} (version {info['version']}, queue {info['queue']}, {info['database']})",
           f"  queue lag:        {lag_text}",
           f"  active relay:     {active} ({len(info['relays']['contenders'])} contending)",
           "  committed at:     " + (f"tick {pos['tick']} event {pos['ordinal']} (set version {pos['set_version']})"
                                       if pos else kafka.get("position_error", "nothing committed yet"))]
    if kafka.get("error"):
        out.append(f"  kafka:            {kafka['error']}")
    if err := info.get("last_error"):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(err["at"]))
        out.append(f"  last relay error: {when} {err['kind']} ({err['relay']}): {err['message'][:300]}")
    for topic, parts in kafka.get("end_offsets", {}).items():
        out.append(f"  {topic}: " + ", ".join(f"[{p}] {o}" for p, o in parts.items()))
    return out
