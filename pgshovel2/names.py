"""Deterministic names derived from PostgreSQL identifiers.

Rules (documented in docs/WIRE-NAMES.rst):

- Kafka topic parts keep ``[A-Za-z0-9_-]``; every other character (including
  ``.``) becomes ``_x`` plus the lowercase hex of each of its UTF-8 bytes,
  e.g. ``Sch.ema`` -> ``Sch_x2eema``. Parts are joined with ``.``.
- Avro names keep ``[A-Za-z0-9_]``, escape the rest the same way, and get a
  leading ``_`` when they would start with a digit.

Collisions after escaping are detected where a set is created.
"""

import re

_TOPIC_SAFE = re.compile(r"[A-Za-z0-9_-]")
_AVRO_SAFE = re.compile(r"[A-Za-z0-9_]")
MAX_TOPIC_LENGTH = 249


def _escape(text: str, safe: re.Pattern) -> str:
    out = []
    for ch in text:
        if safe.fullmatch(ch):
            out.append(ch)
        else:
            out.append("".join(f"_x{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out)


def topic_part(identifier: str) -> str:
    """Escape one identifier (set prefix, schema or table name) for a topic."""
    return _escape(identifier, _TOPIC_SAFE)


def table_topic(prefix: str, schema: str, table: str) -> str:
    """Topic of a table's changes: ``{prefix}.{schema}.{table}``, escaped."""
    return ".".join(topic_part(p) for p in (prefix, schema, table))


def generation_topic(topic: str, generation: int) -> str:
    """The topic of a table's generation (``pgshovel set accept-ddl --new-topic``): topic itself for
    the first, ``{topic}.g<n>`` for the n-th. No table topic ends so: a table topic has exactly
    three parts, each escaped (a ``.`` in a name becomes ``_x2e``)."""
    return topic if generation <= 1 else f"{topic}.g{generation}"


def transactions_topic(prefix: str) -> str:
    """Topic of the BEGIN/END/TRUNCATE records of a set."""
    return f"{topic_part(prefix)}.transactions"


def dead_letter_topic(prefix: str) -> str:
    """Topic of the messages Kafka could not take on their own topic (set policy
    ``oversized: {policy: dead-letter}``; docs/wire.rst, "Dead letters")."""
    return f"{topic_part(prefix)}.dead-letter"


def positions_topic(prefix: str) -> str:
    """Internal topic of the relay's committed positions (one partition, compacted)."""
    return f"{topic_part(prefix)}.positions"


def avro_name(identifier: str) -> str:
    """A valid Avro name for an identifier (record, field or namespace part)."""
    name = _escape(identifier, _AVRO_SAFE)
    return f"_{name}" if name[:1].isdigit() or not name else name


def quote_ident(identifier: str) -> str:
    """SQL-quote an identifier exactly as PostgreSQL's quote_ident would."""
    return '"' + identifier.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    """The quoted, schema-qualified name of a table: ``"schema"."table"``."""
    return f"{quote_ident(schema)}.{quote_ident(table)}"
