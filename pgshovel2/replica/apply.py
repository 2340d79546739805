"""Replica apply: a set's source transactions (pgshovel2.consumer.SetReader) applied
to a target PostgreSQL, each batch in ONE target transaction that also updates the
target's position row (pgshovel2.replica.state), so apply is exactly-once across
crashes: a restarted replica reads its row and resumes at the stored offsets, and
additionally skips any transaction at or below the stored relay position.

Batching: while transactions arrive back to back (the replica is behind), up to
``batch_changes`` changes of consecutive source transactions go into one target
transaction; a batch is also committed after ``batch_delay`` seconds, or when the
topics are idle. ``batch_changes=1`` applies every source transaction alone.

Unkeyed tables are applied as multisets (pgshovel2.replica.sql.TableMap): their deletes remove one
row equal to the deleted one, their UPDATEs are the old row's delete then the new row's insert.

Set versions: a change carrying a newer ``pgshovel.version`` header than the target
applied first gets the target's tables altered to that version's layout, in the same
target transaction (pgshovel2.replica.sql.alter_table; new tables are created).
The target session runs with ``session_replication_role = replica`` (no user triggers,
no foreign-key checks: the source already checked them).
"""

import logging
import threading
import time
from dataclasses import dataclass

from pgshovel2.catalog import Table
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import Change, ConsumerError, OrderError, SetReader, SetTopics, Transaction
from pgshovel2.consumer.model import DDL_OPS
from pgshovel2.db import connect
from pgshovel2.kafkaconf import Kafka
from pgshovel2.registryconf import Registry
from pgshovel2.replica import state
from pgshovel2.replica.grouping import StatementGroups
from pgshovel2.replica.sql import ReplicaError, TableMap, added_columns, alter_table, create_table
from pgshovel2.replica.state import ReplicaState
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)
DDL_MARKS = frozenset(DDL_OPS.values())  # ops of the changes a DDL's transactions-topic record makes


@dataclass(frozen=True)
class ApplyOptions:
    """bootstrap: Kafka servers; registry_url: schema registry (Avro sets).
    batch_changes: most changes per target transaction (1: one source transaction each).
    batch_delay: seconds a batch may wait for more transactions. progress_interval: seconds."""

    bootstrap: Kafka
    registry_url: Registry | None = None
    batch_changes: int = 5000
    batch_delay: float = 0.2
    progress_interval: float = 10.0


def replica_role_grant(conn) -> str:
    """What the target's role needs to apply in replica mode (no user triggers or foreign-key checks
    on applied rows), for an error: a superuser, or from PostgreSQL 15 on the grant of that setting."""
    with conn.cursor() as cur:
        cur.execute("SELECT current_user, current_setting('server_version_num')::int")
        role, version = cur.fetchone()
    conn.rollback()
    if version >= 150000:
        return (f"a superuser runs GRANT SET ON PARAMETER session_replication_role TO \"{role}\" on the target "
                "(docs/security.rst, 'pgshovel replicate')")
    return f"on PostgreSQL before 15 only a superuser may: connect to the target as one (role {role} is not)"


class Replicator:
    """Applies one set to one target until stopped (or caught up)."""

    def __init__(self, store: ClusterStore, set_name: str, target_dsn: str, options: ApplyOptions):
        self.store, self.set_name, self.options = store, set_name, options
        self.target = connect(target_dsn, "the replica target", ReplicaError)
        self.transactions = self.changes = self.skipped = 0
        self.commits = 0  # target transactions committed by this process
        record, _ = store.get_set(set_name)
        self.txn_topic = record.topics.transactions  # the prefix never changes
        with self.target.cursor() as cur:
            state.migrate(cur)  # an older target's position table gains its new columns
            try:
                cur.execute("SET session_replication_role = replica")
            except Exception as exc:
                self.target.rollback()
                raise ReplicaError(f"the replica target refused 'SET session_replication_role = replica': "
                                   f"{str(exc).strip()}; {replica_role_grant(self.target)}") from exc
        self.target.commit()

    def close(self) -> None:
        self.target.close()

    def load_state(self) -> ReplicaState | None:
        with self.target.cursor() as cur:
            st = state.load(cur, self.store.cluster, self.set_name)
        self.target.rollback()
        return st

    def run(self, st: ReplicaState, stop: threading.Event, until_caught_up: bool = False) -> ReplicaState:
        """Apply from st until stop is set (or, with until_caught_up, the end as of now). Returns the state."""
        self.state = st
        self._maps = self._tables_at(st.set_version)
        while not stop.is_set():
            record, _ = self.store.get_set(self.set_name)
            try:
                with self._reader(record) as reader:
                    if self._consume(reader, stop, until_caught_up):
                        return self.state
            except (OrderError, ConsumerError) as exc:
                if self.store.get_set(self.set_name)[0].version == record.version:
                    raise
                log.info("set %r changed to a new version while reading (%s): re-reading its topics from "
                         "the applied position", self.set_name, exc)
                # what _add advanced in memory for the uncommitted batch is dropped with it: resume from
                # what the target committed, at that set version's layout
                self.state = self.load_state() or self.state
                self._maps = self._tables_at(self.state.set_version)
        return self.state

    def _reader(self, record: SetRecord) -> SetReader:
        self._ended = {f"{r['schema']}.{r['name']}" for r in record.retired if r.get("why") == "dropped"}
        topics = SetTopics.from_record(record)
        known = self.state.offsets if (topics.transactions, 0) in self.state.offsets else None
        boot = self.state.bootstrap_version
        copied = None if boot is None else frozenset(f"{t.schema}.{t.name}"
                                                     for t in self.store.get_version(self.set_name, boot).tables)
        return SetReader(topics, self.options.bootstrap, self.options.registry_url, from_beginning=True,
                         start_offsets=known, after_snapshot=self.state.txid_snapshot, copied_tables=copied)

    def _consume(self, reader: SetReader, stop: threading.Event, until_caught_up: bool) -> bool:
        """Apply what reader yields; True when done (caught up), False when stopped."""
        self._groups = StatementGroups()
        self._pending_changes, first, last_progress = 0, 0.0, time.monotonic()
        while not stop.is_set():
            idle = None if until_caught_up else self.options.batch_delay  # idle: commit what is pending
            for txn in reader.transactions(until_caught_up=until_caught_up, idle_timeout=idle):
                if not self._pending_changes:
                    first = time.monotonic()
                self._add(txn)
                if self._pending_changes >= self.options.batch_changes or \
                        time.monotonic() - first >= self.options.batch_delay:
                    self._flush()
                if stop.is_set():
                    break
            self._flush()
            if time.monotonic() - last_progress >= self.options.progress_interval:
                last_progress = time.monotonic()
                log.info("applied %d transactions (%d changes) of set %r; at position %s",
                         self.transactions, self.changes, self.set_name, self.state.position)
            if until_caught_up and not stop.is_set():
                return True
        self._flush()
        return False

    def _add(self, txn: Transaction) -> None:
        """Turn txn into statements of the open batch and advance the state past it."""
        st = self.state
        if not txn.snapshot and st.position and txn.position <= st.position:
            self.skipped += 1  # already applied (only possible if offsets were older than the position)
            return
        with self.target.cursor() as cur:
            moved = None  # the create of an UPDATE of the key whose unchanged values were not logged
            changes = txn.changes
            for previous, change, after in zip([None, *changes[:-1]], changes, [*changes[1:], None], strict=True):
                if change is moved:
                    continue
                if change.op in DDL_MARKS:
                    self._ddl_mark(change)
                    continue
                if change.version > st.set_version:
                    self._switch(cur, change.version)
                tmap = self._maps.get(change.table)
                if tmap is None and change.table in self._ended:
                    continue  # a dropped table the target never had (bootstrapped after its end): not applied
                if tmap is None:
                    raise ReplicaError(f"{change.topic!r} offset {change.offset}: table {change.table} is not in "
                                       f"set version {st.set_version} applied on the target")
                if change.truncated:
                    log.warning("%s at position %s: applying a row whose columns %s the relay cut to fit Kafka "
                                "(oversized policy truncate): the target holds their starts only", change.table,
                                change.position, change.truncated)
                kind, values = tmap.classify(change)
                if kind == "insert" and change.op == "u" and not _follows_its_delete(change, previous):
                    raise ReplicaError(f"{change.topic!r} offset {change.offset}: an UPDATE of unkeyed table "
                                       f"{change.table} without its old row (op d at position {change.position}; "
                                       "written by a relay from before unkeyed tables carried it): the target "
                                       "cannot tell which row it changed; re-bootstrap the replica")
                if kind == "delete" and _moves(change, after):
                    moved = after
                    self._groups.raw(cur, tmap.moved_row(cur, values, tmap.classify(after)[1], after.unchanged))
                self._groups.add(cur, tmap, kind, values)
        for change in txn.changes:
            if change.op != "t" and change.op not in DDL_MARKS:  # those are records of the transactions topic
                key = (change.topic, change.partition)
                st.offsets[key] = max(st.offsets.get(key, 0), change.offset + 1)
        if not txn.snapshot:
            st.offsets[(self.txn_topic, 0)] = txn.end_offset + 1
            st.position, st.txid = txn.position, txn.txid
            st.transactions += 1
        st.changes += len(txn.changes)
        self._pending_changes += len(txn.changes)

    def _ddl_mark(self, change: Change) -> None:
        """A DDL's mark: a dropped table is no longer applied to (its target table and rows stay, as
        they were at the DROP: drop it on the target if it should go); an incompatible schema
        change and a new topic need nothing here (the changes after them carry the set version
        whose layout the target is altered to; the reader reads the new topic)."""
        if change.op == "drop":
            self._maps.pop(change.table, None)
            log.warning("table %s was dropped at the source (position %s): replicate no longer applies to it; the "
                        "target table keeps its rows as they were then (drop it there if it should go)",
                        change.table, change.position)
        else:
            log.info("table %s: %s at position %s", change.table,
                     "incompatible schema change" if change.op == "schema" else f"goes on in {change.value}",
                     change.position)

    def _switch(self, cur, version: int) -> None:
        """Alter the target's tables from the applied set version to version (statements of the batch)."""
        for v in range(self.state.set_version + 1, version + 1):
            before = self._maps
            after = self._tables_at(v)
            for name in before.keys() - after.keys():
                log.warning("set version %d: table %s left the set (dropped, or removed by an upgrade): replicate no "
                            "longer applies to it; the target table keeps its rows", v, name)
            for name, tmap in after.items():
                old = before.get(name)
                stmts = [create_table(tmap.table)] if old is None else \
                    alter_table(old.table, tmap.table, self._missing(old.table, tmap.table))
                for s in stmts:
                    log.info("set version %d: %s", v, s.as_string(cur))
                    self._groups.raw(cur, s.as_string(cur).encode())
            self._maps = after
        self.state.set_version = version

    def _missing(self, before: Table, after: Table) -> dict[int, str | None]:
        """attnum -> the value rows existing at ADD COLUMN got (source pg_attribute.attmissingval)."""
        added = added_columns(before, after)
        if not added:
            return {}
        record, _ = self.store.get_set(self.set_name)
        conn = connect(record.relay_dsn, f"the source of set {self.set_name!r}", ReplicaError)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT attnum, (attmissingval::text::text[])[1] FROM pg_attribute "
                            "WHERE attrelid = to_regclass(%s) AND attnum = ANY(%s) AND atthasmissing",
                            (after.qualified, [c.attnum for c in added]))
                return dict(cur.fetchall())
        finally:
            conn.close()

    def _tables_at(self, version: int) -> dict[str, TableMap]:
        record = self.store.get_version(self.set_name, version)
        json_encoding = record.config.encoding == "json"
        return {f"{t.schema}.{t.name}": TableMap.of(t, json_encoding) for t in record.wire_tables}

    def _flush(self) -> None:
        """Commit the open batch and the position in one target transaction."""
        with self.target.cursor() as cur:
            self._groups.close(cur)
        pending = self._groups.statements
        if not pending:
            return
        st = self.state
        saved = st if (self.txn_topic, 0) in st.offsets else ReplicaState(**{**st.__dict__, "offsets": {}})
        with self.target.cursor() as cur:
            try:
                cur.execute(b";\n".join([*pending, state.save(saved).as_string(cur).encode()]))
                self.target.commit()
            except Exception as exc:
                self.target.rollback()
                raise ReplicaError(f"applying set {self.set_name!r} up to position {st.position} (txid {st.txid}) "
                                   f"failed on the target: {str(exc).strip()}; nothing of this batch was "
                                   "applied") from exc
        self.transactions, self.changes = st.transactions, st.changes
        self.commits += 1
        self._groups, self._pending_changes = StatementGroups(), 0


def _follows_its_delete(update: Change, previous: Change | None) -> bool:
    """update (op u of an unkeyed table) comes right after the d of its old row (same table, position)."""
    return (previous is not None and previous.op == "d" and previous.table == update.table
            and previous.position == update.position)


def _moves(delete: Change, after: Change | None) -> bool:
    """delete and after are an UPDATE of the key (same table and position) whose new row has
    unchanged columns, which only the old key's row on the target holds."""
    return (after is not None and after.op == "c" and bool(after.unchanged) and after.table == delete.table
            and after.position == delete.position)
