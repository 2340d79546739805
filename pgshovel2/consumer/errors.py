"""Errors of the consumer library. All are PgshovelError, so the CLI prints
them as ``error: ...`` and exits 1."""

from pgshovel2.errors import PgshovelError


class ConsumerError(PgshovelError):
    """The set's topics cannot be read or decoded (Kafka, registry, set record)."""


class OrderError(ConsumerError):
    """A message breaks the wire contract's ordering or counting rules.

    Raised for: a position lower than its predecessor's in the same partition;
    a data message beyond its transaction's END count; a data message that
    belongs to no open transaction; an END/TRUNCATE without BEGIN; a
    transaction whose missing messages can no longer arrive (every partition
    of the topic is already past it). topic/partition/offset locate the
    offending message; txid/position are its headers (None when unknown).
    """

    def __init__(self, message: str, *, topic: str, partition: int, offset: int,
                 txid: int | None, position: str | None):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.txid, self.position = txid, position
        super().__init__(f"{message} (topic {topic!r}, partition {partition}, offset {offset}, "
                         f"txid {txid}, position {position})")


class IncompleteTransactionError(ConsumerError):
    """A transaction's END was read but its data messages did not all arrive in time.

    txid: the source transaction; missing: topic -> number of data messages
    still missing; waited: seconds waited since the END was read.
    """

    def __init__(self, txid: int, missing: dict[str, int], waited: float):
        self.txid, self.missing, self.waited = txid, missing, waited
        detail = ", ".join(f"{n} message(s) in topic {t!r}" for t, n in sorted(missing.items()))
        super().__init__(f"transaction txid {txid} is incomplete after waiting {waited:.1f}s for its "
                         f"data: missing {detail}")
