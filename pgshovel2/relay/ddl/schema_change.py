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
- a type change that keeps the Avro type (``varchar(10)`` to ``varchar(20)`` or ``text``,
  ``char(n)`` to ``text``, ``smallint`` to ``integer``) or widens it (:func:`widens`:
  ``integer`` to ``bigint``, int to long; ``real`` to ``double precision``, float to double;
  ``numeric(p,s)`` to ``numeric(p',s)``, p' >= p, the same decimal bytes);
- DROP NOT NULL (``T`` becomes ``["null", T]``, or ``[T, "null"]`` keeping a default); SET NOT
  NULL keeps the field nullable;
- a key column renamed, or retyped as above: the key keeps the layout its schema was made from
  (Table.key_layout), so its registered schema and every key's bytes stay the same; a key value
  that does not fit that layout any more (a bigint beyond 32 bits in a former integer's field)
  stops the relay at its change (errors.KeyLayoutError) until the table goes on in a new topic
  generation;
- RENAME TABLE, ALTER TABLE SET SCHEMA: the table keeps its identity -- tag, topic, Avro names
  -- and the version records where it is now (Table.renamed), which SQL on it uses.

Everything else raises SchemaChangeError with the remedy (``pgshovel set accept-ddl``): another
type change (numeric's scale, numeric(p,s) to numeric, a narrowing, another Avro type), a key
column dropped or retyped otherwise (key_change: only a new topic generation can follow it), a
NOT NULL column without such a default. With accept (the operator's decision)
:func:`new_table` gives the layout anyway: ``schema`` (the value schema changes incompatibly in
the same topic; never the key), ``new-topic`` (the next topic generation, fresh schemas).
No I/O here but that warning: see :mod:`pgshovel2.relay.control`.
"""

import json
import logging
import math
import shlex
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
SCHEMA, NEW_TOPIC = "schema", "new-topic"  # what an operator accepted (pgshovel set accept-ddl [--new-topic])
_WIDENINGS = frozenset({("int2", "int4"), ("int2", "int8"), ("int4", "int8"), ("float4", "float8")})


def stop_message(set_name: str, table: Table, statement: str, reason: str, key_change: bool = False) -> str:
    """The operator's message for a change the relay cannot follow compatibly: what, where, and the
    remedy that works (``pgshovel set accept-ddl``, :mod:`pgshovel2.relay.ddl.gate`)."""
    arg = shlex.quote(f"{table.schema}.{table.name}")
    accept = f"pgshovel set accept-ddl {set_name} {arg}"
    if key_change:
        remedy = (f"the key changes, so the table cannot go on in its topic: '{accept} --new-topic' continues it on "
                  f"topic generation {table.generation + 1} (its topic with '.g{table.generation + 1}'), which an "
                  "online snapshot of the table fills")
    else:
        remedy = (f"'{accept}' registers the new value schema regardless of compatibility and goes on in the same "
                  "topic (a SCHEMA_CHANGED record on the transactions topic marks the place), or "
                  f"'{accept} --new-topic' continues the table on topic generation {table.generation + 1}, which an "
                  "online snapshot of the table fills")
    return (f"set {set_name!r}: DDL on captured table {table.qualified} cannot be relayed compatibly: {reason} "
            f"(statement: {statement.strip()!r}). The relay stopped at the change: every change before it is in "
            f"Kafka, the change and everything after it wait for an operator's decision, which applies exactly "
            f"there (docs/runbooks.rst, 'Relay stopped on DDL'): {remedy}")


def new_table(set_name: str, current: Table, payload: dict[str, Any], statement: str,
              accept: str | None = None, new_key: tuple[str, ...] | None = None) -> Table | None:
    """current's layout after the change in payload; None when the captured layout is unchanged.

    accept: None (only compatible changes), ``schema`` (an operator accepted an incompatible
    change of the value schema: the key still may not change) or ``new-topic`` (the table goes
    on in its next topic generation, with fresh key and value schemas); new_key: the key columns
    to use there when the change dropped the key's (None: keep the key). Raises
    SchemaChangeError (naming set, table, statement, reason and remedy) for a change accept does
    not cover; see the module docstring. A DROP TABLE payload is no layout: the caller handles it.
    """
    def fail(reason: str, key_change: bool = False) -> SchemaChangeError:
        return SchemaChangeError(stop_message(set_name, current, statement, reason, key_change),
                                 current.qualified, statement, reason, key_change)

    if payload.get("dropped"):
        raise fail("the table was dropped")
    fresh = accept == NEW_TOPIC
    now = (payload["schema"], payload["name"])
    renamed = None if now == (current.schema, current.name) else now  # RENAME TABLE / SET SCHEMA: identity stays
    old = {c.attnum: c for c in current.columns}
    rows = {row[1]: row for row in payload["columns"]}
    key_attnums = [c.attnum for c in current.key_columns] if current.key else []
    gone = [a for a in key_attnums if a not in rows or a not in payload["key"]]
    if gone and not (fresh and new_key is not None):
        raise fail(f"key column(s) {_names(old, set(gone))} dropped", key_change=True)
    columns = []
    for attnum in sorted(rows):
        row = rows[attnum]
        if attnum in old:
            columns.append(_changed(old[attnum], column_from_row(row), attnum in key_attnums, fail, accept))
        else:
            columns.append(_added(column_from_row(row), row[10] if len(row) > 10 else None, fail, accept))
    by_attnum = {c.attnum: c for c in columns}
    if fresh:
        key = new_key if gone else tuple(by_attnum[a].name for a in key_attnums)
        return Table(current.schema, current.name, tuple(columns), key, current.key_source, None,
                     current.generation + 1, current.oid, renamed)
    key = tuple(by_attnum[a].name for a in key_attnums)
    table = Table(current.schema, current.name, tuple(columns), key, current.key_source,
                  _key_layout(current, by_attnum), current.generation, current.oid, renamed)
    return None if table == current else table


def widens(old: Column, new: Column) -> bool:
    """Whether new's type holds every value of old's and Avro reads data written in old's field type
    with new's (schema resolution): smallint to integer to bigint (Avro int to long), real to
    double precision (float to double), numeric(p, s) to numeric(p', s) with p' >= p (the same
    decimal bytes)."""
    if old.is_array or new.is_array:
        return False
    if (old.kind, new.kind) in _WIDENINGS:
        return True
    return (old.kind == new.kind == "numeric" and old.precision is not None and new.precision is not None
            and old.scale == new.scale and new.precision >= old.precision)


def _key_form(col: Column) -> tuple:
    """What of a column its key field is made from (codec.avro key_schema)."""
    return col.name, col.pg_type, col.kind, col.is_array, col.precision, col.scale, col.nullable


def _key_layout(current: Table, columns: dict[int, Column]) -> tuple[Column, ...] | None:
    """The key layout after a change (columns: the new ones by attnum): kept once set; set to the
    key columns as they were when a change alters what the key would be made from (a key column
    renamed or widened), so the key's schema and every key's bytes stay the same."""
    if current.key_layout is not None or not current.key:
        return current.key_layout
    before = current.key_columns
    if all(_key_form(c) == _key_form(columns[c.attnum]) for c in before):
        return None
    return before


def _names(columns: dict[int, Column], attnums: set[int]) -> str:
    return ", ".join(repr(columns[a].name) for a in sorted(attnums) if a in columns)


def _changed(old: Column, new: Column, is_key: bool, fail, accept: str | None) -> Column:
    """A column kept by the change (same attnum): renamed, retyped, nullability changed. A key
    column may be renamed or widened (its key field stays: _key_layout), nothing else unless the
    table goes on in a new topic generation."""
    if accept == NEW_TOPIC:
        return replace(new, default=None, aliases=())
    old_avro, new_avro = field_type(old).avro, field_type(new).avro
    same = old_avro == new_avro
    if not same and not widens(old, new) and (is_key or accept is None):
        what = "key column" if is_key else "column"
        raise fail(f"{what} {old.name!r} changed type from {old.pg_type} to {new.pg_type} "
                   f"(Avro {_avro_text(old_avro)} to {_avro_text(new_avro)}"
                   + (": the key's schema, hence every key's bytes and partition, would change)" if is_key else ")"),
                   key_change=is_key)
    aliases = old.aliases + (old.name,) if new.name != old.name else old.aliases
    return replace(new, nullable=old.nullable or new.nullable, default=old.default if same or widens(old, new)
                   else None, aliases=tuple(a for a in aliases if a != new.name))


def _avro_text(avro: Any) -> str:
    if isinstance(avro, dict) and avro.get("logicalType") == "decimal":
        return f"decimal({avro['precision']},{avro['scale']})"
    return avro if isinstance(avro, str) else json.dumps(avro)


def _added(new: Column, missing: Any, fail, accept: str | None) -> Column:
    """A column the change added, with the Avro default that gives the rows existing before the
    change the value PostgreSQL gives them (missing: pg_attribute.attmissingval as JSON, None when
    there is none). A NOT NULL column needs such a default (unless accept: an operator accepted
    the change); a nullable one without one (no DEFAULT, or one Avro defaults cannot hold)
    defaults to null, and the older rows' value is logged as not carried."""
    if accept == NEW_TOPIC:
        return new
    default = _avro_default(new, missing)
    if new.nullable:
        if default is None and missing is not None:
            log.warning("column %r added with DEFAULT %r: the rows that existed before read as null in "
                        "Kafka (a %s default cannot be carried in Avro's field default)",
                        new.name, missing, new.pg_type)
        return replace(new, default=default)
    if default is None and accept is None:
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
