"""Which topics a set's consumer reads: resolved from the set record in
ZooKeeper (config + tables) with the relay's naming rules (pgshovel2.names)."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from pgshovel2 import tablenames
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.setrecord import SetRecord


@dataclass(frozen=True)
class TableTopic:
    """A table of the set and its data topic."""

    schema: str
    name: str
    topic: str

    @property
    def table(self) -> str:
        """``schema.table``, unquoted (as shown to users and in Change.table)."""
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class SetTopics:
    """The topics of a set, possibly restricted to some of its tables.

    transactions: the ``{prefix}.transactions`` topic. tables: the selected
    tables' topics (a table that went on in a new topic generation has one
    entry per topic, oldest first; a dropped table's topic is one too).
    unselected: data topics of the set's other tables (their counts in END
    records, their TRUNCATEs and DDL marks are ignored). encoding: ``avro`` or
    ``json`` (informational: messages are decoded by their first byte).
    """

    set_name: str
    encoding: str
    transactions: str
    tables: tuple[TableTopic, ...]
    unselected: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_record(cls, record: SetRecord) -> "SetTopics":
        """The topics of a set record (from ZooKeeper, or a bootstrap manifest's): its tables' topics,
        after the topics they no longer write (SetRecord.retired: a dropped table's, a table's former
        topic generations), which hold what came before."""
        retired = tuple(TableTopic(r["schema"], r["name"], r["topic"]) for r in record.retired)
        tables = tuple(TableTopic(t.schema, t.name, record.topic(t)) for t in record.tables)
        return cls(record.name, record.config.encoding, record.topics.transactions, retired + tables)

    @classmethod
    def from_store(cls, store: ClusterStore, set_name: str) -> "SetTopics":
        """Read the set record from ZooKeeper. Raises ClusterError if there is no such set."""
        record, _ = store.get_set(set_name)
        return cls.from_record(record)

    @property
    def by_topic(self) -> dict[str, TableTopic]:
        """Data topic -> selected table."""
        return {t.topic: t for t in self.tables}

    def select(self, tables: Iterable[str] | None) -> "SetTopics":
        """Only the given tables (named as pgshovel2.tablenames reads them: ``schema.table``, or a
        bare table name if unique in the set).

        None or empty selects every table. Raises ConsumerError naming a
        table that is not in the set (and the set's tables), or a bare name found in two schemas
        (and those).
        """
        wanted = list(tables or ())
        if not wanted:
            return self
        chosen: list[TableTopic] = []
        every = [(t.schema, t.name) for t in self.tables]
        for name in wanted:
            try:  # one table (its topic generations, a dropped table's: several topics)
                found = tablenames.find(name, every, self.set_name)
            except tablenames.TableNameError as exc:
                raise ConsumerError(str(exc)) from exc
            chosen += [t for t in self.tables if (t.schema, t.name) == found and t not in chosen]
        rest = frozenset(t.topic for t in self.tables if t not in chosen) | self.unselected
        return SetTopics(self.set_name, self.encoding, self.transactions, tuple(chosen), rest)
