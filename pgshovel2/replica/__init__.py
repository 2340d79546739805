"""Replica apply (``pgshovel replicate``): keep a target PostgreSQL equal to a set's
tables, from a bootstrap (pgshovel2.replica.bootstrap) and the set's topics
(pgshovel2.replica.apply), exactly once across crashes (pgshovel2.replica.state)."""
