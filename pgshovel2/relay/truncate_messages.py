"""A TRUNCATE of a partition, read through pgoutput: the rows it removed, as DELETEs of the set's table.

PostgreSQL logs a TRUNCATE of one partition as a truncate of that partition, which pgoutput does
not even send when the publication publishes through the partition root. The set's BEFORE
TRUNCATE trigger on the partition (``pgshovel2_pl.truncate_message``,
:mod:`pgshovel2.backends.partitions`) writes the rows first, as transactional logical messages
with prefix ``pgshovel2.truncate`` (at most 1,000 rows each)::

    {"slot": <slot>, "partition": [schema, name], "ancestors": [[schema, name], ...] (nearest first),
     "columns": [name, ...], "rows": [[text or null, ...], ...]}

each value its type's output text under the settings pgoutput's session pins. :func:`deletes`
turns a message of the set's slot into the old rows of the partition's top-most ancestor in the
set (as ``publish_via_partition_root`` picks it), the set's columns picked by name and converted
as pgoutput's own values are: the decoder gives each as the DELETE a DELETE of the row would
have given. (Our plugin does the same in C: sql/decoder/truncate.c.) No I/O.
"""

import json
from typing import Any

from pgshovel2.errors import RelayError
from pgshovel2.names import qualified
from pgshovel2.relay.pgoutput_relations import SetTable

TRUNCATE_PREFIX = b"pgshovel2.truncate"


def deletes(content: bytes, slot: str, tables: dict[str, SetTable]) -> tuple[str, list[list[Any]]] | None:
    """(table tag, old rows in the table's column order) of a ``pgshovel2.truncate`` message, or
    None when it is another slot's or no ancestor of its partition is in tables (the set's, by
    tag). A column of the set's layout the partition no longer has is None (the stream's layout
    follows at the table's next change). Raises RelayError naming the partition when the message
    is malformed or lacks a key column."""
    try:
        msg = json.loads(content)
        if msg["slot"] != slot:
            return None
        tag = None
        for schema, name in msg["ancestors"]:  # nearest first: the last one in the set is the top-most
            if qualified(schema, name) in tables:
                tag = qualified(schema, name)
        if tag is None:
            return None
        partition = qualified(*msg["partition"])
        at = {name: i for i, name in enumerate(msg["columns"])}
        rows = msg["rows"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RelayError(f"malformed pgshovel2.truncate message on slot {slot}: {exc!r}") from exc
    entry = tables[tag]
    picks = [at.get(col.name) for col in entry.table.columns]
    for col, pick in zip(entry.table.columns, picks, strict=True):
        if pick is None and col.name in entry.table.key:
            raise RelayError(f"the rows of a TRUNCATE of partition {partition} lack key column {col.name!r} of "
                             f"table {tag}")
    out = []
    for row in rows:
        out.append([None if pick is None or row[pick] is None else convert(row[pick])
                    for pick, convert in zip(picks, entry.converters, strict=True)])
    return tag, out
