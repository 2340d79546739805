"""Filling a target before replica apply starts, and the handoff position it leaves.

``copy``: the exported-snapshot handoff of the Spark bootstrap, done with COPY for
sets small enough for one machine: the read_committed end offsets of the set's
topics are read first (data, then transactions), then a source transaction
exports its snapshot and each table is copied under it (``SET TRANSACTION
SNAPSHOT``) into the target, in ONE target transaction that also writes the
position row (offsets + txid snapshot). Apply then starts at those offsets and
skips transactions visible in the snapshot (docs/consumer.rst "Starting after a
bootstrap" gives the argument).

``parquet``: a Spark bootstrap's output (``pgshovel bootstrap SET --output DIR``):
its Parquet is inserted (pgshovel2.replica.parquet) and its manifest gives the
offsets and the handoff snapshot, as ``copy`` does.

``kafka``: the relay's own snapshot rows (op ``r``) still in the topics are the
starting point: the target tables are created empty and apply reads the topics
from the beginning. Only valid while the topics hold the whole history
(compaction and retention break reassembly from the beginning).
"""

import logging
import tempfile

import psycopg2
from psycopg2 import sql

from pgshovel2 import backends, controlsconf, kafkaconf, names
from pgshovel2.bootstrap.manifest import Manifest
from pgshovel2.catalog import Table
from pgshovel2.consumer.offsets import end_offsets, partition_counts
from pgshovel2.consumer.topics import SetTopics
from pgshovel2.kafkaconf import Kafka
from pgshovel2.replica import state
from pgshovel2.replica.sql import ReplicaError, TableMap, create_table
from pgshovel2.replica.state import ReplicaState
from pgshovel2.setrecord import SetRecord

log = logging.getLogger(__name__)
MODES = ("copy", "kafka", "parquet")


def tables_of(record: SetRecord) -> tuple[Table, ...]:
    """The set record's tables as its messages carry them (SetRecord.wire_tables), each checked to be
    replicable (TableMap.of raises ReplicaError)."""
    for t in record.wire_tables:
        TableMap.of(t)
    return record.wire_tables


def source_offsets(set_name: str, record: SetRecord, bootstrap: Kafka) -> dict[tuple[str, int], int]:
    """Committed end offsets of the set's data topics, then of its transactions topic."""
    topics = SetTopics.from_record(record)
    admin = kafkaconf.admin(bootstrap)
    counts = partition_counts(admin, [t.topic for t in topics.tables] + [topics.transactions], bootstrap,
                              f"of set {set_name!r}")
    data = [(t.topic, p) for t in topics.tables for p in range(counts[t.topic])]
    return end_offsets(admin, [data, [(topics.transactions, 0)]], bootstrap)


def bootstrap(target, cluster: str, set_name: str, record: SetRecord, mode: str,
              kafka_bootstrap: Kafka, manifest_dir: str | None = None) -> ReplicaState:
    """Fill target (a psycopg2 connection, not autocommit) for set_name and commit; returns its state.

    Raises ReplicaError when the target already holds a position for the set
    (it resumes instead) or the copy fails; the
    target is unchanged then (one transaction).
    """
    if mode == "copy" and (controlled := _value_controls(record)):
        raise ReplicaError(f"set {set_name!r} changes values before they leave the relay ({', '.join(controlled)}): "
                           "mode copy would copy them as the database stores them; use mode kafka or parquet")
    manifest = None
    if mode == "parquet":  # the tables as the bootstrap copied them (its set version)
        manifest = Manifest.load(manifest_dir or "")
        if manifest.set != set_name or manifest.cluster != cluster or manifest.output != "parquet":
            raise ReplicaError(f"{manifest_dir}: a {manifest.output} bootstrap of set {manifest.set!r} of cluster "
                               f"{manifest.cluster!r}, not a Parquet bootstrap of set {set_name!r} of {cluster!r}")
        record = manifest.set_record
    tables = tables_of(record)
    with target.cursor() as cur:
        state.ensure_table(cur)
        if state.load(cur, cluster, set_name) is not None:
            raise ReplicaError(f"the target already replicates set {set_name!r} of cluster {cluster!r}: "
                               "it resumes from its stored position (drop the position row to re-bootstrap)")
        for t in tables:
            cur.execute(create_table(t))
            cur.execute(sql.SQL("TRUNCATE {}.{}").format(sql.Identifier(t.schema), sql.Identifier(t.name)))
    offsets, snapshot = ({}, None)
    if mode == "copy":
        offsets, snapshot = _copy(target, set_name, record, tables, kafka_bootstrap)
    elif manifest is not None:
        from pgshovel2.replica import parquet  # pyarrow and pandas: ~100 MB and seconds, for this mode only

        with target.cursor() as cur:
            rows = parquet.load(cur, manifest, manifest_dir, tables)
        log.info("loaded %d rows from the bootstrap %s", rows, manifest_dir)
        offsets, snapshot = manifest.offsets(), str(manifest.txid_snapshot)  # trigger sets only, for now
    version = manifest.set_version if manifest is not None else record.version
    st = ReplicaState(cluster, set_name, "", 0, version, offsets, snapshot, mode, bootstrap_version=version)
    with target.cursor() as cur:
        cur.execute(state.save(st))
    target.commit()
    log.info("bootstrapped the target from %s at set version %d (handoff txid snapshot %s)",
             mode, record.version, snapshot)
    return st


def _value_controls(record: SetRecord) -> list[str]:
    """``table: column control`` of each column control of record that changes values (not exclude:
    an excluded column is not among the set's columns, so copy leaves it out too)."""
    return [f"{names.qualified(tc.schema, tc.name)}: {controlsconf.describe(c)}" for tc in record.config.tables
            for c in tc.controls if c.action != "exclude"]


def _copy(target, set_name: str, record: SetRecord, tables: tuple[Table, ...],
          kafka_bootstrap: Kafka) -> tuple[dict[tuple[str, int], int], str]:
    """COPY every table from the source's exported snapshot; returns (offsets, the handoff's text:
    a txid snapshot for a trigger set, the temporary slot's consistent point ``X/Y`` for a
    logical set -- pgshovel2.txids.parse_handoff)."""
    offsets = source_offsets(set_name, record, kafka_bootstrap)  # BEFORE the snapshot
    with backends.export(record, ReplicaError) as exported:
        try:
            with exported.conn.cursor() as src, target.cursor() as dst:
                for t in tables:
                    _copy_table(src, dst, t)
        except psycopg2.Error as exc:
            raise ReplicaError(f"copying set {set_name!r} into the target failed: {str(exc).strip()}; "
                               "the target was not changed") from exc
        return offsets, str(exported.handoff)


def _copy_table(src, dst, table: Table) -> None:
    cols = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
    ident = sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.name))
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as buf:
        src.copy_expert(sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(cols, ident).as_string(src), buf)
        size = buf.tell()
        buf.seek(0)
        dst.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN").format(ident, cols).as_string(dst), buf)
    log.info("copied %s (%d bytes)", table.qualified, size)
