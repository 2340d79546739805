"""DROP TABLE of a captured table ends it in the set at its exact position, on every capture path
(issue #66): the C capture's event trigger writes the end into the queue; the PL/pgSQL capture and
both logical decoders have no such event, and the relay notices the table is gone and writes a
marker after its last change. Consumers see a TABLE_DROPPED record; the set's next version lacks
the table; the other tables go on; set status, set verify, audit, tail, the consumer library and
replicate handle it. Also: a key value a widened key column's kept key schema cannot hold stops
the set at that change until accept-ddl --new-topic."""

import subprocess
import time

import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.consumer import RowState, SetReader, SetTopics
from pgshovel2.wire import parse_header
from tests.helpers import BIN, caught_up, cli_env, pgshovel
from tests.integration.ddl_paths import PATHS, assert_same, make_set, rebuild, source_rows, txn_records, wait_stopped
from tests.integration.test_ddl_remedies import wait_snapshot_done


def wait_ended(stack, cluster: str, set_name: str, tag: str, relay, timeout: float = 60) -> None:
    """Wait until the set's latest version no longer has table tag (the relay ended it)."""
    deadline = time.monotonic() + timeout
    with ClusterStore(stack.zk, cluster) as store:
        while store.get_set(set_name)[0].table(tag) is not None:
            assert relay.proc.poll() is None, relay.log()
            assert time.monotonic() < deadline, f"table {tag} not ended:\n{relay.log()}"
            time.sleep(0.2)


@pytest.mark.parametrize("path", PATHS)
def test_drop_table_ends_it_at_its_position_and_the_others_go_on(stack, cluster, db, schema, tmp_path,
                                                                  relay_factory, path):
    topics = make_set(stack, cluster, db, schema, tmp_path, "drp", path,
                      {"t": "id int PRIMARY KEY, v text", "o": "id int PRIMARY KEY, v text"})
    t, o, tag = f'"{schema}".t', f'"{schema}".o', f'"{schema}"."t"'
    relay = relay_factory("drp")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 10) g")
        cur.execute(f"INSERT INTO {o} SELECT g, 'x' FROM generate_series(1, 10) g")
        cur.execute("BEGIN")
        cur.execute(f"UPDATE {t} SET v = 'last' WHERE id = 1")
        cur.execute(f"INSERT INTO {o} VALUES (11, 'with the last change of t')")
        cur.execute("COMMIT")
        kept = source_rows(db, t)
        cur.execute(f"DROP TABLE {t}")
        cur.execute(f"INSERT INTO {o} VALUES (12, 'after the drop')")
    wait_ended(stack, cluster, "drp", tag, relay)
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {o} VALUES (13, 'after the end')")
    caught_up(stack, cluster, "drp")
    assert relay.proc.poll() is None, relay.log()

    state, msgs = rebuild(stack, [topics["t"]])
    assert_same(state, kept)  # every change of t before its DROP, once
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    records = txn_records(stack, f"drp{cluster}.transactions")
    ends = [r for r in records if r["type"] == "TABLE_DROPPED"]
    assert [e["table"] for e in ends] == [topics["t"]], ends
    assert all(m[3]["pgshovel.position"] < ends[0]["position"] for m in msgs if m[3]["pgshovel.txid"] != "0")
    with ClusterStore(stack.zk, cluster) as store:
        record, _ = store.get_set("drp")
        assert record.change["kind"] == "drop" and record.change["table"] == tag, record.change
        assert [(r["table"], r["why"]) for r in record.retired] == [(tag, "dropped")]
    assert int(ends[0]["headers"]["pgshovel.version"]) == record.version

    status = pgshovel(stack, cluster, "set", "status", "drp").stdout
    assert f"dropped table:    {tag}" in status, status
    verify = pgshovel(stack, cluster, "set", "verify", "drp", "--bootstrap-servers", stack.bootstrap)
    assert f"{tag} dropped at position {ends[0]['position']}" in verify.stdout, verify.stdout
    audit = pgshovel(stack, cluster, "audit", "drp", "--against", "kafka", "--bootstrap-servers", stack.bootstrap)
    assert f"{tag}: dropped at position {ends[0]['position']}" in audit.stdout, audit.stdout
    tail = subprocess.run([str(BIN / "pgshovel"), "tail", "drp", "--from-beginning", "--format", "json"],
                          env=cli_env(stack, cluster), capture_output=True, text=True, timeout=120)
    assert tail.returncode == 0 and '"op": "drop"' in tail.stdout, tail.stderr

    rows = RowState()  # the consumer library: the table's rows are gone at its end
    with SetReader(SetTopics.from_record(record), stack.bootstrap, stack.registry, from_beginning=True) as reader:
        rows.apply_all(reader.transactions(until_caught_up=True))
    assert f"{schema}.t" not in rows.tables and len(rows.tables[f"{schema}.o"]) == 13

    relay.stop()
    again = relay_factory("drp")  # a restart goes on after the end: nothing more of t, o as before
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {o} VALUES (14, 'after a restart')")
    caught_up(stack, cluster, "drp")
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    assert len([r for r in txn_records(stack, f"drp{cluster}.transactions") if r["type"] == "TABLE_DROPPED"]) == 1
    assert again.stop() == 0


@pytest.mark.parametrize("path", PATHS)
def test_key_value_beyond_the_kept_key_schema_waits_for_a_new_topic(stack, cluster, db, schema, tmp_path,
                                                                     relay_factory, path):
    """integer -> bigint of the key goes on with the key's int schema kept; a key value beyond 32
    bits stops the set at that change (naming table, column and position) until accept-ddl
    --new-topic, after which the table goes on in generation 2 (keys as bigint) from that change."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "kov", path, {"t": "id int PRIMARY KEY, v text"})
    t = f'"{schema}".t'
    relay = relay_factory("kov")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 5) g")
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN id TYPE bigint")
        cur.execute(f"INSERT INTO {t} VALUES (6, 'fits')")
        cur.execute(f"INSERT INTO {t} VALUES (5000000000, 'too wide')")
        cur.execute(f"UPDATE {t} SET v = 'later' WHERE id = 2")
    stop = wait_stopped(stack, cluster, "kov", relay)
    assert stop["kind"] == "key" and stop["key_change"] and "'id'" in stop["reason"], stop
    assert "--new-topic" in stop["message"] and stop["position"] in stop["message"]
    state, _ = rebuild(stack, [topics["t"]])
    assert sorted(k[0][1] for k in state) == [1, 2, 3, 4, 5, 6]  # up to the change, once
    refused = pgshovel(stack, cluster, "set", "accept-ddl", "kov", f"{schema}.t", check=False)
    assert refused.returncode != 0 and "--new-topic" in refused.stderr
    pgshovel(stack, cluster, "set", "accept-ddl", "kov", f"{schema}.t", "--new-topic")
    wait_snapshot_done(stack, cluster, "kov", relay)
    g2, _ = rebuild(stack, [topics["t"] + ".g2"])
    assert_same(g2, source_rows(db, t))
    assert parse_header(stop["position"])[2] is False  # a change's position, not a snapshot row's
    marks = [r for r in txn_records(stack, f"kov{cluster}.transactions") if r["type"] == "TOPIC_CHANGED"]
    assert [m["position"] for m in marks] == [stop["position"]]
    assert relay.stop() == 0


def test_drop_table_noticed_while_the_relay_was_down(stack, cluster, db, schema, tmp_path, relay_factory):
    """Logical set (our plugin), the table dropped while no relay ran, with changes of it still in
    the slot: the next relay decodes them (by the table's recorded OID), then ends the table."""
    topics = make_set(stack, cluster, db, schema, tmp_path, "down", "logical",
                      {"t": "id int PRIMARY KEY, v text", "o": "id int PRIMARY KEY, v text"})
    t, o = f'"{schema}".t', f'"{schema}".o'
    relay = relay_factory("down")
    relay.wait_for("snapshot done")
    assert relay.stop() == 0
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 10) g")
        kept = source_rows(db, t)
        cur.execute(f"DROP TABLE {t}")
        cur.execute(f"INSERT INTO {o} VALUES (1, 'after')")
    relay = relay_factory("down")
    wait_ended(stack, cluster, "down", f'"{schema}"."t"', relay)
    caught_up(stack, cluster, "down")
    assert_same(rebuild(stack, [topics["t"]])[0], kept)
    assert_same(rebuild(stack, [topics["o"]])[0], source_rows(db, o))
    assert relay.stop() == 0

