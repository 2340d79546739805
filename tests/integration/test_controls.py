"""Column controls on every capture path (#71): exclude, mask, hash and truncate applied to the
initial snapshot and to changes, in every envelope and encoding, with no value as captured left in
any topic of the set (data, transactions, positions); refusals against the catalog name the column."""

import hashlib

import pytest

from pgshovel2 import names
from pgshovel2.cluster import ClusterStore
from pgshovel2.ops.verify import read_topics
from tests.helpers import assert_verified, caught_up, messages, pgshovel, verify, write_config

SALT = "pepper-71"
CONTROLS = {"secret": "exclude", "ssn": {"mask": 4}, "age": {"mask": 2}, "email": {"hash": "env:PGSHOVEL2_TEST_SALT"},
            "bio": {"truncate": 5}, "born": {"hash": "env:PGSHOVEL2_TEST_SALT"}}
# (path for write_config, extra config): every path, each in another envelope and encoding
PATHS = [("trigger", {"capture": "c", "encoding": "avro"}),
         ("trigger", {"capture": "plpgsql", "encoding": "json", "envelope": "debezium"}),
         ("logical", {"decoder": "pgshovel2", "encoding": "avro", "envelope": "debezium"}),
         ("pgoutput", {"encoding": "json"})]
ROWS = [(1, "ann@example.com", "123-45-6789", 41, "Ann's long biography", "hunter2-ann", "1985-03-01"),
        (2, "bob@example.com", "987-65-4321", 52, "Bob writes", "hunter2-bob", "1974-11-30")]
RAW = [b"example.com", b"-45-", b"-65-", b"biography", b"hunter2", b"1985-03", b"1974-11"]


def _hash(text: str) -> str:
    return hashlib.sha256((SALT + text).encode()).hexdigest()


def _row(value):
    """The row of a decoded message: a row envelope's value, a Debezium event's after (or before)."""
    if isinstance(value, dict) and "payload" in value and "schema" in value:
        value = value["payload"]
    if isinstance(value, dict) and "op" in value and "source" in value:
        return value["after"] if value["after"] is not None else value["before"]
    return value


@pytest.mark.parametrize("path, extra", PATHS, ids=[f"{p}-{e.get('capture') or e.get('decoder') or 'pgoutput'}"
                                                     for p, e in PATHS])
def test_controls_on_every_path(stack, cluster, db, schema, tmp_path, relay_factory, monkeypatch, path, extra):
    monkeypatch.setenv("PGSHOVEL2_TEST_SALT", SALT)
    name, table = "ctl", "users"
    qualified = names.qualified(schema, table)
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {qualified} (id int PRIMARY KEY, email text, ssn varchar(11), age int, "
                    "bio text, secret text, born date)")
        cur.executemany(f"INSERT INTO {qualified} VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS)
    extra = dict(extra)
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": table, "controls": CONTROLS}], backend=path,
                       encoding=extra.pop("encoding"), topic_prefix=f"{name}{cluster}", **extra)
    created = pgshovel(stack, cluster, "set", "create", name, str(cfg)).stdout
    assert "email hash (env:PGSHOVEL2_TEST_SALT)" in created and "ssn mask 4" in created and SALT not in created
    with ClusterStore(stack.zk, cluster) as store:
        columns = [c.name for c in store.get_set(name)[0].tables[0].columns]
    assert columns == ["id", "email", "ssn", "age", "bio", "born"]  # secret: never captured
    relay = relay_factory(name)
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {qualified} VALUES (3, 'cy@example.com', '555-45-0000', 7, 'Cy biography', "
                    "'hunter2-cy', '2019-01-02')")
        cur.execute(f"UPDATE {qualified} SET bio = 'Ann biography again', email = 'ann2@example.com' WHERE id = 1")
        cur.execute(f"UPDATE {qualified} SET age = NULL, email = NULL WHERE id = 2")
        cur.execute(f"DELETE FROM {qualified} WHERE id = 3")
    caught_up(stack, cluster, name)
    prefix = f"{name}{cluster}"
    topic = names.table_topic(prefix, schema, table)
    rows = [_row(v) for _, v, _ in messages(stack, topic) if v is not None]
    by_id = {}
    for row in rows:
        assert "secret" not in row, (path, row)
        assert row["ssn"] in ("****", None) and row["age"] in ("**", None), (path, row)
        assert row["bio"] is None or len(row["bio"]) <= 5, (path, row)
        by_id.setdefault(row["id"], []).append(row)
    assert by_id[1][0]["email"] == _hash("ann@example.com") and by_id[1][-1]["email"] == _hash("ann2@example.com")
    assert by_id[1][0]["born"] == _hash("1985-03-01") and by_id[1][-1]["bio"] == "Ann b"
    assert by_id[2][-1]["email"] is None and by_id[2][-1]["age"] is None  # NULL stays NULL
    assert by_id[3][0]["ssn"] == "****"
    raw = read_topics(stack.bootstrap, [topic, names.transactions_topic(prefix), names.positions_topic(prefix)])
    for got in raw.values():
        for key, value, headers in got:
            blob = (key or b"") + (value or b"") + b"".join(str(h).encode() for h in headers or [])
            assert not [r for r in RAW if r in blob], (path, blob[:300])
    assert_verified(verify(stack, cluster, name))
    assert relay.stop() == 0


@pytest.mark.parametrize("controls, field, words", [
    ({"age": {"truncate": 2}}, "controls.age", "truncate cuts text"),
    ({"id": {"mask": 3}}, "controls.id", "only hash may"),
    ({"nope": {"mask": 3}}, "controls.nope", "no captured column"),
    ({"email": {"hash": "env:PGSHOVEL2_UNSET_SALT"}}, None, None),
])
def test_controls_refused_against_the_catalog(stack, cluster, db, schema, tmp_path, controls, field, words):
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {names.qualified(schema, 'r')} (id int PRIMARY KEY, email text, age int)")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": "r", "controls": controls}])
    out = pgshovel(stack, cluster, "set", "create", "refused", str(cfg), check=False)
    if field is None:  # the salt is read where the relay runs: set create accepts the reference
        assert out.returncode == 0, out.stderr
        return
    assert out.returncode != 0 and field in out.stderr and words in out.stderr, out.stderr
    with ClusterStore(stack.zk, cluster) as store:
        assert not store.exists("refused")


@pytest.mark.parametrize("to_kafka", [False, True])
def test_bootstrap_writes_controlled_values_only(stack, cluster, db, schema, tmp_path, relay_factory, spark,
                                                 monkeypatch, to_kafka):
    """The Spark bootstrap (Parquet, plain columns where it can read them so; or op r messages to Kafka)
    applies the controls as the relay does: no value as captured in its files or messages."""
    import pyarrow.parquet as pq

    from pgshovel2.sparkjobs import bootstrap

    monkeypatch.setenv("PGSHOVEL2_TEST_SALT", SALT)
    name, table = f"ctlboot{int(to_kafka)}", "users"
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {names.qualified(schema, table)} (id int PRIMARY KEY, email text, "
                    "ssn varchar(11), age int, bio text, secret text, born date)")
        cur.executemany(f"INSERT INTO {names.qualified(schema, table)} VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS)
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": table, "controls": CONTROLS}],
                       topic_prefix=f"{name}{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))
    relay_factory(name).wait_for("snapshot done")
    opts = bootstrap.BootstrapOptions(str(tmp_path / "out"), stack.bootstrap, stack.registry, to_kafka=to_kafka)
    with ClusterStore(stack.zk, cluster) as store:
        manifest = bootstrap.run(spark, store, name, opts)
    if to_kafka:
        topic = names.table_topic(f"{name}{cluster}", schema, table)
        blobs = [(k or b"") + (v or b"") for k, v, _ in read_topics(stack.bootstrap, [topic])[topic]]
        assert len(blobs) == 2 * len(ROWS)  # the relay's snapshot and the bootstrap's
    else:
        files = sorted((tmp_path / "out").rglob("*.parquet"))
        blobs = [f.read_bytes() for f in files]
        got = {r["id"]: r for r in pq.read_table(manifest.table_path(tmp_path / "out", manifest.tables[0])).to_pylist()}
        assert got[1]["email"] == _hash("ann@example.com") and got[1]["ssn"] == "****" and got[1]["age"] == "**"
        assert got[1]["bio"] == "Ann's" and "secret" not in got[1] and got[2]["born"] == _hash("1974-11-30")
    for blob in blobs:
        assert not [r for r in RAW if r in blob], blob[:300]
