"""``pgshovel audit --against iceberg`` compares at one position: a MERGE records its micro-batch's
end offsets in the Iceberg snapshot summary; changes relayed after them are in flight and not
compared, so one round finds no drift while writes go on and the materialize job is behind, and
names exactly the row changed behind the relay's back; a TRUNCATE in flight puts its table in
flight. spark/materialize.py runs as a user runs it (local[2], its own JVM)."""

import json
import time

from confluent_kafka.admin import AdminClient
from pyiceberg.table import StaticTable

from pgshovel2.bootstrap.iceberg_keys import BATCH_KEY, END_OFFSETS_KEY
from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer.offsets import end_offsets
from pgshovel2.sparkjobs import bootstrap
from tests.helpers import caught_up, pgshovel
from tests.integration.bootstrap_helpers import Writer, create_set, create_tables, merge_into_iceberg
from tests.integration.test_iceberg import _metadata, iceberg_rows


def _summary(warehouse, schema: str, table: str) -> dict:
    snapshot = StaticTable.from_metadata(str(_metadata(warehouse, "aud", schema, table))).current_snapshot()
    return snapshot.summary.additional_properties


def _lines(proc) -> dict[str, str]:
    """table name -> its report line; plus "differs" -> the keys named."""
    out = {line.split(" ")[0].split(".")[-1].strip('":'): line for line in proc.stdout.splitlines()
           if not line.startswith("  ")}
    out["differs"] = [line.split(" key ")[1] for line in proc.stdout.splitlines() if "differs:" in line]
    return out


def test_audit_against_iceberg_is_exact_at_the_snapshot_offsets(stack, db, schema, cluster, relay_factory, spark,
                                                                 tmp_path):
    create_tables(db, schema, accounts=500)
    create_set(stack, cluster, tmp_path, schema, "aud", "trigger")
    relay_factory("aud").wait_for("snapshot done")
    boot, warehouse = tmp_path / "boot", tmp_path / "warehouse"
    with ClusterStore(stack.zk, cluster) as store:
        bootstrap.run(spark, store, "aud", bootstrap.BootstrapOptions(str(boot), stack.bootstrap, stack.registry))
    with db.cursor() as cur:
        cur.execute(f'UPDATE "{schema}".accounts SET abalance = 7 WHERE aid <= 50')
    caught_up(stack, cluster, "aud")
    merge_into_iceberg(stack, cluster, boot, warehouse, tmp_path / "ckpt")

    summary = _summary(warehouse, schema, "accounts")  # the MERGE recorded where its batch ended
    recorded = {(t, int(p)): o for t, parts in json.loads(summary[END_OFFSETS_KEY]).items() for p, o in parts.items()}
    [topic] = {t for t, _ in recorded if t.endswith(".accounts")}
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    ends = end_offsets(admin, [[w for w in recorded if w[0] == topic]], stack.bootstrap)
    assert ends and all(recorded[w] == end for w, end in ends.items()), (recorded, ends)
    assert BATCH_KEY not in _summary(warehouse, schema, "branches")  # the bootstrap's copy, no MERGE

    audit = ["audit", "aud", "--against", f"iceberg:hadoop:{warehouse}"]
    clean = _lines(pgshovel(stack, cluster, *audit))
    assert "0 differing key(s)" in clean["accounts"] and "in flight" not in clean["accounts"], clean
    assert "0 differing key(s)" in clean["branches"] and clean["differs"] == [], clean

    writer = Writer(stack.dsn, schema, seed=9)  # writes go on; the materialize job does not run again
    writer.start()
    try:
        while writer.transactions < 100:
            assert writer.error is None and writer.is_alive(), writer.error
            time.sleep(0.1)
        during = _lines(pgshovel(stack, cluster, *audit))  # one round, under writes
    finally:
        writer.finish()
    assert during["differs"] == [] and "0 differing key(s)" in during["accounts"], during
    assert "in flight not compared" in during["accounts"], during  # what the writer changed

    drifted = 9_999_999  # a row written behind the relay's back (its trigger does not fire): no message
    with db.cursor() as cur:
        cur.execute("SET session_replication_role = replica")
        cur.execute(f'INSERT INTO "{schema}".accounts VALUES (%s, 1, 0, %s)', (drifted, "behind"))
        cur.execute("SET session_replication_role = origin")
        cur.execute(f'TRUNCATE "{schema}".branches')  # relayed, not merged: the whole table in flight
    caught_up(stack, cluster, "aud")
    assert drifted not in iceberg_rows(warehouse, "aud", schema, "accounts")
    drift = pgshovel(stack, cluster, *audit, check=False)
    found = _lines(drift)
    assert drift.returncode == 3, drift.stdout + drift.stderr
    assert found["differs"] == [f"[{drifted}]"], drift.stdout
    assert "a TRUNCATE in flight" in found["branches"] and "0 differing key(s)" in found["branches"], drift.stdout
