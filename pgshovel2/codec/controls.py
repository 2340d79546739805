"""Column controls applied (config: :mod:`pgshovel2.controlsconf`): a table's rows as they leave the
relay, and the table as its schemas describe it.

A row here is a list of trigger-form values in the order of the table's columns, as every path
hands it to the codec (captured changes of both backends, snapshots, online snapshots,
bootstraps); the controlled row has the same columns. Excluded columns are not here: they are
never captured (:func:`pgshovel2.catalog.resolve_table`).

- mask N: a non-null value becomes N ``*`` (the column is ``text``);
- hash: a non-null value becomes the lowercase hex SHA-256 of the salt's UTF-8 bytes followed by the
  value's text as the JSON encoding writes it (docs/wire.rst): a string's characters (text, dates
  ``1985-03-01``, timestamps, numerics, uuids, ...), another value's compact JSON (integers,
  floats, booleans ``true``/``false``, arrays, json objects). For text, varchar, date and integer
  columns that is PostgreSQL's ``encode(sha256(convert_to(salt || value::text, 'UTF8')), 'hex')``;
  the column is ``text``;
- truncate N: a string longer than N characters is cut to its first N (the type stays).

NULL stays NULL. Pure: the salts come read (:func:`pgshovel2.controlsconf.salts`).
"""

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from pgshovel2.catalog import Column, Table, column_index, wire_table
from pgshovel2.codec.types import field_type
from pgshovel2.controlsconf import ColumnControl

Rule = Callable[[Any], Any]


class ColumnControls:
    """The controls of one table (its columns' in table order: rules by column index).

    table: the table as resolved (the catalog's types); controls: its config's; salts: column name ->
    the salt of each hashed column (controlsconf.salts). Raises KeyError for a hashed column
    without its salt.

    source: the table as resolved, whose rows are read (a pgoutput set's text forms are converted by
    its column types); table: as the controls make it, for schemas and encoders.
    """

    def __init__(self, table: Table, controls: tuple[ColumnControl, ...], salts: Mapping[str, bytes]):
        self.source = table
        index = column_index(table)  # a control follows its column through a RENAME COLUMN
        self._rules: list[tuple[int, Rule]] = []
        for control in controls:
            i = index.get(control.column)
            if i is None or control.action == "exclude":
                continue  # excluded: not captured; a column a DDL dropped: nothing to control
            self._rules.append((i, _rule(control, table.columns[i], salts)))
        self.table = wire_table(table, controls)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def apply(self, row: list) -> list:
        """The controlled row (a copy; row unchanged)."""
        out = list(row)
        for i, rule in self._rules:
            value = out[i]
            if value is not None:
                out[i] = rule(value)
        return out


def controlled(table: Table, controls: tuple[ColumnControl, ...], salts: Mapping[str, bytes]) -> ColumnControls | None:
    """table's ColumnControls (see the class), None when no control changes a value of table."""
    made = ColumnControls(table, controls, salts)
    return made if made else None


def _rule(control: ColumnControl, column: Column, salts: Mapping[str, bytes]) -> Rule:
    if control.action == "mask":
        mask = "*" * (control.length or 0)
        return lambda _value: mask
    if control.action == "truncate":
        n = control.length or 0
        return lambda value: value[:n] if isinstance(value, str) else value
    salt = salts[control.column]
    to_json = field_type(column).to_json  # the value as the JSON encoding writes it (None: as captured)
    if to_json is None:
        return lambda value: _digest(salt, value)
    return lambda value: _digest(salt, to_json(value))


def _digest(salt: bytes, value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(salt + text.encode("utf-8")).hexdigest()
