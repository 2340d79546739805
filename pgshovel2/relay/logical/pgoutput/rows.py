"""Rows that joined or left a set's table without a change, read through pgoutput: as INSERTs and DELETEs.

PostgreSQL logs a TRUNCATE of one partition as a truncate of that partition (which pgoutput does
not even send when the publication publishes through the partition root), and ATTACH / DETACH
PARTITION as catalog changes. The set's triggers (``pgshovel2_pl.emit_messages``,
:mod:`pgshovel2.backends.partitions`) write the rows first, in the same transaction, as
transactional logical messages with prefix ``pgshovel2.rows`` (at most 1,000 rows each)::

    {"slot": <slot>, "op": "D" | "I", "table": [schema, name], "partition": [schema, name],
     "columns": [name, ...], "rows": [[text or null, ...], ...]}

each value its type's output text under the settings pgoutput's session pins. :func:`rows`
turns a message of the set's slot about one of its tables into that table's rows, its columns
picked by name and converted as pgoutput's own values are; the decoder gives each as the INSERT
or DELETE of the row. (Our plugin does the same in C: sql/decoder/rows.c.) No I/O.
"""

import json
from typing import Any

from pgshovel2.errors import RelayError
from pgshovel2.names import qualified
from pgshovel2.relay.logical.pgoutput.relations import SetTable

ROWS_PREFIX = b"pgshovel2.rows"


def rows(content: bytes, slot: str, tables: dict[str, SetTable]) -> tuple[str, str, list[list[Any]]] | None:
    """(op ``D`` or ``I``, table tag, rows in the table's column order) of a ``pgshovel2.rows``
    message, or None when it is another slot's or its table is not in tables (the set's, by tag).
    A column of the set's layout the partition no longer has is None (the stream's layout
    follows at the table's next change). Raises RelayError naming the partition when the message
    is malformed or lacks a key column. A message in our plugin's form (sql/decoder/rows.c: it starts
    with its slot's name, never with ``{``) is another set's: sets of both decoders can capture the
    same tables, and every slot decodes every message."""
    if not content.startswith(b"{"):
        return None
    try:
        msg = json.loads(content)
        if msg["slot"] != slot:
            return None
        tag, op = qualified(*msg["table"]), msg["op"]
        if tag not in tables:
            return None
        if op not in ("D", "I"):
            raise ValueError(f"op {op!r}")
        partition = qualified(*msg["partition"])
        at = {name: i for i, name in enumerate(msg["columns"])}
        values = msg["rows"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RelayError(f"malformed pgshovel2.rows message on slot {slot}: {exc!r}") from exc
    entry = tables[tag]
    picks = [at.get(col.name) for col in entry.table.columns]
    for col, pick in zip(entry.table.columns, picks, strict=True):
        if pick is None and col.name in entry.table.key:
            raise RelayError(f"the rows of {partition} (a pgshovel2.rows message) lack key column {col.name!r} of "
                             f"table {tag}")
    out = [[None if pick is None or row[pick] is None else convert(row[pick])
            for pick, convert in zip(picks, entry.converters, strict=True)] for row in values]
    return op, tag, out
