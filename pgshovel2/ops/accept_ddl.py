"""``pgshovel set accept-ddl SET TABLE [--new-topic]``: the operator's decision on a DDL the set's
relay cannot follow compatibly.

The relay stops at such a change (docs/wire.rst, "DDL on captured tables"): everything before it
is in Kafka, and it waits there, recording where in ZooKeeper (``relay/ddl_stop``,
:mod:`pgshovel2.relay.ddl.gate`). This command checks that the relay waits at a DDL of TABLE and
that the decision covers it, then records the decision (``relay/ddl_decision``: table, position,
mode, who, when, why). The waiting relay (or the next one to start) applies it exactly at the
change:

- default (mode ``schema``): the table's new value schema is registered whatever the subject's
  compatibility (``NONE`` for that one registration, then ``BACKWARD`` again), the set gets a new
  version, and a ``SCHEMA_CHANGED`` record on ``{prefix}.transactions`` marks the place. Refused
  for a change of the key: every key's bytes, hence partitions and compaction, would change;
- ``--new-topic`` (mode ``new-topic``): the table goes on in its next topic generation
  (``{prefix}.{schema}.{table}.g<n>``) with fresh key and value schemas, announced by a
  ``TOPIC_CHANGED`` record at the place, and an online snapshot of the table fills the new topic.
  Works for key changes too; a key whose columns the change dropped is replaced by the table's
  primary key (or replica identity index) as the catalog has it now.

Nothing is written when a check fails.
"""

import getpass
import socket
import time
from dataclasses import replace

from pgshovel2 import tablenames
from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.db import connect
from pgshovel2.errors import RequestError
from pgshovel2.relay import NEW_TOPIC, SCHEMA, ddl_gate
from pgshovel2.setrecord import SetRecord

_KEY_SQL = """
SELECT array_agg(a.attname::text ORDER BY k.i) FROM pg_catalog.pg_index x
CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY k(attnum, i)
JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
WHERE x.indrelid = pg_catalog.to_regclass(%s) AND (x.indisprimary OR x.indisreplident)
GROUP BY x.indexrelid, x.indisprimary ORDER BY x.indisprimary DESC LIMIT 1
"""


def _matches(table: str, tag: str, record: SetRecord) -> bool:
    """Whether the operator's table names the table of tag, as pgshovel2.tablenames reads names:
    ``schema.table``, the quoted tag, or a table name alone when no other table of the set has it.
    Raises RequestError for a name that is ambiguous in the set (listing the candidates)."""
    found = record.table(tag)
    if found is None:
        return table == tag
    try:
        return tablenames.find(table, [(t.schema, t.name) for t in record.tables], record.name) == (
            found.schema, found.name)
    except tablenames.TableNameError as exc:
        if exc.ambiguous:
            raise RequestError(f"{exc}; nothing written") from exc
        return False


def _current_key(record: SetRecord, table: Table) -> list[str] | None:
    """The table's key columns as the catalog has them now (primary key, else replica identity
    index); None for a key declared in the set config, or none."""
    if table.key_source == "config":
        return None
    conn = connect(record.dsn, f"set {record.name!r}", RequestError)
    try:
        with conn.cursor() as cur:
            cur.execute(_KEY_SQL, (table.sql_name,))
            row = cur.fetchone()
            return list(row[0]) if row and row[0] else None
    finally:
        conn.close()


def accept(store: ClusterStore, set_name: str, table: str, new_topic: bool, reason: str) -> dict:
    """Record the decision on the DDL the set's relay waits at (module docstring); returns the
    ``relay/ddl_stop`` record it answers. Raises RequestError (nothing written) when the relay does
    not wait at a DDL of table, or the decision cannot cover the change; ClusterError for no set."""
    record, _ = store.get_set(set_name)
    stop = store.get_relay_record(set_name, ddl_gate.STOP)
    if stop is None:
        raise RequestError(f"set {set_name!r}: its relay does not wait at a DDL (see 'pgshovel set status "
                           f"{set_name}'); nothing written")
    if not _matches(table, stop["table"], record):
        raise RequestError(f"set {set_name!r}: its relay waits at a DDL of {stop['table']}, not of {table!r}; "
                           "nothing written")
    if stop.get("key_change") and not new_topic:
        raise RequestError(f"set {set_name!r}: the change of {stop['table']} at {stop['position']} changes its key "
                           f"({stop['reason']}): every key's bytes would change in its topic, so only --new-topic "
                           "can follow it; nothing written")
    current = record.table(stop["table"])
    key = _current_key(record, current) if new_topic and current is not None else None
    decision = {"table": stop["table"], "position": stop["position"], "mode": NEW_TOPIC if new_topic else SCHEMA,
                "key": key, "by": f"{getpass.getuser()}@{socket.gethostname()}", "at": time.time(),
                "reason": reason, "statement": stop.get("statement")}
    store.put_relay_record(set_name, ddl_gate.DECISION, decision)
    return stop


def describe(set_name: str, stop: dict, new_topic: bool, record: SetRecord) -> str:
    """What the relay does now, for the operator."""
    table = record.table(stop["table"])
    if new_topic and table is not None:
        topic = record.topic(replace(table, generation=table.generation + 1))
        return (f"set {set_name!r}: {stop['table']} goes on in topic {topic} from position {stop['position']} (a "
                "TOPIC_CHANGED record marks it; an online snapshot of the table fills the new topic)")
    return (f"set {set_name!r}: the new value schema of {stop['table']} is registered regardless of compatibility "
            f"and the table goes on in its topic from position {stop['position']} (a SCHEMA_CHANGED record marks it)")
