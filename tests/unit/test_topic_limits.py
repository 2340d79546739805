"""A topic's max.message.bytes asked while Kafka does not answer: the relay's outage (retried), not
an answer to assume MAX_MESSAGE_BYTES from (a relay died on the raw TimeoutError in the chaos run)."""

import socket

import pytest
from confluent_kafka.admin import AdminClient

from pgshovel2.errors import UnavailableError
from pgshovel2.relay.supervisor import RETRYABLE
from pgshovel2.sinks.topics import topic_max_message_bytes


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_answer_is_an_outage_the_relay_retries():
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "log_level": 0})
    with pytest.raises(UnavailableError, match="'p.public.t'") as caught:
        topic_max_message_bytes(admin, "p.public.t", timeout=1.0)
    assert isinstance(caught.value, RETRYABLE)
