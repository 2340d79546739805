"""Kafka sink: a transactional (or idempotent-only) producer, and the set's topics (sinks/topics.py).

The sink knows nothing of PgQ. In transactional mode the relay produces a
batch's messages and calls :meth:`KafkaSink.commit`, which commits one Kafka
transaction (the first produce after a commit begins the next one); a relay
started later with the same transactional id fences this one. In
idempotent-only mode commit waits until every message is acknowledged
(acks=all): at-least-once, kept to measure what transactions cost.

Keyed messages go to the partition Kafka's Java clients choose: murmur2 of
the serialized key, positive, modulo the partition count (WIRE.md "Keys and
partitioning"; librdkafka's own default is CRC32). Null keys go to a random
partition.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pgshovel2 import kafkaaccess, kafkaconf, kafkalog
from pgshovel2.config import TopicsConfig
from pgshovel2.errors import FencedError, RelayError, StopRequestedError, UnavailableError
from pgshovel2.kafkaconf import Kafka
from pgshovel2.sinks.producer import new_producer
from pgshovel2.sinks.topics import MAX_MESSAGE_BYTES, STEP, create_missing_topics, topic_max_message_bytes

log = logging.getLogger(__name__)
# A long transaction timeout lets one Kafka transaction hold a whole initial
# snapshot; a crashed relay's open transaction is aborted as soon as its
# successor calls init_transactions, not after the timeout.
TRANSACTION_TIMEOUT_MS = 900_000
# librdkafka's name for the Java client's default partitioner of keyed messages (murmur2; random
# for a null key). Every producer of set topics uses it: part of the wire contract.
PARTITIONER = "murmur2_random"

# ms. A commit (and a flush) sends what waits at once, whatever linger.ms, so a relay that keeps
# up sends each Kafka transaction's messages in one Produce request per partition at its commit,
# where 5 ms sent several (librdkafka sends a request per partition, and the broker verifies each
# with the transaction coordinator). Against 5: a quarter less broker CPU while streaming, a sixth
# less per change in drains, a few ms more median latency and the same p99 (docs/internals.rst,
# "What a Kafka transaction costs the broker").
LINGER_MS = 100

# The producer's queue: messages enqueued and not yet acknowledged by the broker. librdkafka holds
# about 1 KB of its own a small message (the message, its six headers, list cells) besides key and
# value, so the count bounds the relay's memory in a drain: a 1M-row transaction peaked at 113-152
# MiB of RSS with 500,000 (17 runs), 95-105 MiB with 20,000, at the same drain rate
# (docs/internals.rst).
# The byte bound leaves room for one message of the largest size a set topic takes.
QUEUE_MESSAGES = 20_000
QUEUE_KBYTES = 2 * MAX_MESSAGE_BYTES // 1024

PRODUCER_DEFAULTS = {
    "partitioner": PARTITIONER,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": LINGER_MS,
    "compression.type": "lz4",
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": QUEUE_MESSAGES,
    "queue.buffering.max.kbytes": QUEUE_KBYTES,
    "message.max.bytes": MAX_MESSAGE_BYTES + 1024 * 1024,
}

ROOM_WAIT = 0.002  # s: the longest wait for room in a full queue before producing again
Headers = list[tuple[str, str]]
OnConnection = Callable[[bool, str], None]  # (up, error): KafkaSink's connection state changes
# librdkafka's error events that mean the producer cannot reach its brokers
CONNECTION_ERRORS = frozenset((KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE,
                               KafkaError._AUTHENTICATION, KafkaError._SSL))
# Delivery reports are requested for failures only; serving them every message costs more than
# the produce call itself.
POLL_EVERY = 512


def _error(exc: KafkaException | KafkaError, what: str, needs: str = "") -> RelayError:
    """The relay error for a librdkafka error: denied by Kafka (needs: the ACL it takes), fenced,
    retryable, or fatal."""
    err: KafkaError = exc.args[0] if isinstance(exc, KafkaException) else exc
    if (denied := kafkaaccess.denied(err, what, needs or "the ACLs of the relay")) is not None:
        return denied
    if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return FencedError(f"{what}: another relay of this set took over ({err.str()}); this one stops")
    if err.fatal() or err.code() == KafkaError._FATAL:  # a generic "Local: Fatal error" is not flagged fatal
        return RelayError(f"{what}: fatal Kafka error: {err.str()}")
    return UnavailableError(f"{what}: {err.str()}")


class KafkaSink:
    """Produces to Kafka.

    kafka: the Kafka settings (pgshovel2.kafkaconf: the producer and admin properties), or
    the bootstrap servers with this process's; transactional_id: the set's Kafka
    transactional id, or None for the idempotent-only producer; config:
    librdkafka overrides of pgshovel2's defaults (ValueError for another ``partitioner`` than
    :data:`PARTITIONER`: the partitioning is part of the wire contract). on_connection(up, error):
    told the connection went down (an error event saying the brokers cannot be reached: refused,
    all brokers down, name resolution, authentication, TLS; or a Kafka call given up on, error its
    text) and that it is up (a transactional call or flush that succeeded, error ""). Raises
    KafkaSettingsError for settings librdkafka refuses, naming where they came from.
    """

    def __init__(self, kafka: Kafka, transactional_id: str | None = None, config: dict | None = None,
                 stop: threading.Event | None = None, on_connection: OnConnection | None = None):
        if (config or {}).get("partitioner", PARTITIONER) != PARTITIONER:
            raise ValueError(f"Kafka producer setting partitioner={config['partitioner']!r}: set topics are "
                             f"partitioned with {PARTITIONER!r} (Kafka's murmur2), see WIRE.md")
        kafka = kafkaconf.settings(kafka)
        self.kafka, self.bootstrap, self.transactional_id = kafka, kafka.bootstrap, transactional_id
        self._stop = stop or threading.Event()
        self._connection: OnConnection = on_connection or (lambda up, error: None)
        defaults = {**PRODUCER_DEFAULTS, **({"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS} if transactional_id
                                            else {})}
        ours = {**(config or {}), **({"transactional.id": transactional_id} if transactional_id else {})}
        settings = kafka.config("producer", defaults, ours)
        self._producer = kafkaconf.create(kafka, "producer",
                                          lambda: new_producer(settings, self._on_error, self._delivery_failed))
        self._many = getattr(self._producer, "produce_many", None)  # the native producer's
        self._admin = kafkaconf.admin(kafka)
        self._failed: list[str] = []
        self._in_txn = False
        self._fatal: KafkaError | None = None
        self._fold = kafkalog.Fold()  # error events logged once a minute per kind
        self._credentials = kafkaaccess.Failures()  # an authentication or TLS failure reported
        self._topics: set[str] = set()  # the topics ensure_topics was given: named when Kafka denies WRITE
        self.produced = 0
        self._producer_max = int(settings["message.max.bytes"])
        self._limits: dict[str, tuple[int, str]] = {}
        self._too_large: str | None = None  # a delivery Kafka refused as too large (_delivery_failed)

    def _error(self, exc: KafkaException, what: str) -> RelayError:
        """Map exc, or the fatal error behind a generic "Local: Fatal error", to a relay error:
        an authentication or TLS failure reported meanwhile explains a timeout."""
        if exc.args[0].code() == KafkaError._FATAL and self._fatal is None:
            exc = self._poll_cause() or exc
        failed = kafkaaccess.credentials_error(self._credentials.last, what, self.kafka, "producer")
        cause = self._fatal or exc
        return failed or _error(cause, what, self._needs(kafkaaccess.error_of(cause)))

    def _needs(self, err: KafkaError | None = None) -> str:
        """The ACL the relay's producer lacks when Kafka denies err."""
        if err is not None and err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return f"WRITE and DESCRIBE on TransactionalId {self.transactional_id!r}"
        shown = ", ".join(sorted(self._topics)[:3]) + (", ..." if len(self._topics) > 3 else "")
        return f"WRITE and DESCRIBE on the set's topics ({shown or 'see set inspect'}; an ACL on their prefix)"

    def _poll_cause(self) -> KafkaException | None:
        """Serve the producer's error events (the callback logs them and keeps a fatal one); the
        fatal error when confluent_kafka's poll raises it instead, as it does once fenced."""
        try:
            self._producer.poll(0)
        except KafkaException as cause:
            return cause
        return None

    def _on_error(self, err: KafkaError) -> None:
        # Keep the first fatal error (e.g. fenced): later calls fail with a generic "Local: Fatal
        # error" and _error reports this cause instead.
        self._credentials(err)
        if err.code() in CONNECTION_ERRORS:
            self._connection(False, f"Kafka at {self.bootstrap}: {err.str()}")
        if err.fatal():
            self._fatal = err
        elif (line := self._fold.admit(f"Kafka: {err.str()}")) is not None:
            log.warning("%s", line)

    def start(self, timeout: float = 60.0) -> None:
        """Register the transactional id (fences older relays, aborts their open transaction).

        No-op for the idempotent-only producer. Raises UnavailableError when
        Kafka cannot be reached within timeout (s), FencedError or RelayError.
        """
        if not self.transactional_id:
            return
        what = f"cannot register transactional id {self.transactional_id!r} at {self.bootstrap}"
        self._retrying(self._producer.init_transactions, timeout, what)

    def _retrying(self, call, timeout: float, what: str) -> None:
        """call(seconds) in steps of at most a second until it returns, fails for good or timeout
        (s) passes; a stop request ends the wait (StopRequestedError). librdkafka's transactional
        calls time out with a retriable error and are resumed by calling them again."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                call(max(0.1, min(STEP, deadline - time.monotonic())))
                self._connection(True, "")
                return
            except KafkaException as failed:
                exc = self._poll_cause() or failed  # the events that tell why, or the fatal error
                err = exc.args[0]
                self._refused_as_too_large()  # waiting on would not help: that transaction must be aborted
                if not err.retriable() or time.monotonic() >= deadline or self._credentials.last is not None:
                    failed = self._error(exc, what)
                    if isinstance(failed, UnavailableError) or self._credentials.last is not None:
                        self._connection(False, str(failed))
                    raise failed from exc
                if self._stop.is_set():
                    raise StopRequestedError(f"stopped while waiting for Kafka at {self.bootstrap} ({what})") from exc

    def ensure_topics(self, topics: dict[str, str], settings: TopicsConfig,
                      single_partition: frozenset[str] = frozenset()) -> list[str]:
        """Create missing topics (name -> cleanup.policy) and return their names once served:
        :func:`pgshovel2.sinks.topics.create_missing_topics` with this sink's admin client, its bootstrap
        and its stop request."""
        self._topics.update(topics)
        try:
            created = create_missing_topics(self._admin, self.bootstrap, topics, settings, single_partition, self._stop)
        except UnavailableError as exc:
            self._connection(False, str(exc))
            raise
        self._connection(True, "")
        return created

    def message_limit(self, topic: str) -> tuple[int, str]:
        """(bytes, why): the largest message topic takes -- the smaller of the topic's
        ``max.message.bytes`` (asked from Kafka once per topic; MAX_MESSAGE_BYTES, what the relay
        creates topics with, when Kafka does not tell) and the producer's ``message.max.bytes`` --
        and the settings it comes from, for an error naming them."""
        known = self._limits.get(topic)
        if known is None:
            told = topic_max_message_bytes(self._admin, topic)
            if told is None:
                log.warning("Kafka at %s does not tell topic %r's max.message.bytes: assuming %d",
                            self.bootstrap, topic, MAX_MESSAGE_BYTES)
            topic_max = told if told is not None else MAX_MESSAGE_BYTES
            why = (f"topic {topic!r} max.message.bytes {topic_max}{'' if told is not None else ' (assumed)'}, "
                   f"producer message.max.bytes {self._producer_max}")
            known = self._limits[topic] = (min(topic_max, self._producer_max), why)
        return known

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        """Enqueue one message (beginning a Kafka transaction if none is open).

        Blocks, serving delivery reports, while the producer queue is full.
        """
        if self._fatal is not None or (self.transactional_id and not self._in_txn):
            self._open()  # (tested inline: this runs per message)
        try:
            try:
                self._producer.produce(topic, value, key, headers=headers)
            except BufferError:
                self._produce_when_room(topic, key, value, headers)
            self.produced += 1
            if not self.produced % POLL_EVERY:
                self._producer.poll(0)
        except KafkaException as exc:
            raise self._error(exc, f"cannot produce to {topic!r}") from exc

    def produce_many(self, messages: Iterable[tuple[str, bytes | None, bytes | None, Headers]]) -> None:
        """:meth:`produce` of each (topic, key, value, headers) in order, in one call (the relay's
        native lane gives a run's messages so)."""
        self._open()
        if self._many is not None and isinstance(messages, list):
            self._produce_list(messages)
            return
        producer, topic = self._producer, ""
        try:
            for topic, key, value, headers in messages:
                try:
                    producer.produce(topic, value, key, headers=headers)
                except BufferError:
                    self._produce_when_room(topic, key, value, headers)
                self.produced += 1
                if not self.produced % POLL_EVERY:
                    producer.poll(0)
        except KafkaException as exc:
            raise self._error(exc, f"cannot produce to {topic!r}") from exc

    def produce_natively(self, encode: Callable[[Any, Callable[[], None]], tuple]) -> tuple | None:
        """encode(producer, wait) with the native producer, which a native lane call produces
        into itself (in the Kafka transaction this opens if none is open), calling wait() while
        the producer's queue is full; returns encode's result, whose first item is the number of
        messages it produced. None, calling nothing, when the producer is confluent_kafka's.
        Raises the relay's error of a Kafka error meanwhile (:meth:`produce`'s)."""
        if self._many is None:
            return None
        self._open()
        try:
            result = encode(self._producer, self._wait_for_room)
        except KafkaException as exc:
            raise self._error(exc, "cannot produce the native lane's messages") from exc
        self._count(result[0])
        return result

    def _count(self, produced: int) -> None:
        """Count produced messages, serving delivery reports at every POLL_EVERY-th."""
        before, self.produced = self.produced, self.produced + produced
        if before // POLL_EVERY != self.produced // POLL_EVERY:
            self._producer.poll(0)

    def _produce_list(self, messages: list) -> None:
        """produce_many through the native producer: the whole list in one call, waiting for room
        as :meth:`_produce_when_room` does when the queue is full."""
        done = 0
        try:
            while (done := self._many(messages, done)) < len(messages):
                self._wait_for_room()
        except KafkaException as exc:
            raise self._error(exc, f"cannot produce to {messages[done][0]!r}") from exc
        self._count(len(messages))

    def _open(self) -> None:
        """Raise the producer's fatal error, if any; begin a Kafka transaction if none is open."""
        if self._fatal is not None:
            raise _error(self._fatal, "the Kafka producer failed")
        if self.transactional_id and not self._in_txn:
            self._begin()

    def _produce_when_room(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        """Produce a message the full queue refused (BufferError), serving delivery reports until
        it takes it. Raises StopRequestedError when the relay is asked to stop meanwhile."""
        while True:
            self._wait_for_room()
            try:
                self._producer.produce(topic, value, key, headers=headers)
                return
            except BufferError:
                continue

    def _wait_for_room(self) -> None:
        """Serve delivery reports and sleep ROOM_WAIT s (the queue is full); StopRequestedError
        when the relay is asked to stop. Not poll(timeout): with reports of failures only it lasts
        its whole timeout. Not flush: it sends what lingers at once, in smaller Produce requests
        (a quarter more broker CPU per change in drains)."""
        if self._stop.is_set():
            raise StopRequestedError(f"stopped while Kafka at {self.bootstrap} takes no more messages")
        self._producer.poll(0)
        time.sleep(ROOM_WAIT)

    def _begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._error(exc, "cannot begin a Kafka transaction") from exc
        self._in_txn = True

    def _delivery_failed(self, err: KafkaError, topic: str | None, key: bytes | None) -> None:
        if topic is None:  # the producer is gone (fatal error, purge): no message to name
            self._failed.append(err.str())
        else:
            self._failed.append(f"topic {topic!r}, key {key!r:.80}: {err.str()}")
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE and self._too_large is None:
            self._too_large = self._failed[-1]

    def _refused_as_too_large(self) -> None:
        """Raise RelayError (not retried) when Kafka refused a message as too large although the relay
        found it within the limit it knows (message_limit): the topic's real limit is lower than
        Kafka told, or Kafka did not tell (no DescribeConfigs permission)."""
        if self._too_large is not None:
            failed, self._too_large = self._too_large, None
            known = ", ".join(f"{t}: {why}" for t, (_, why) in self._limits.items())
            raise RelayError(f"Kafka refused a message as too large ({failed}) although it was within the limits "
                             f"the relay knows ({known or 'none asked yet'}): the topic's max.message.bytes or the "
                             "broker's limit is lower than Kafka told the relay, or Kafka told nothing (grant "
                             "DescribeConfigs on the set's topics); fix the limit, or let the set's oversized policy "
                             "see it (a restart asks again), then start the relay")

    def commit(self, timeout: float = 300.0) -> None:
        """Commit the open Kafka transaction (or, idempotent-only, flush everything).

        Returns once everything produced since the last commit is durable in
        Kafka and visible to read_committed consumers. On failure the open
        transaction is aborted and UnavailableError, FencedError or RelayError
        is raised: nothing of it becomes visible.
        """
        if not self.transactional_id:
            self._flush(timeout)
            return
        if not self._in_txn:
            return
        try:
            self._retrying(self._producer.commit_transaction, timeout, "cannot commit the Kafka transaction")
        except BaseException as exc:
            self.abort()
            if isinstance(exc, RelayError):
                self._poll_cause()  # the delivery reports that tell why
                self._refused_as_too_large()
            raise
        finally:
            self._failed.clear()
        self._in_txn = False

    def abort(self, timeout: float = 30.0) -> None:
        """Abort the open Kafka transaction, if any (best effort)."""
        if not self._in_txn:
            return
        self._in_txn = False
        try:
            self._producer.abort_transaction(timeout)
        except KafkaException as exc:
            log.warning("could not abort the Kafka transaction: %s", exc)

    def _flush(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (remaining := self._producer.flush(min(STEP, max(deadline - time.monotonic(), 0)))) \
                and time.monotonic() < deadline:
            if self._stop.is_set():
                raise StopRequestedError(f"stopped with {remaining} message(s) unacknowledged by Kafka")
        if self._failed:
            first, count = self._failed[0], len(self._failed)
            self._failed.clear()
            self._refused_as_too_large()
            raise UnavailableError(f"{count} message(s) not delivered to Kafka; first: {first}")
        if remaining:
            raise UnavailableError(f"{remaining} message(s) still unacknowledged by Kafka at "
                                   f"{self.bootstrap} after {timeout:g}s")
        self._connection(True, "")

    def close(self) -> None:
        """Abort an open transaction; idempotent-only, flush pending messages (best effort).

        Never raises: it runs while another error is on its way out.
        """
        if self.transactional_id:
            self.abort(5)  # whatever is not committed must not be flushed
            return
        try:
            self._producer.flush(10)
        except (KafkaException, SystemError) as exc:  # SystemError: a fatal error pending in a callback
            log.warning("could not flush the Kafka producer: %s", exc)
