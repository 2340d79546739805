"""Bootstrapping consumers: a consistent copy of a set's tables at a known
handoff position (written by the Spark job pgshovel2.sparkjobs.bootstrap),
described by a manifest that consumers start the change stream from."""
