"""The keys pgshovel2 writes into an Iceberg table's properties and snapshot summaries: what
``bootstrap`` / ``materialize --format iceberg`` record, and ``audit --against iceberg`` reads.

Table properties: HANDOFF_KEY (the bootstrap's handoff), OFFSETS_KEY (JSON {topic: {partition:
offset}}, the Kafka offsets the stream starts from, the copy holding everything before), SET_KEY.
Snapshot summary of a MERGE: CHECKPOINT_KEY and BATCH_KEY (the streaming checkpoint and micro-batch
id), END_OFFSETS_KEY (JSON {topic: {partition: offset}}, the batch's end offsets, exclusive).
"""

CHECKPOINT_KEY, BATCH_KEY = "pgshovel.checkpoint", "pgshovel.batch"
HANDOFF_KEY, OFFSETS_KEY, SET_KEY = "pgshovel.handoff", "pgshovel.kafka-offsets", "pgshovel.set"
END_OFFSETS_KEY = "pgshovel.kafka-end-offsets"
