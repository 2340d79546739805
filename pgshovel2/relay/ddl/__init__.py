"""Schema changes in the relay: what a DDL means for a table's messages (``schema_change``), the
stop at a change the rules cannot follow until the operator decides (``gate``), the loop's
control-event path (``relaying``), and the watches for dropped tables (``drop_watch``) and for
partitions created, attached or detached (``partition_watch``, ``partition_moves``)."""
