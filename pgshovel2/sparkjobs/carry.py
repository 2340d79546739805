"""Values an UPDATE left unchanged and unlogged, carried from the row's previous values, for the
materialize jobs (header ``pgshovel.unchanged``, docs/wire.rst; changes.UNCHANGED).

An UPDATE that keeps its key takes each such value from the key's last change that logged it
(by position, offset). An UPDATE of the key arrives as the old key's delete and the new key's
create at one position (the create lists the unchanged columns): those values are the old key's
just before that delete. Each such *move* gets a carried row: the new key, at the create's
position and offset, ordered just before the create, holding the old key's values. A chain of
moves in one batch (A to B, then B to C) resolves one link per round; rounds go on until one
resolves nothing more. When a move's delete is not in the batch (Kafka makes a transaction's
commit visible partition by partition, so a batch can end between them), the rows past the
batch's end are read to lend it. A value still not found (the old key never seen) stops the job
rather than being written as null.

Each logged value is a struct ``(v, k)``: ``k`` false for a delete's non-key columns, so the values
of a key's earlier life never reach a later create through a delete.
"""

import logging
from collections.abc import Callable

from pgshovel2.codec import spark as spark_codec
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.sparkjobs.changes import OFFSET, OP, POSITION, UNCHANGED

log = logging.getLogger(__name__)
KEEP = "__pgshovel_keep_"  # + column index: true when no earlier row of the key logged that column
SEQ = "__pgshovel_seq"  # 0: a carried row (just before its create), 1: every other row
LEND = "__pgshovel_lend"  # true: a row that only lends values (carried rows, lenders), left out at the end
PREV = "__pgshovel_prev_"  # + column index: the value before this row (used at deletes)
MISSING = "__pgshovel_missing"  # a carried row's unchanged columns whose old values were not found


def fill(changes, key: list[str], cols: list[str], base=None, lenders: Callable | None = None,
         beyond: Callable | None = None):
    """changes: one table's change rows (logical columns named cols, OP, POSITION, OFFSET, UNCHANGED;
    changes.change_frame), persisted by the caller (they are read more than once); base: rows of
    the same columns that stand with the changes (the Parquet job's current state), or None;
    lenders: old keys (a DataFrame of the key columns) -> rows of the same columns holding those
    keys' values before the batch (the Iceberg table's rows), only lending values; beyond: () ->
    the table's change rows after the batch's end offsets (the same columns), read only when a
    move's old values are not found otherwise (its delete's commit marker was not visible yet
    when the batch was planned), only lending values. Returns the rows of changes and base, each
    value replaced by the row's value after that change (the unlogged ones filled), plus
    ``KEEP<i>`` per column i of cols: true where nothing earlier in the rows logged that column's
    value. Raises ConsumerError when an UPDATE of the key's unchanged values cannot be found."""
    from pyspark.sql import functions as sf

    rows = _tagged(changes if base is None else base.unionByName(changes), 1, False)
    moves = changes.filter((sf.col(OP) == "c") & (sf.size(UNCHANGED) > 0))
    if moves.isEmpty():
        return _finish(_filled(rows, key, cols, before=False), cols)
    filled, carried, missing = _resolve(rows, changes, moves, key, cols, lenders)
    if missing and beyond is not None:
        after = beyond()
        log.info("%d unchanged value(s) of UPDATEs of the key not in the micro-batch: reading past its end", missing)
        filled, carried, missing = _resolve(rows.unionByName(_tagged(after, 1, True)), changes.unionByName(after),
                                            moves, key, cols, lenders)
    if missing:
        _refuse(carried)
    return _finish(filled, cols)


def _resolve(rows, changes, moves, key: list[str], cols: list[str], lenders: Callable | None):
    """(filled rows, the last carried rows, how many values they miss): rounds of carried rows
    until one finds no more values (module docstring). changes: where the moves' deletes are."""
    from pyspark.sql import functions as sf

    if lenders is not None:
        olds = changes.filter(sf.col(OP) == "d").join(moves.select(POSITION), POSITION, "left_semi")
        rows = rows.unionByName(_tagged(lenders(olds.select(*[spark_codec.quote(k) for k in key])), 1, True))
    carried, missing = None, None
    while True:
        filled = _filled(rows if carried is None else rows.unionByName(carried.drop(MISSING)), key, cols, before=True)
        if missing == 0:
            return filled, carried, missing
        nxt = _carried(filled, moves, key, cols).localCheckpoint()
        count = nxt.select(sf.sum(sf.size(MISSING))).first()[0] or 0
        if count == missing:  # no progress: filled already holds these values
            return filled, carried, missing
        carried, missing = nxt, count


def _tagged(rows, seq: int, lend: bool):
    from pyspark.sql import functions as sf

    return rows.withColumn(SEQ, sf.lit(seq)).withColumn(LEND, sf.lit(lend))


def _filled(rows, key: list[str], cols: list[str], before: bool):
    """rows with each column's value after the row (KEEP<i>: none logged yet), and with before,
    PREV<i>: the (v, k) struct before the row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    keys = [sf.col(spark_codec.quote(k)) for k in key]
    order = Window.partitionBy(*keys).orderBy(sf.col(POSITION), sf.col(OFFSET), sf.col(SEQ))
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    earlier = order.rowsBetween(Window.unboundedPreceding, -1)
    deleted = sf.col(OP) == "d"
    for i, c in enumerate(cols):
        q = spark_codec.quote(c)
        known = sf.lit(True) if c in key else ~deleted
        value = sf.col(q) if c in key else sf.when(~deleted, sf.col(q))
        logged = sf.when(~sf.array_contains(sf.col(UNCHANGED), c),
                         sf.struct(value.alias("v"), known.alias("k")))
        if before:
            rows = rows.withColumn(f"{PREV}{i}", sf.last(logged, ignorenulls=True).over(earlier))
        last = sf.last(logged, ignorenulls=True).over(upto)
        rows = rows.withColumn(f"{KEEP}{i}", last.isNull()).withColumn(c, last["v"])
    return rows


def _carried(filled, moves, key: list[str], cols: list[str]):
    """The carried row of each move: the create's key, position and offset, the old key's values
    before its delete (at the same position; the first one there: a Debezium d event, not the
    tombstone after it), UNCHANGED: the columns without one, MISSING: those
    of them the create needs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    q = spark_codec.quote
    others = [(i, c) for i, c in enumerate(cols) if c not in key]
    # the first delete at the position: a Debezium d event's tombstone follows it (same key, same
    # partition), and the values before the tombstone are the event's, none known
    first = Window.partitionBy(POSITION).orderBy(sf.col(OFFSET))
    before = (filled.filter((sf.col(OP) == "d") & (sf.col(SEQ) == 1))
              .withColumn("__first", sf.row_number().over(first)).filter(sf.col("__first") == 1)
              .select(POSITION, *[sf.col(f"{PREV}{i}").alias(f"__p{i}") for i, _ in others]))
    joined = moves.select(*[q(k) for k in key], POSITION, OFFSET, sf.col(UNCHANGED).alias("__want")) \
        .join(before, POSITION, "left")
    unknown = {c: sf.col(f"__p{i}").isNull() | ~sf.col(f"__p{i}")["k"] for i, c in others}
    values = {c: sf.col(f"__p{i}")["v"] for i, c in others}
    names = [sf.when(unknown[c], sf.lit(c)) for _, c in others]
    unchanged = sf.filter(sf.array(*names), lambda n: n.isNotNull()) if names else sf.array()
    out = joined.select(
        *[q(k) for k in key], *[values[c].alias(c) for _, c in others],
        sf.lit("r").alias(OP), POSITION, OFFSET, unchanged.cast("array<string>").alias(UNCHANGED),
        sf.lit(0).alias(SEQ), sf.lit(True).alias(LEND), "__want")
    return out.withColumn(MISSING, sf.array_intersect(sf.col(UNCHANGED), sf.col("__want"))).drop("__want")


def _refuse(carried) -> None:
    """Raise ConsumerError naming one move whose unchanged values were not found."""
    from pyspark.sql import functions as sf

    row = carried.filter(sf.size(MISSING) > 0).first()
    raise ConsumerError(
        f"the UPDATE of the key at position {row[POSITION]} left columns {list(row[MISSING])} unchanged and "
        "unlogged, and the old key's values are not in this micro-batch or the state (its delete at the same "
        "position was not read with it, or the old key was never seen); set REPLICA IDENTITY FULL on the table "
        "to log every value")


def _finish(filled, cols: list[str]):
    """filled without the lending rows and the helper columns."""
    from pyspark.sql import functions as sf

    helpers = [SEQ, LEND] + [f"{PREV}{i}" for i in range(len(cols)) if f"{PREV}{i}" in filled.columns]
    return filled.filter(~sf.col(LEND)).drop(*helpers)
