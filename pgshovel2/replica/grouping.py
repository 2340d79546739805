"""Turns a batch's changes into as few statements as their order allows.

Consecutive upserts of one table with the same columns become one multi-row
``INSERT ... ON CONFLICT``, consecutive deletes of one table one ``DELETE ...
WHERE (key) IN (...)``, as long as no key repeats inside the group (a second
change of the same row must see the first: it starts a new group). Any other
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
        if kind == "truncate":
            self.close(cur)
            self.statements.append(tmap.truncate(cur))
            return
        key = tuple(_hashable(values[k]) for k in tmap.table.key)
        shape = (tmap.table.qualified, kind, tuple(values) if kind == "upsert" else None)
        if shape != self._shape or key in self._keys:
            self.close(cur)
            self._shape, self._tmap = shape, tmap
        self._rows.append(values)
        self._keys.add(key)

    def raw(self, cur, statement: bytes) -> None:
        """Add a statement of its own (DDL), after everything added so far."""
        self.close(cur)
        self.statements.append(statement)

    def close(self, cur) -> None:
        """Render the open group, if any."""
        if self._rows:
            many = self._tmap.upsert_many if self._shape[1] == "upsert" else self._tmap.delete_many
            self.statements.append(many(cur, self._rows))
        self._shape, self._tmap, self._rows, self._keys = None, None, [], set()
