"""What differs between two versions of a set's tables, named per table: tables added or removed;
columns added, removed, renamed, retyped (old type -> new type) or made (not) nullable; the key
and where it comes from; the topic; anything else of the stored layout. Used by ``set upgrade
--dry-run`` (:mod:`pgshovel2.ops.upgrade`) and ``set inspect --history``
(:func:`pgshovel2.ops.admin.history_lines`)."""

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from pgshovel2 import controlsconf
from pgshovel2.catalog import Column, Table
from pgshovel2.config import SetConfig
from pgshovel2.controlsconf import ColumnControl


@dataclass
class TableChange:
    """How one table differs between two set versions.

    table: its tag (Table.qualified, as ``set inspect`` shows it); kind: added, removed or
    changed. columns_retyped and columns_nullability: ``name: old -> new``; columns_renamed:
    ``old -> new`` (the same attnum); columns_other: ``name: what`` for a column whose stored
    layout changed otherwise (attnum: dropped and added again; its Avro default; its former names).
    key and key_source: (old, new) when they changed; topic: (old, new) topic names; other: the
    names of the stored table's other fields that changed (renamed, key_layout).
    old_rows: an unkeyed table whose capture trigger starts writing every UPDATE's old row.
    controls: ``column: old -> new`` for each column whose control (config controls) changed.
    """

    table: str
    kind: str
    columns_added: list[str] = field(default_factory=list)
    columns_removed: list[str] = field(default_factory=list)
    columns_renamed: list[str] = field(default_factory=list)
    columns_retyped: list[str] = field(default_factory=list)
    columns_nullability: list[str] = field(default_factory=list)
    columns_other: list[str] = field(default_factory=list)
    key: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    key_source: tuple[str, str] | None = None
    topic: tuple[str, str] | None = None
    other: list[str] = field(default_factory=list)
    old_rows: bool = False
    controls: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the operator."""
        parts = [f"{self.kind} table {self.table}"]
        if self.old_rows:
            parts.append("unkeyed: its capture trigger (from an older pgshovel2) will capture every UPDATE's old row")
        for label, items in (("columns added", self.columns_added), ("columns removed", self.columns_removed),
                             ("columns renamed", self.columns_renamed), ("columns retyped", self.columns_retyped),
                             ("nullability", self.columns_nullability), ("columns changed", self.columns_other)):
            if items:
                parts.append(f"{label}: " + ", ".join(items))
        if self.key:
            parts.append(f"key ({', '.join(self.key[0])}) -> ({', '.join(self.key[1])})")
        if self.key_source:
            parts.append(f"key from {self.key_source[0]} -> {self.key_source[1]}")
        if self.topic:
            parts.append(f"topic {self.topic[0]} -> {self.topic[1]}")
        if self.other:
            parts.append("changed: " + ", ".join(self.other))
        if self.controls:
            parts.append("controls: " + ", ".join(self.controls))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: table, kind and only the differences found."""
        out: dict[str, Any] = {"table": self.table, "kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in out and value:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


def settings(before: SetConfig, after: SetConfig) -> list[str]:
    """The config fields other than tables and oversized (which the table changes and the plan name)
    that differ, each ``path: old -> new`` (a DSN's values are not shown: ``path: changed``)."""
    old, new = _flat(before.to_dict()), _flat(after.to_dict())
    out = []
    for path in sorted(old.keys() | new.keys()):
        if path.startswith(("tables", "oversized")) or old.get(path) == new.get(path):
            continue
        out.append(f"{path}: changed" if "dsn" in path else f"{path}: {old.get(path)!r} -> {new.get(path)!r}")
    return out


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def table_changes(before: tuple[Table, ...], after: tuple[Table, ...], topic_before: Callable[[Table], str],
                  topic_after: Callable[[Table], str], old_rows: frozenset[str] = frozenset(),
                  controls: dict[str, list[str]] | None = None) -> list[TableChange]:
    """The changes from the tables before to the tables after, by tag, in tag order; topic_before and
    topic_after give a table's topic in each version. old_rows: tags whose capture trigger must be
    replaced even when the table is unchanged; controls: tag -> its column controls' changes
    (:func:`control_changes`), a change of the table too."""
    controls = controls or {}
    old = {t.qualified: t for t in before}
    new = {t.qualified: t for t in after}
    out = []
    for tag in sorted(old.keys() | new.keys()):
        b, a = old.get(tag), new.get(tag)
        if b is None:
            out.append(TableChange(tag, "added"))
        elif a is None:
            out.append(TableChange(tag, "removed"))
        elif b != a or tag in old_rows or topic_before(b) != topic_after(a) or controls.get(tag):
            change = changed(b, a, topic_before(b), topic_after(a), tag in old_rows)
            change.controls = controls.get(tag, [])
            out.append(change)
    return out


def control_changes(before: SetConfig, after: SetConfig, tags: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    """Tag -> ``column: old -> new`` for every column whose control differs between the configs (tags:
    (schema, name) as configured -> the table's tag); tables without a change are left out."""
    old = {(tc.schema, tc.name): {c.column: c for c in tc.controls} for tc in before.tables}
    out: dict[str, list[str]] = {}
    for tc in after.tables:
        was, now = old.get((tc.schema, tc.name), {}), {c.column: c for c in tc.controls}
        lines = [f"{col}: {_control(was.get(col))} -> {_control(now.get(col))}"
                 for col in sorted(was.keys() | now.keys()) if was.get(col) != now.get(col)]
        if lines and (tc.schema, tc.name) in tags:
            out[tags[(tc.schema, tc.name)]] = lines
    return out


def _control(control: ColumnControl | None) -> str:
    """A control as the plan shows it (controlsconf.describe without the column; none: no control)."""
    return "none" if control is None else controlsconf.describe(control).split(" ", 1)[1]


def changed(before: Table, after: Table, topic_before: str, topic_after: str, old_rows: bool = False) -> TableChange:
    """The TableChange of a table in both versions; names every difference of its stored layout."""
    change = TableChange(after.qualified, "changed", old_rows=old_rows)
    _columns(change, {c.name: c for c in before.columns}, {c.name: c for c in after.columns})
    if before.key != after.key:
        change.key = (before.key, after.key)
    if before.key_source != after.key_source:
        change.key_source = (before.key_source, after.key_source)
    if topic_before != topic_after:
        change.topic = (topic_before, topic_after)
    change.other = [name for name in ("renamed", "key_layout") if getattr(before, name) != getattr(after, name)]
    if before.columns != after.columns and not _described_columns(change):
        change.other.append("column order")
    return change


def _columns(change: TableChange, b: dict[str, Column], a: dict[str, Column]) -> None:
    by_attnum = {c.attnum: c for c in b.values()}
    renamed = set()
    added = sorted(a.keys() - b.keys())
    removed = sorted(b.keys() - a.keys())
    for name in list(added):
        was = by_attnum.get(a[name].attnum)
        if was is not None and was.name in removed:
            change.columns_renamed.append(f"{was.name} -> {name}")
            added.remove(name)
            removed.remove(was.name)
            b = {**b, name: was}
            renamed.add(name)
    change.columns_added, change.columns_removed = added, removed
    for name in sorted(b.keys() & a.keys()):
        old, new = b[name], a[name]
        if old.pg_type != new.pg_type or old.is_array != new.is_array:
            change.columns_retyped.append(f"{name}: {old.pg_type} -> {new.pg_type}")
        if old.nullable != new.nullable:
            change.columns_nullability.append(f"{name}: {_null(old)} -> {_null(new)}")
        rest = [f for f in ("attnum", "default", "aliases")
                if getattr(old, f) != getattr(new, f) and not (f == "aliases" and name in renamed)]
        if rest:
            change.columns_other.append(f"{name}: {', '.join(rest)}")


def _null(column: Column) -> str:
    return "null" if column.nullable else "not null"


def _described_columns(change: TableChange) -> bool:
    return any((change.columns_added, change.columns_removed, change.columns_renamed, change.columns_retyped,
                change.columns_nullability, change.columns_other))
