"""Snapshots through the relay: a set's initial snapshot (``initial``) and the online snapshot of
tables while the stream goes on (``online``: the chunks between watermarks; ``emission``: a
chunk's rows produced; ``request``: the operator's requests; ``none``: a relay without one)."""
