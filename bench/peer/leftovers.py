"""What a killed bench run leaves behind, cleared before the next one starts.

A relay or Debezium connector stopped with its run keeps its replication slot, and a slot keeps
every WAL segment written after it: two slots a killed run left on the dev stack held 60 GB of WAL
until the disk was full and PostgreSQL stopped with a PANIC in the middle of the next run's fill.
"""

import re

from bench.peer.common import pgshovel, prepare
from bench.peer.connect import delete_topics, topic_names

# topics the bench names: a set's or connector's (common.unique(): letters, digits, a dot) and a
# Connect worker's internal ones (connect.Worker)
BENCH_TOPIC = re.compile(r"[a-z]+[0-9]+\.|bench-connect-[0-9]+-")
DEBEZIUM_SLOTS = "dbz%"  # bench/debezium*.py name their connectors (and so slots) dbz<n>, dbzlat<n>, dbztps<n>


def bench_sets() -> list[str]:
    """The sets of the bench cluster (only the bench makes sets there). Raises CalledProcessError
    when ZooKeeper cannot be read."""
    return [line.split("\t")[0] for line in pgshovel("set", "list").splitlines() if line.strip()]


def clear() -> list[str]:
    """Drop every set of the bench cluster (its slot or PgQ queue), the inactive slots and the
    publications of Debezium connectors, the tables of schema bench_relay and the topics the bench
    names (BENCH_TOPIC). Returns the names of the sets and slots dropped (empty: nothing was left).
    Run before a bench run: it drops whatever another bench run still uses."""
    cur = prepare()
    sets = bench_sets()
    for name in sets:
        pgshovel("set", "drop", name)
    cur.execute("SELECT slot_name FROM pg_replication_slots WHERE NOT active AND slot_name LIKE %s",
                (DEBEZIUM_SLOTS,))
    slots = [row[0] for row in cur.fetchall()]
    for slot in slots:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    cur.execute("SELECT pubname FROM pg_publication WHERE pubname LIKE %s", (DEBEZIUM_SLOTS,))
    for (publication,) in cur.fetchall():
        cur.execute(f"DROP PUBLICATION {publication}")
    cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'bench_relay'")
    for (table,) in cur.fetchall():
        cur.execute(f"DROP TABLE bench_relay.{table}")
    cur.connection.close()
    delete_topics([t for t in topic_names() if BENCH_TOPIC.match(t)])
    return sets + slots


def clear_and_say() -> None:
    """clear(), printing what it dropped, if anything."""
    dropped = clear()
    if dropped:
        print(f"dropped what an earlier bench run left: {', '.join(dropped)}", flush=True)
