"""Rules for a DDL change of a captured table: the table's new layout, or why it cannot be relayed.

Input is the payload of a schema-change event (ev_type ``S``) that the capture
extension's event trigger (sql/capture, ``pgshovel2.recapture``) writes in the
DDL's own transaction::

    {"schema": str, "name": str, "dropped": false,
     "columns": [[attname, attnum, format_type, nullable, typname, typtype, is_array,
                  elem typname, elem typtype, base typmod, missing value], ...],
     "key": [attnum, ...]}
    {"schema": str, "name": str, "dropped": true}             (DROP TABLE)

Compatible changes (the new Avro schema reads data of the old one: BACKWARD):

- add a nullable column: ``["null", T]`` default null; with a constant DEFAULT of a plain
  Avro type (boolean, int, long, float, double, string; the value pre-existing rows get):
  ``[T, "null"]`` with that default (Avro takes a union's default from its first branch);
  with any other DEFAULT, ``["null", T]`` and a warning that older rows read as null;
- add a NOT NULL column whose pre-existing rows get a constant (``ADD COLUMN ... NOT NULL
  DEFAULT <constant>``) of a plain Avro type: ``T`` with that default;
- drop a non-key column; rename a non-key column (field renamed, ``aliases: [old]``);
- a type change that keeps the Avro type (``varchar(10)`` to ``varchar(20)``);
- DROP NOT NULL (``T`` becomes ``["null", T]``, or ``[T, "null"]`` keeping a default); SET NOT
  NULL keeps the field nullable.

Everything else raises SchemaChangeError: an Avro type change, any change of a key
column (drop, rename, type: the key bytes, hence partitioning and compaction, would
change), a NOT NULL column without such a default, a renamed or dropped table.
No I/O here but that warning: see :mod:`pgshovel2.relay.control`.
"""

import logging
import math
from dataclasses import replace
from typing import Any

from pgshovel2.catalog import Column, Table, column_from_row
from pgshovel2.codec.types import JSON_KINDS, field_type
from pgshovel2.errors import SchemaChangeError

# Avro types a NOT NULL column's default can be given in, and how to convert the
# JSON value PostgreSQL reports for pre-existing rows (pg_attribute.attmissingval).
_DEFAULTS = {"boolean": bool, "int": int, "long": int, "float": float, "double": float, "string": str}
# Kinds whose wire value is not what to_json gives for them.
_TEXT_FORM_KINDS = frozenset({"money", "interval", "timetz", "numeric", *JSON_KINDS})
log = logging.getLogger(__name__)


def stop_message(set_name: str, table: str, statement: str, reason: str) -> str:
    """The operator's message for a change the relay cannot follow."""
    return (f"set {set_name!r}: DDL on captured table {table} cannot be relayed compatibly: {reason} "
            f"(statement: {statement.strip()!r}). The relay stopped at the change: every change before "
            "it is in Kafka, the change and everything after it stay in the queue. This is not retried: "
            "revert the DDL if possible and restart the relay, or re-create the set with a new "
            "topic_prefix (pgshovel set drop / set create, a new snapshot in the new layout)")


def new_table(set_name: str, current: Table, payload: dict[str, Any], statement: str) -> Table | None:
    """current's layout after the change in payload; None when the captured layout is unchanged.

    Raises SchemaChangeError (naming set, table and statement) for an
    incompatible change; see the module docstring.
    """
    def fail(reason: str) -> SchemaChangeError:
        return SchemaChangeError(stop_message(set_name, current.qualified, statement, reason))

    if payload.get("dropped"):
        raise fail("the table was dropped")
    if (payload["schema"], payload["name"]) != (current.schema, current.name):
        raise fail(f"the table was renamed to {payload['schema']}.{payload['name']} (its topic would change)")
    old = {c.attnum: c for c in current.columns}
    rows = {row[1]: row for row in payload["columns"]}
    attnum_of = {c.name: c.attnum for c in current.columns}
    key_attnums = [attnum_of[k] for k in current.key]
    if sorted(payload["key"]) != sorted(key_attnums):
        raise fail(f"key column(s) {_names(old, set(key_attnums) - set(payload['key']))} dropped")
    for attnum in old.keys() - rows.keys():
        if attnum in key_attnums:
            raise fail(f"key column {old[attnum].name!r} dropped")
    columns = []
    for attnum in sorted(rows):
        row = rows[attnum]
        if attnum in old:
            columns.append(_changed(old[attnum], column_from_row(row), attnum in key_attnums, fail))
        else:
            columns.append(_added(column_from_row(row), row[10] if len(row) > 10 else None, fail))
    by_attnum = {c.attnum: c.name for c in columns}
    key = tuple(by_attnum[a] for a in key_attnums)
    table = Table(current.schema, current.name, tuple(columns), key, current.key_source)
    return None if table == current else table


def _names(columns: dict[int, Column], attnums: set[int]) -> str:
    return ", ".join(repr(columns[a].name) for a in sorted(attnums) if a in columns)


def _changed(old: Column, new: Column, is_key: bool, fail) -> Column:
    """A column kept by the change (same attnum): renamed, retyped, nullability changed."""
    old_avro, new_avro = field_type(old).avro, field_type(new).avro
    if old_avro != new_avro:
        raise fail(f"column {old.name!r} changed type from {old.pg_type} to {new.pg_type} "
                   f"(Avro {old_avro} to {new_avro})")
    if is_key and (new.name, new.pg_type, new.nullable) != (old.name, old.pg_type, old.nullable):
        raise fail(f"key column {old.name!r} changed ({old.name} {old.pg_type} to {new.name} {new.pg_type}): "
                   "the key's schema, hence every key's bytes and partition, would change")
    aliases = old.aliases + (old.name,) if new.name != old.name else old.aliases
    return replace(new, nullable=old.nullable or new.nullable, default=old.default,
                   aliases=tuple(a for a in aliases if a != new.name))


def _added(new: Column, missing: Any, fail) -> Column:
    """A column the change added, with the Avro default that gives the rows existing before the
    change the value PostgreSQL gives them (missing: pg_attribute.attmissingval as JSON, None when
    there is none). A NOT NULL column needs such a default; a nullable one without one (no
    DEFAULT, or one Avro defaults cannot hold) defaults to null, and the older rows' value is
    logged as not carried."""
    default = _avro_default(new, missing)
    if new.nullable:
        if default is None and missing is not None:
            log.warning("column %r added with DEFAULT %r: the rows that existed before read as null in "
                        "Kafka (a %s default cannot be carried in Avro's field default)",
                        new.name, missing, new.pg_type)
        return replace(new, default=default)
    if default is None:
        raise fail(f"NOT NULL column {new.name!r} ({new.pg_type}) was added without a value Avro can "
                   "use as the field's default (only a constant DEFAULT of a boolean, integer, finite "
                   "float or text type can be one); add it as a nullable column instead")
    return replace(new, default=default)


def _avro_default(col: Column, missing: Any) -> Any:
    """The value older rows hold (missing: JSON, or text from our plugin) as the Avro default of col's field, or None
    where none can be one: the Avro type must be a primitive whose wire value is the value itself
    (not money, interval, timetz, json or unconstrained numeric, whose text forms differ from
    what to_json gives), and a float finite."""
    if missing is None or col.is_array or col.kind in _TEXT_FORM_KINDS:
        return None
    avro = field_type(col).avro
    convert = _DEFAULTS.get(avro) if isinstance(avro, str) else None
    if convert is None or isinstance(missing, (bool, dict, list)) != (convert is bool):
        return None
    if convert is str and not isinstance(missing, str):
        return None
    try:  # numbers come as JSON numbers (event trigger) or as text (our plugin's layout records)
        default = convert(missing)
    except ValueError:
        return None
    return None if isinstance(default, float) and not math.isfinite(default) else default
