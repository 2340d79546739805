"""A trigger set's PgQ queue as a relay Source (entry :class:`pgshovel2.relay.pgq.source.PgqSource`):
batches read ahead (``ahead``, ``prefetch``), their events (``batch``) and the native lane's
items made of them (``runs``). Imports only :mod:`pgshovel2.relay.source` of the relay."""
