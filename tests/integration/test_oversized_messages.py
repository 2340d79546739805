"""Messages Kafka cannot take (issue #66, item 6), under each ``oversized`` policy of the set
config, end to end against the real broker: fail (a clear error naming set, table, key, size,
limit and position; ``pgshovel set skip`` then gets past exactly that change, in an initial
snapshot too), dead-letter (chunks in ``{prefix}.dead-letter``, a placeholder in place, read back
by the consumer library) and truncate; the real limit (64 MiB) with a 70 MB value; and a limit
lowered behind the relay's back (Kafka's refusal at delivery stops the relay, not a retry loop).
"""

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics
from tests.helpers import RelayProcess, caught_up, pgshovel, verify, write_config
from tests.integration.hostile_helpers import (
    compare_in_postgres,
    create_set,
    rebuilt,
    relay_snapshot_then_stream,
    set_table,
)

MB = 1024 * 1024
# -- messages Kafka cannot take ----------------------------------------------------------------

LIMIT = MB  # the table topic's max.message.bytes in these tests (made before the relay starts)


def _small_topic(stack, cluster: str, name: str, schema: str, table: str = "ov") -> str:
    """Create the set's table topic with max.message.bytes LIMIT (as an operator may have); its name."""
    topic = names.table_topic(f"{name}{cluster}", schema, table)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": str(LIMIT),
                                                                      "cleanup.policy": "compact"})]).values():
        future.result()
    return topic


def _oversized_table(db, schema: str) -> None:
    """Table ov: row 1 too large for LIMIT (2 MB of text), row 2 small; both for the snapshot."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".ov (id int PRIMARY KEY, body text, b bytea, note text)')
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (1, repeat('é', {2 * MB}), '\\x00ff', 'snapshot big'), "
                    "(2, 'small', NULL, 'snapshot')")


def _stream_rows(db, schema: str) -> None:
    """Rows 3 (too large: 3 MB of bytea) and 4 (small) in one transaction, then an UPDATE of row 4."""
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (3, 'x', decode(repeat('ab', {3 * MB}), 'hex'), 'big'), "
                    "(4, 'ok', NULL, 'stream')")
        cur.execute(f"UPDATE \"{schema}\".ov SET note = 'updated' WHERE id = 4")


def _position(log: str) -> str:
    """The position the relay's error names (in "--position P")."""
    return log.split("--position ")[-1].split()[0]


@pytest.mark.parametrize("path", ["logical-pgshovel2", "trigger-plpgsql"])
def test_oversized_fail_stops_clearly_and_skip_gets_past(stack, cluster, db, schema, tmp_path, path):
    """Policy fail (the default): the relay stops at the snapshot row, naming set, table, key,
    size, limit and position, and drops nothing; set skip of that position lets the next start
    leave out exactly that row (a logical set's next snapshot is at another position: the skip
    names the row); the same for the streamed change; every other row arrives."""
    _oversized_table(db, schema)
    _small_topic(stack, cluster, "ovf", schema)
    create_set(stack, cluster, tmp_path, "ovf", schema, "ov", path, "json")
    relay = RelayProcess(stack, cluster, "ovf", log_path=tmp_path / "first.log")
    assert relay.proc.wait(120) != 0
    log = relay.log()
    for part in ("set 'ovf'", f'table "{schema}"."ov"', 'key {"id": 1}', f"max.message.bytes {LIMIT}",
                 "oversized policy 'fail'", ":s000000000"):
        assert part in log, part
    pgshovel(stack, cluster, "set", "skip", "ovf", "--position", _position(log), "--reason", "too large")
    relay = RelayProcess(stack, cluster, "ovf", log_path=tmp_path / "second.log")
    relay.wait_for("snapshot done", timeout=120)
    _stream_rows(db, schema)
    assert relay.proc.wait(120) != 0
    log = relay.log()
    assert 'key {"id": 3}' in log and "op c" in log
    pgshovel(stack, cluster, "set", "skip", "ovf", "--position", _position(log), "--reason", "too large")
    relay = RelayProcess(stack, cluster, "ovf", log_path=tmp_path / "third.log")
    try:
        caught_up(stack, cluster, "ovf", timeout=120)
    finally:
        relay.stop()
    rows = rebuilt(stack, cluster, "ovf")
    assert sorted(rows) == [2, 4] and rows[4][0]["note"] == "updated"
    status = pgshovel(stack, cluster, "set", "status", "ovf").stdout
    assert status.count("left out:") == 2, status


def test_oversized_dead_letter(stack, cluster, db, schema, tmp_path):
    """Policy dead-letter: the snapshot row and the streamed change too large for their topic go to
    the dead-letter topic in chunks (made small here too), a placeholder in their place; the
    consumer library reads them back whole, set verify agrees with the source."""
    _oversized_table(db, schema)
    _small_topic(stack, cluster, "ovd", schema)
    dead = names.dead_letter_topic(f"ovd{cluster}")
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    for future in admin.create_topics([NewTopic(dead, 1, 1, config={"max.message.bytes": str(LIMIT)})]).values():
        future.result()
    create_set(stack, cluster, tmp_path, "ovd", schema, "ov", "logical-pgoutput", "avro",
               oversized={"policy": "dead-letter"})
    inspect = pgshovel(stack, cluster, "set", "inspect", "ovd").stdout
    assert f"oversized messages: dead-letter -> topic {dead}" in inspect
    relay_snapshot_then_stream(stack, cluster, tmp_path, "ovd", lambda: _stream_rows(db, schema))
    topic = names.table_topic(f"ovd{cluster}", schema, "ov")
    messages = read_topics(stack.bootstrap, [topic, dead])
    placeholders = [h for _, v, h in messages[topic] if "pgshovel.dead_letter" in h]
    assert len(placeholders) == 2 and all(v == b"" for _, v, h in messages[topic] if "pgshovel.dead_letter" in h)
    assert len(messages[dead]) >= 7  # 4 MB of snapshot row and 3 MB of bytea in chunks of under 1 MiB
    rows = rebuilt(stack, cluster, "ovd")
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[1][1].dead_letter == dead and rows[3][1].dead_letter == dead and rows[2][1].dead_letter is None
    failures = compare_in_postgres(db, schema, set_table(stack, cluster, "ovd"), rows, "avro")
    assert not failures, "\n".join(failures)
    assert all(r.ok for r in verify(stack, cluster, "ovd"))


def test_oversized_truncate(stack, cluster, db, schema, tmp_path):
    """Policy truncate of body and b: the too-large rows arrive cut to fit, with header
    pgshovel.truncated naming the columns and their lengths; the consumer library surfaces it;
    set verify reports the cut rows (they differ from the source) and says why."""
    _oversized_table(db, schema)
    _small_topic(stack, cluster, "ovt", schema)
    create_set(stack, cluster, tmp_path, "ovt", schema, "ov", "trigger-c", "json", envelope="debezium",
               oversized={"policy": "truncate", "columns": ["body", "b"]})
    relay_snapshot_then_stream(stack, cluster, tmp_path, "ovt", lambda: _stream_rows(db, schema))
    rows = rebuilt(stack, cluster, "ovt", "debezium")
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[1][1].truncated == {"body": 2 * MB} and rows[3][1].truncated == {"b": 3 * MB}
    assert rows[2][1].truncated is None and rows[4][0]["note"] == "updated"
    body = rows[1][0]["body"]
    assert 0.3 * LIMIT < len(body.encode()) < LIMIT and body == "é" * len(body)
    reports = verify(stack, cluster, "ovt")
    assert not reports[0].ok and "oversized policy truncate" in reports[0].first_difference


def test_a_70_mb_value_over_kafkas_own_limit(stack, cluster, db, schema, tmp_path):
    """The real limit (topics the relay creates take 64 MiB): a 70 MB text stops the relay at once
    with the position (no retry), set skip gets past it, the next change arrives."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".ov (id int PRIMARY KEY, body text)')
    create_set(stack, cluster, tmp_path, "ovk", schema, "ov", "trigger-c", "avro")
    relay = RelayProcess(stack, cluster, "ovk", "--skip-snapshot", log_path=tmp_path / "first.log")
    relay.wait_for("skipping the initial snapshot")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (1, repeat('z', {70 * 1000 * 1000}))")
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (2, 'after')")
    assert relay.proc.wait(180) != 0
    log = relay.log()
    assert "max.message.bytes 67108864" in log and 'key {"id": 1}' in log and "restarting" not in log
    pgshovel(stack, cluster, "set", "skip", "ovk", "--position", _position(log), "--reason", "70 MB")
    relay = RelayProcess(stack, cluster, "ovk", log_path=tmp_path / "second.log")
    try:
        caught_up(stack, cluster, "ovk", timeout=180)
    finally:
        relay.stop()
    assert sorted(rebuilt(stack, cluster, "ovk")) == [2]
    with ClusterStore(stack.zk, cluster) as store:
        skips = store.get_relay_record("ovk", "skips")
    assert len(skips["skipped"]) == 1


def test_a_limit_lowered_behind_the_relays_back(stack, cluster, db, schema, tmp_path):
    """The topic's max.message.bytes lowered while the relay runs (it asked Kafka before): Kafka
    refuses the message at delivery; the relay stops at once naming the refusal (not retried in a
    loop), the next start asks again and stops before producing, with the position; set skip
    gets past it."""
    with db.cursor() as cur:  # bytea of random bytes: LZ4 cannot make them fit the limit
        cur.execute(f'CREATE TABLE "{schema}".ov (id int PRIMARY KEY, body bytea)')
    create_set(stack, cluster, tmp_path, "ovl", schema, "ov", "trigger-c", "json")
    relay = RelayProcess(stack, cluster, "ovl", "--skip-snapshot", log_path=tmp_path / "first.log")
    relay.wait_for("skipping the initial snapshot")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (1, 'small')")
    caught_up(stack, cluster, "ovl")
    topic = names.table_topic(f"ovl{cluster}", schema, "ov")
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              incremental_configs=[ConfigEntry("max.message.bytes", str(LIMIT),
                                                               incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO \"{schema}\".ov SELECT 2, decode(string_agg(md5(random()::text), ''), 'hex') "
                    f"FROM generate_series(1, {2 * MB // 16})")
        cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (3, 'after')")
    assert relay.proc.wait(120) != 0
    assert "refused a message as too large" in relay.log() and "restarting" not in relay.log()
    relay = RelayProcess(stack, cluster, "ovl", log_path=tmp_path / "second.log")
    assert relay.proc.wait(120) != 0
    log = relay.log()
    assert f"max.message.bytes {LIMIT}" in log and 'key {"id": 2}' in log
    pgshovel(stack, cluster, "set", "skip", "ovl", "--position", _position(log), "--reason", "limit lowered")
    relay = RelayProcess(stack, cluster, "ovl", log_path=tmp_path / "third.log")
    try:
        caught_up(stack, cluster, "ovl", timeout=120)
    finally:
        relay.stop()
    assert sorted(rebuilt(stack, cluster, "ovl")) == [1, 3]


def test_set_upgrade_changes_the_policy(stack, cluster, db, schema, tmp_path):
    """``set upgrade`` with only the oversized policy changed makes a new set version (nothing else
    changes); the relay places a too-large change after the version's marker by the new policy."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".ov (id int PRIMARY KEY, body bytea)')
    _small_topic(stack, cluster, "ovu", schema)
    create_set(stack, cluster, tmp_path, "ovu", schema, "ov", "logical-pgshovel2", "json")
    relay = RelayProcess(stack, cluster, "ovu", "--skip-snapshot", log_path=tmp_path / "relay.log")
    try:
        relay.wait_for("skipping the initial snapshot")
        cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "ov"}], encoding="json", backend="logical",
                           topic_prefix=f"ovu{cluster}", decoder="pgshovel2", oversized={"policy": "dead-letter"})
        out = pgshovel(stack, cluster, "set", "upgrade", "ovu", str(cfg)).stdout
        assert "version 1 -> 2" in out and "oversized messages: fail -> dead-letter" in out, out
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO \"{schema}\".ov VALUES (1, decode(repeat('ab', {2 * MB}), 'hex'))")
        caught_up(stack, cluster, "ovu")
    finally:
        relay.stop()
    assert "oversized messages: dead-letter" in pgshovel(stack, cluster, "set", "inspect", "ovu").stdout
    rows = rebuilt(stack, cluster, "ovu")
    assert rows[1][1].dead_letter == names.dead_letter_topic(f"ovu{cluster}")
    assert rows[1][0]["body"] is not None and len(rows[1][0]["body"]) > 2 * MB  # base64 of 2 MiB
