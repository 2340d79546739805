"""Turns a batch's changes into as few statements as their order allows.

Consecutive upserts of one table with the same columns become one multi-row
``INSERT ... ON CONFLICT``, consecutive deletes of one table one ``DELETE ...
WHERE (key) IN (...)``, as long as no key repeats inside the group (a second
change of the same row must see the first: it starts a new group). An unkeyed
table's consecutive inserts (same columns) become one multi-row ``INSERT``; each
of its deletes is a statement of its own (TableMap.delete_one). Any other
change (another table or kind, a TRUNCATE, DDL) closes the group, so the
statements apply exactly what the changes, one by one and in order, would.
"""

from typing import Any

from pgshovel2.replica.sql import TableMap


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class StatementGroups:
    """Accumulates changes (:meth:`add`) into statements (:attr:`statements`, bytes, in order)."""

    def __init__(self) -> None:
        self.statements: list[bytes] = []
        self._shape: tuple | None = None
        self._tmap: TableMap | None = None
        self._rows: list[dict[str, Any]] = []
        self._keys: set = set()

    def add(self, cur, tmap: TableMap, kind: str, values: dict[str, Any] | None) -> None:
        """Add one classified change (TableMap.classify)."""
        if kind in ("truncate", "delete_one"):
            self.close(cur)
            self.statements.append(tmap.truncate(cur) if kind == "truncate" else tmap.delete_one(cur, values))
            return
        key = tuple(_hashable(values[k]) for k in tmap.table.key) if kind != "insert" else None
        shape = (tmap.table.qualified, kind, tuple(values) if kind != "delete" else None)
        if shape != self._shape or (key is not None and key in self._keys):
            self.close(cur)
            self._shape, self._tmap = shape, tmap
        self._rows.append(values)
        if key is not None:
            self._keys.add(key)

    def raw(self, cur, statement: bytes) -> None:
        """Add a statement of its own (DDL), after everything added so far."""
        self.close(cur)
        self.statements.append(statement)

    def close(self, cur) -> None:
        """Render the open group, if any."""
        if self._rows:
            many = {"upsert": self._tmap.upsert_many, "insert": self._tmap.insert_many,
                    "delete": self._tmap.delete_many}[self._shape[1]]
            self.statements.append(many(cur, self._rows))
        self._shape, self._tmap, self._rows, self._keys = None, None, [], set()
