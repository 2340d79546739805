"""``set verify`` tells the truth across DDL (issue #70 item 4): rows written before ADD COLUMN (with
and without a default), RENAME COLUMN and DROP COLUMN are read in the table's current form and
verify equal; a real difference is named by its key and its columns, decoded, not as bytes. Both
encodings, both envelopes."""

import pytest

from tests.helpers import caught_up, pgshovel, verify, write_config


@pytest.mark.parametrize(("encoding", "envelope"), [("avro", "row"), ("json", "row"), ("avro", "debezium"),
                                                    ("json", "debezium")])
def test_verify_reads_older_layouts_and_names_differences(stack, cluster, db, schema, tmp_path, relay_factory,
                                                           encoding, envelope):
    table = f'"{schema}".t'
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, old int)")
        cur.execute(f"INSERT INTO {table} SELECT g, 'v' || g, g FROM generate_series(1, 5) g")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "t"}], encoding=encoding, envelope=envelope,
                       topic_prefix=f"vd{encoding[0]}{envelope[0]}{cluster}")
    pgshovel(stack, cluster, "set", "create", "vd", str(cfg))
    relay = relay_factory("vd")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"UPDATE {table} SET v = 'changed' WHERE id = 1")
        for statement in (f"ALTER TABLE {table} ADD COLUMN plain text", f"ALTER TABLE {table} ADD COLUMN d int "
                          "NOT NULL DEFAULT 7", f"ALTER TABLE {table} RENAME COLUMN v TO label",
                          f"ALTER TABLE {table} DROP COLUMN old"):
            cur.execute(statement)
        cur.execute(f"INSERT INTO {table} (id, label, plain) VALUES (6, 'six', 'p')")
    caught_up(stack, cluster, "vd")
    (report,) = verify(stack, cluster, "vd")
    assert report.ok and report.rebuilt_rows == report.source_rows == 6, report.first_difference
    assert relay.stop() == 0
    with db.cursor() as cur:  # not relayed: the relay is stopped
        cur.execute(f"UPDATE {table} SET label = 'only in the source' WHERE id = 3")
    (report,) = verify(stack, cluster, "vd")
    assert report.first_difference == ('key {"id": 3}: label: source \'only in the source\', kafka \'v3\''), \
        report.first_difference
