"""An unkeyed table's rows in the materialize job: a multiset (docs/wire.rst "Unkeyed tables").

Every row of the state and every INSERT, UPDATE or snapshot row (ops ``c``, ``u``, ``r``) of the
batch is one occurrence of its values; every delete (op ``d``: the row envelope's message, or the
``before`` of a Debezium ``d`` or ``u`` event, pgshovel2.sparkjobs.changes) removes one occurrence
equal to its values in every column (NULL equal to NULL, as Spark groups). Order does not matter,
except for a TRUNCATE: what is at or before it is left out on both sides.
"""

from pgshovel2.codec import spark as spark_codec
from pgshovel2.sparkjobs.changes import OFFSET, OP, POSITION

_IMAGE, _REMOVE, _REMOVED, _NTH = "__pgshovel_image", "__pgshovel_remove", "__pgshovel_removed", "__pgshovel_nth"


def apply(base, stream, names: list[str], truncated_at: str | None):
    """The table's rows after the batch: base (the state: columns names and POSITION), stream (the
    batch's change rows: names, OP, POSITION, OFFSET). Returns rows of names and POSITION: the
    occurrences of base and of the stream's adds, less one equal occurrence per delete, the
    earliest added first (by position, offset); truncated_at: the position of the batch's last
    TRUNCATE of the table, or None."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    cols = [sf.col(spark_codec.quote(n)) for n in names]
    adds = base.select(*cols, POSITION, sf.lit(-1).cast("long").alias(OFFSET)).unionByName(
        stream.filter(sf.col(OP) != "d").select(*cols, POSITION, OFFSET))
    removes = stream.filter(sf.col(OP) == "d").select(*cols, POSITION, OFFSET)
    if truncated_at is not None:
        adds, removes = (rows.filter(sf.col(POSITION) > truncated_at) for rows in (adds, removes))
    both = (adds.withColumn(_REMOVE, sf.lit(0)).unionByName(removes.withColumn(_REMOVE, sf.lit(1)))
            .withColumn(_IMAGE, sf.struct(*cols) if cols else sf.lit(0)))
    image = Window.partitionBy(_IMAGE)
    ranked = (both.withColumn(_REMOVED, sf.sum(_REMOVE).over(image))
              .withColumn(_NTH, sf.row_number().over(image.orderBy(_REMOVE, POSITION, OFFSET))))
    return ranked.filter((sf.col(_REMOVE) == 0) & (sf.col(_NTH) > sf.col(_REMOVED))).select(*cols, POSITION)
