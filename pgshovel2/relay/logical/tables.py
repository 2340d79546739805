"""A logical source's tables (:class:`LogicalTables`, held by
:class:`pgshovel2.relay.logical.source.LogicalSource`): our plugin's ``tables`` option, the decoders'
tables of the set version in effect (switched at every set version), and the layouts the stream
reports, resolved against the catalog into schema-change controls."""

from collections.abc import Callable

import psycopg2

from pgshovel2.backends import logical_version, pgoutput
from pgshovel2.catalog import Table
from pgshovel2.db import outage
from pgshovel2.errors import RelayError, UnavailableError
from pgshovel2.relay.logical import relation_layout
from pgshovel2.relay.logical.pgoutput.decoder import PgoutputDecoder, SetTable
from pgshovel2.relay.logical.records import RecordDecoder
from pgshovel2.relay.logical.relation_layout import RelationLayout
from pgshovel2.relay.source import Control
from pgshovel2.setrecord import SetRecord

Decoder = RecordDecoder | PgoutputDecoder


class LogicalTables:
    """The tables of a logical source's slot: the set version in effect (tables, in record order;
    mode_all: tags of tables captured with every column; before_partial: a Debezium set's), our plugin's
    table indexes (tags), the last layout resolved per table. ctl: the source's control connection
    (autocommit); sql: the source's one-row query on it (UnavailableError when the database went
    away). The source's decoder is passed to the methods that set it up: it changes at the start."""

    def __init__(self, ctl, slot: str, sql: Callable[[str, tuple], tuple | None], tables: tuple[Table, ...],
                 mode_all: frozenset[str]):
        self._ctl, self.slot, self._sql = ctl, slot, sql
        self._tables, self._mode_all = tables, mode_all
        self._tags = [t.qualified for t in tables]
        self._before_partial = False
        self._resolved: dict[str, relation_layout.Resolved] = {}

    @property
    def tags(self) -> list[str]:
        """Our plugin's table indexes: the tags of the tables of the last ``tables`` option."""
        return self._tags

    def tables_option(self, decoder: RecordDecoder) -> str:
        """The plugin's ``tables`` option (:func:`pgshovel2.backends.logical.tables_spec`).

        Also fills the decoder's tags and subset_tags. Raises RelayError when a table of the set is not
        found (by its name, else by its recorded OID).
        """
        with self._ctl.cursor() as cur:
            spec, subset = logical_version.tables_spec(cur, self._tables, self._mode_all)
        self._tags = [t.qualified for t in self._tables]  # the spec's order: the plugin's table indexes
        decoder.tags = list(self._tags)
        decoder.subset_tags = subset
        return spec

    def switch(self, record: SetRecord, decoder: Decoder) -> None:
        """The set version in effect from the next item on (the loop calls it at every switch
        and before streaming): the decoder reads the record's tables from there on. A table that
        ended (dropped) keeps its index in our plugin's records until the plugin gets a new
        ``tables`` option (an upgrade's marker, a restart): the indexes of the others stay."""
        upgrade = (record.change or {}).get("kind") == "upgrade"  # its marker gave our plugin new tables
        self._tables, self._mode_all = record.tables, relation_layout.all_mode_tags(record)
        self._before_partial = record.config.envelope == "debezium"  # relation_layout.resolve
        tags = [t.qualified for t in self._tables]
        if upgrade or not set(tags) <= set(self._tags):
            self._tags = tags
        if isinstance(decoder, RecordDecoder):
            decoder.tags = list(self._tags)
            decoder.subset_tags = self._subset_tags()
        elif decoder.tables:
            decoder.subset_tags = self._subset_tags()
            decoder.update({t.qualified: self.set_table(t) for t in self._tables})

    def pgoutput_decoder(self, others: bool) -> PgoutputDecoder:
        """A pgoutput decoder of the set's tables (types of their last resolved layouts, else the
        catalog's; others: the publication has tables outside the set). Raises RelayError when a table
        or captured column of the set no longer exists."""
        decoder = PgoutputDecoder({t.qualified: self.set_table(t) for t in self._tables}, self.slot, others=others)
        decoder.tag_of = self._oids()
        decoder.subset_tags = self._subset_tags()
        return decoder

    def set_table(self, table: Table) -> SetTable:
        """The pgoutput decoder's entry for table: types of its last resolved layout, else the catalog's."""
        resolved = self._resolved.get(table.qualified)
        if resolved is not None and all(c.attnum in resolved.type_oids for c in table.columns):
            return SetTable(table, resolved.type_oids, [resolved.converters[c.attnum] for c in table.columns])
        with self._ctl.cursor() as cur:
            types = pgoutput.known_column_types(cur, table)
        if types.missing:
            raise RelayError(f"table {table.qualified}: captured column(s) {', '.join(types.missing)} "
                             "do not exist any more")
        return SetTable(table, types.type_oids, types.converters)

    def layout(self, layout: RelationLayout) -> Control | None:
        """The schema-change Control a table's reported layout makes (None: the layout in effect)."""
        current = next((t for t in self._tables if t.qualified == layout.tag), None)
        if current is None:
            raise RelayError(f"slot {self.slot} sent the layout of table {layout.tag}, which is not in the set")
        try:
            with self._ctl.cursor() as cur:
                resolved = relation_layout.resolve(cur, layout, current, layout.tag in self._mode_all,
                                                   self._before_partial)
        except psycopg2.Error as exc:
            if outage(exc, self._ctl):
                raise UnavailableError(f"slot {self.slot}: the database went away: {str(exc).strip()}") from exc
            raise
        self._resolved[layout.tag] = resolved
        return relation_layout.to_control(resolved, layout, current)

    def _oids(self) -> dict[int, str]:
        """Relation OID -> tag of the set's tables: the recorded OID (Table.oid), else the OID its
        name has now."""
        out = {}
        for table in self._tables:
            oid = table.oid
            if oid is None:
                row = self._sql("SELECT pg_catalog.to_regclass(%s)::oid::int8", (table.sql_name,))
                oid = row[0] if row else None
            if oid is not None:
                out[oid] = table.qualified
        return out

    def _subset_tags(self) -> set[str]:
        subset = set()
        for table in self._tables:
            row = self._sql("SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                            "AND NOT attisdropped", (table.sql_name,))
            if len(table.columns) < row[0]:
                subset.add(table.qualified)
        return subset

    def in_effect(self, tag: str, decoder: PgoutputDecoder) -> None:
        """pgoutput's layout of table tag is the one in effect: its types, as the stream has them, are
        what the table's rows are decoded with (the live catalog, read at the start, may already be
        at a later DDL: a relay restarted before it)."""
        table = next((t for t in self._tables if t.qualified == tag), None)
        if table is not None:
            decoder.tables[tag] = self.set_table(table)
