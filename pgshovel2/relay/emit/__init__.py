"""Relay items -> Kafka messages: where each table's changes go (``routes``: TableRoute), the
:class:`~pgshovel2.relay.emit.emitter.Emitter`, the envelopes (``envelopes``: row; ``debezium``,
``unavailable``), the native lane (``lane``), the oversized-message policy (``oversized``) and the
per-table counts (``tally``). Imports only the items of :mod:`pgshovel2.relay.source` of the relay,
and the codec and sinks below it."""
