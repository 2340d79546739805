"""Snapshots through the relay: a set's initial snapshot (``initial``) and the online snapshot of
tables while the stream goes on (``online``), with the operator's requests for it (``request``)."""
