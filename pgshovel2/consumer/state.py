"""The current rows of a set's tables, kept from its changes: the consumer library's state helper.

:class:`RowState` applies :class:`~pgshovel2.consumer.model.Change` s in order and keeps one
value per (table, key); an UPDATE whose values the source did not log (``Change.unchanged``,
header ``pgshovel.unchanged``) keeps the previous values of those columns. An UPDATE of the
key arrives as the old key's delete and the new key's create at the same position: the create's
unchanged columns come from the row that delete removed.

Online snapshots: a consumer that starts at a table's ``SNAPSHOT_BEGIN`` (docs/wire.rst) may see
such an UPDATE of a key before the snapshot's op ``r`` row of it. While the table's online
snapshot is in progress (between its ``SNAPSHOT_BEGIN`` and ``SNAPSHOT_END`` records, which the
caller hands in: :meth:`RowState.apply_all` with ``marks``, or :meth:`RowState.snapshot_begin` /
:meth:`RowState.snapshot_end`), the key is kept *incomplete* (not in :attr:`RowState.tables`)
until an op ``r`` row or a change with every value replaces it; one still incomplete at the
table's ``SNAPSHOT_END`` is an error.

Unkeyed tables (``allow_unkeyed``, null keys) are kept as a multiset of rows (docs/wire.rst "Unkeyed
tables"): an INSERT or snapshot row adds one occurrence of its row, a DELETE (op ``d``, its value the
deleted row) removes one occurrence equal to it, an UPDATE is the old row's ``d`` then the new row's
``u`` (Debezium envelope: one ``u`` event, ``before`` removed, ``after`` added). Each occurrence
has a synthetic key in :attr:`RowState.tables`: an int, in the order the rows arrived.
"""

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from pgshovel2.consumer.model import Change, Transaction, TxnRecord

_NAN = ("NaN",)  # a float NaN, which equals no other NaN, as part of a hashable image


def _hashable(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, float) and value != value:
        return _NAN
    return value


class _Multiset:
    """The occurrences of an unkeyed table's rows: row image -> synthetic keys (ints)."""

    def __init__(self) -> None:
        self.by_image: dict[Hashable, list[int]] = {}
        self.next = 0

    def add(self, rows: dict[Hashable, dict[str, Any]], value: dict[str, Any]) -> None:
        """Add one occurrence of value to rows under the next synthetic key."""
        key, self.next = self.next, self.next + 1
        rows[key] = value
        self.by_image.setdefault(_hashable(value), []).append(key)

    def remove(self, rows: dict[Hashable, dict[str, Any]], value: dict[str, Any]) -> None:
        """Remove one occurrence equal to value from rows (the latest added); none: nothing (a row
        from before the state started, as a keyed table's delete of an unknown key)."""
        image = _hashable(value)
        keys = self.by_image.get(image)
        if keys:
            rows.pop(keys.pop(), None)
            if not keys:
                del self.by_image[image]


class RowState:
    """table -> {key -> value} (decoded values, row envelope or Debezium events' ``after``): for a
    keyed table by its key, for an unkeyed one by a synthetic key per occurrence of a row (module
    docstring; ``tables[t].values()`` is the table's rows either way).

    incomplete: table topic -> {key -> the last UPDATE of the key with unchanged values} while
    the table's online snapshot is in progress and the key's previous value was never seen
    (module docstring); such keys are not in tables.

    Raises ValueError from :meth:`apply` when an UPDATE has unchanged columns and the row's
    previous value was never seen outside an online snapshot of its table (start the state from
    the beginning of the topics, or at the table's SNAPSHOT_BEGIN with the marks handed in), and
    from :meth:`snapshot_end` for a key still incomplete then; from :meth:`apply` for an unkeyed
    table's change with unchanged columns (the source always logs their rows whole).
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[Hashable, dict[str, Any]]] = {}
        self._unkeyed: dict[str, _Multiset] = {}  # table -> its occurrences, for tables with null keys
        self.incomplete: dict[str, dict[Hashable, Change]] = {}
        self._online: set[str] = set()  # table topics whose online snapshot is in progress
        self._marks_applied = 0  # marks of apply_all's list applied so far
        self._removed: tuple[str, str, dict[str, Any]] | None = None  # (table, position, value) of the last delete

    def apply_all(self, transactions: Iterable[Transaction], marks: Sequence[TxnRecord] | None = None) -> None:
        """Apply every change of transactions, in order. marks: the reader's SNAPSHOT_BEGIN/END
        records (``SetReader.reassembler.snapshot_marks``, a list that grows while reading; the
        same list on every call): each is applied right before the first change after it (by
        position); those left when transactions end wait for the next call or :meth:`apply_marks`."""
        for txn in transactions:
            for change in txn.changes:
                if marks is not None:
                    self.apply_marks(marks, change.position)
                self.apply(change)

    def apply_marks(self, marks: Sequence[TxnRecord], before: str | None = None) -> None:
        """Apply the marks of the list not applied yet that come before a change at position before
        (None: all of them; call it so once the reader is caught up: every row written before them
        has been applied). Raises ValueError as :meth:`snapshot_end`."""
        while self._marks_applied < len(marks):
            mark = marks[self._marks_applied]
            if before is not None and (mark.position > before if mark.kind == "SNAPSHOT_BEGIN"
                                       else mark.position >= before):
                return
            self._marks_applied += 1
            if mark.kind == "SNAPSHOT_BEGIN":
                self.snapshot_begin(mark.table)
            elif mark.kind == "SNAPSHOT_END":
                self.snapshot_end(mark.table)

    def snapshot_begin(self, topic: str) -> None:
        """The online snapshot of the table of topic (its data topic) starts here."""
        self._online.add(topic)

    def snapshot_end(self, topic: str) -> None:
        """The online snapshot of the table of topic is complete here. Raises ValueError (as
        :meth:`apply` would have at that UPDATE) when a key of it is still incomplete."""
        self._online.discard(topic)
        left = self.incomplete.pop(topic, {})
        if left:
            change = next(iter(left.values()))
            try:
                change.fill_unchanged(None)
            except ValueError as exc:
                raise ValueError(f"{exc} (still at the end of the table's online snapshot, "
                                 f"{len(left)} key(s) so)") from None

    def apply(self, change: Change) -> None:
        """Apply one change (ops c, u, r, d, t; drop: the table was dropped, its rows are gone; schema
        and topic: nothing to apply, a topic change keeps the rows, its new topic's own online
        snapshot refreshes them)."""
        if change.op in ("schema", "topic"):
            return
        if change.op == "drop":
            self.tables.pop(change.table, None)
            self.incomplete.pop(change.topic, None)
            return
        rows = self.tables.setdefault(change.table, {})
        if change.op == "t":
            rows.clear()
            self.incomplete.pop(change.topic, None)
            self._unkeyed.pop(change.table, None)
            return
        if change.key is None:
            self._apply_unkeyed(rows, change)
            return
        key = _hashable(change.key)
        incomplete = self.incomplete.get(change.topic, {})
        incomplete.pop(key, None)
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
            if previous is None and change.topic in self._online:
                rows.pop(key, None)
                self.incomplete.setdefault(change.topic, {})[key] = change
                return
            value = _image(change.fill_unchanged(previous))
        rows[key] = value

    def _apply_unkeyed(self, rows: dict[Hashable, dict[str, Any]], change: Change) -> None:
        """Apply a change of an unkeyed table (null key) to its multiset of rows (module docstring)."""
        if change.value is None:
            return
        value = change.value
        if not isinstance(value, dict):
            raise ValueError(f"{change.topic} offset {change.offset}: an unkeyed table's rows need decoded values")
        change.fill_unchanged(None)  # raises: an unkeyed table's rows are never partial
        rows_of = self._unkeyed.setdefault(change.table, _Multiset())
        if "after" in value and "source" in value:  # a Debezium event
            before, after = value.get("before"), value.get("after")
            if before is not None and change.op in ("u", "d"):
                rows_of.remove(rows, before)
            if after is not None and change.op != "d":
                rows_of.add(rows, after)
        elif change.op == "d":
            rows_of.remove(rows, value)
        else:
            rows_of.add(rows, value)

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
