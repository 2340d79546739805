"""The Kafka producer a KafkaSink drives: ``pgshovel2_native.Producer`` (librdkafka through the
rdkafka crate, native/src/producer.rs: a message is enqueued without Python building or parsing
it per header, and a whole list of them in one call) when the extension is installed and takes
the settings, else ``confluent_kafka.Producer``. Both take the same calls (``produce``, ``poll``,
``flush``, ``len``, the transactional calls) and raise confluent_kafka's errors; only the native
one has ``produce_many``. ``PGSHOVEL2_NATIVE=0`` turns it off, as it does the native codec;
``PGSHOVEL2_NATIVE_PRODUCER=0`` turns off only the producer.
"""

import logging
import os
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

from pgshovel2 import kafkalog

log = logging.getLogger(__name__)
_GONE = (KafkaError._FATAL, KafkaError._FENCED, KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
_LOGGED: set[str] = set()

OnError = Callable[[KafkaError], None]
# (error, topic, key): a message that was not delivered; topic and key are None when the error
# took the producer down (a fatal error, a purge), as confluent_kafka's message is unreadable then
OnDelivery = Callable[[KafkaError, str | None, bytes | None], None]


def new_producer(settings: dict[str, Any], on_error: OnError, on_failed: OnDelivery) -> Any:
    """A producer of settings (librdkafka properties; values str, int, float or bool) calling
    on_error for an error event and on_failed for each message not delivered (failures only:
    ``delivery.report.only.error`` is set). Raises confluent_kafka's KafkaException for settings
    neither producer takes."""
    settings = {**settings, "delivery.report.only.error": True}
    native = _native()
    if native is not None:
        try:
            producer = native.Producer([(k, _text(v)) for k, v in settings.items()], on_error, on_failed)
            _log_once("Kafka producer: native (pgshovel2_native)")
            return producer
        except ValueError as exc:  # e.g. a SASL mechanism this librdkafka build lacks
            _log_once(f"Kafka producer: confluent_kafka (the native one refuses these settings: {exc})")

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            gone = err.fatal() or err.code() in _GONE  # msg's methods would fail
            on_failed(err, None if gone else msg.topic(), None if gone else msg.key())

    return Producer({"logger": kafkalog.LIBRDKAFKA, **settings, "error_cb": on_error, "on_delivery": delivered})


def _native() -> Any:
    if "0" in (os.environ.get("PGSHOVEL2_NATIVE", "1"), os.environ.get("PGSHOVEL2_NATIVE_PRODUCER", "1")):
        return None
    try:
        import pgshovel2_native
    except ImportError:
        return None
    return pgshovel2_native if hasattr(pgshovel2_native, "Producer") else None


def _text(value: Any) -> str:
    """A librdkafka property's text: booleans as true/false."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _log_once(line: str) -> None:
    if line not in _LOGGED:
        _LOGGED.add(line)
        log.info(line)
