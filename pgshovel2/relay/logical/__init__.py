"""A logical set's replication slot as a relay Source (entry
:class:`pgshovel2.relay.logical.source.LogicalSource`): the stream (``stream_reader``, ``feedback``),
the set's tables and their layouts (``tables``, ``relation_layout``), our output plugin's records
(``records``), the native lane's items (``runs``), and PostgreSQL's pgoutput (``pgoutput/``).
Imports only :mod:`pgshovel2.relay.source` of the relay."""
