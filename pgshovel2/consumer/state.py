"""The current rows of a set's tables, kept from its changes: the consumer library's state helper.

:class:`RowState` applies :class:`~pgshovel2.consumer.model.Change` s in order and keeps one
value per (table, key); an UPDATE whose values the source did not log (``Change.unchanged``,
header ``pgshovel.unchanged``) keeps the previous values of those columns. An UPDATE of the
key arrives as the old key's delete and the new key's create at the same position: the create's
unchanged columns come from the row that delete removed.
"""

from collections.abc import Hashable, Iterable
from typing import Any

from pgshovel2.consumer.model import Change, Transaction


def _hashable(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


class RowState:
    """table -> {key -> value} of keyed tables (decoded values, row envelope or Debezium
    events' ``after``). Unkeyed tables are not kept (their deletes are not in the row envelope).

    Raises ValueError from :meth:`apply` when an UPDATE has unchanged columns and the row's
    previous value was never seen (start the state from the beginning of the topics).
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[Hashable, dict[str, Any]]] = {}
        self._removed: tuple[str, str, dict[str, Any]] | None = None  # (table, position, value) of the last delete

    def apply_all(self, transactions: Iterable[Transaction]) -> None:
        """Apply every change of transactions, in order."""
        for txn in transactions:
            for change in txn.changes:
                self.apply(change)

    def apply(self, change: Change) -> None:
        """Apply one change (ops c, u, r, d, t)."""
        rows = self.tables.setdefault(change.table, {})
        if change.op == "t":
            rows.clear()
            return
        if change.key is None:
            return
        key = _hashable(change.key)
        if change.op == "d":
            old = rows.pop(key, None)
            if old is not None:
                self._removed = (change.table, change.position, old)
            return
        if change.value is None:
            return
        value = _image(change.value)
        if change.unchanged:
            previous = rows.get(key) if change.op == "u" else self._moved_from(change)
            value = _image(change.fill_unchanged(previous))
        rows[key] = value

    def _moved_from(self, change: Change) -> dict[str, Any] | None:
        """The row the delete at change's position removed (an UPDATE of the key)."""
        if self._removed is not None and self._removed[:2] == (change.table, change.position):
            return self._removed[2]
        return None


def _image(value: dict[str, Any]) -> dict[str, Any]:
    """A row value: the value itself, or a Debezium event's ``after``."""
    if "after" in value and "source" in value:
        return value["after"]
    return value
