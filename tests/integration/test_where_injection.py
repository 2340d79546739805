"""``set snapshot --where`` cannot be injected (issue #67): the condition is one SQL expression,
checked by the CLI before it writes the request and by the relay before it reads (a request
written into the ``snapshot_request`` znode by anyone else included), and it runs only inside a
READ ONLY transaction it cannot end. Each payload gets a clear error and writes nothing."""

import uuid

import pytest

from pgshovel2.cluster import ClusterStore
from pgshovel2.relay.snapshot.request import SnapshotRequest
from tests.helpers import pgshovel, write_config
from tests.online import wait_state

# (payload, what the CLI's error says); each would write on 1c73335 (the CLI's check or the relay)
PAYLOADS = [
    ("true); COMMIT; CREATE TABLE {schema}.pwned (id int", "closes a parenthesis"),
    ("true) OR (SELECT pg_sleep(0)) IS NULL --", "closes a parenthesis"),
    ("; DROP TABLE {schema}.w", "';'"),
    ("true; INSERT INTO {schema}.log VALUES ('semicolon')", "';'"),
    ("id > 0 /* ) ; INSERT INTO {schema}.log VALUES ('comment') ; ( */", "comment"),
    ("v = 'a\\' ; INSERT INTO {schema}.log VALUES ('backslash') ; --'", "backslash"),
    ("EXISTS (WITH d AS (DELETE FROM {schema}.log RETURNING 1) SELECT 1 FROM d)", "WITH"),
    ("{schema}.write_log('volatile') IS NOT NULL", "read-only transaction"),
    ("nextval('{schema}.seq') > 0", "read-only transaction"),
]


@pytest.fixture
def where_set(stack, cluster, db, schema, tmp_path):
    """A trigger set of table {schema}.w (3 rows), a log table, a sequence and a VOLATILE function
    writing the log, executable by everyone (what a payload would like to run)."""
    with db.cursor() as cur:
        cur.execute(f'CREATE TABLE "{schema}".w (id int PRIMARY KEY, v text)')
        cur.execute(f"INSERT INTO \"{schema}\".w VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute(f'CREATE TABLE "{schema}".log (what text); CREATE SEQUENCE "{schema}".seq')
        cur.execute(f'CREATE FUNCTION "{schema}".write_log(what text) RETURNS int LANGUAGE sql VOLATILE '
                    f'AS $$ INSERT INTO "{schema}".log VALUES (what) RETURNING 1 $$')
        cur.execute(f'GRANT ALL ON SCHEMA "{schema}" TO PUBLIC; GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" '
                    f'TO PUBLIC; GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO PUBLIC')
    name = f"w{uuid.uuid4().hex[:6]}"
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "w"}], topic_prefix=f"{name}{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    return name


def _nothing_written(db, schema: str) -> None:
    with db.cursor() as cur:
        cur.execute(f'SELECT to_regclass(\'"{schema}".pwned\'), (SELECT count(*) FROM "{schema}".log), '
                    f'(SELECT count(*) FROM "{schema}".w), (SELECT last_value FROM "{schema}".seq), '
                    f'(SELECT is_called FROM "{schema}".seq)')
        assert cur.fetchone() == (None, 0, 3, 1, False)


def test_cli_refuses_every_payload_and_writes_nothing(stack, cluster, db, schema, where_set):
    for payload, text in PAYLOADS:
        where = payload.format(schema=f'"{schema}"')
        proc = pgshovel(stack, cluster, "set", "snapshot", where_set, "--where", where, check=False)
        assert proc.returncode == 1 and proc.stderr.startswith("error:"), (where, proc.stderr)
        assert text in proc.stderr, (where, proc.stderr)
        _nothing_written(db, schema)
    assert "none requested" in pgshovel(stack, cluster, "set", "snapshot", where_set, "--status").stdout


def test_relay_refuses_a_payload_written_into_the_znode(stack, cluster, db, schema, where_set, relay_factory):
    """The znode is not trusted: a request written there by anyone (no CLI check) fails with a clear
    error, nothing written, and the stream goes on."""
    relay = relay_factory(where_set)
    relay.wait_for("snapshot done")
    tag = f'"{schema}"."w"'
    for payload, _text in PAYLOADS:
        where = payload.format(schema=f'"{schema}"')
        request = SnapshotRequest("x" + uuid.uuid4().hex[:11], (tag,), where, 2)
        with ClusterStore(stack.zk, cluster) as store:
            _, version = store.get_snapshot_request(where_set)
            store.put_snapshot_request(where_set, request.to_dict(), version)
        failed = wait_state(stack, cluster, where_set, "failed")
        assert failed["id"] == request.id and failed["error"], failed
        _nothing_written(db, schema)
    with db.cursor() as cur:  # the stream went on
        cur.execute(f"INSERT INTO \"{schema}\".w VALUES (4, 'd')")
    pgshovel(stack, cluster, "set", "snapshot", where_set, "--where", "id <= 2", "--chunk-size", "1")
    wait_state(stack, cluster, where_set, "done")
    assert relay.stop() == 0
