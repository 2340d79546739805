"""Column controls seen by pgshovel2's own consumers (#71): ``replicate`` makes a masked or hashed
column a text column of the target and fills it with the values Kafka holds; its ``copy`` bootstrap,
which would read the values as the database stores them, is refused."""

import hashlib
import subprocess

from pgshovel2 import names
from tests.helpers import BIN, caught_up, cli_env, pgshovel, write_config

SALT = "consumer-salt"
SALTED = {"hash": "env:PGSHOVEL2_TEST_SALT"}
CONTROLS = {"age": {"mask": 2}, "email": SALTED, "born": SALTED}


def _set(stack, cluster, db, schema, tmp_path, name: str) -> None:
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {names.qualified(schema, name)} (id int PRIMARY KEY, age int, email text, "
                    "born date)")
        cur.execute(f"INSERT INTO {names.qualified(schema, name)} VALUES (1, 41, 'ann@example.com', '1985-03-01')")
    cfg = write_config(tmp_path, stack, [{"schema": schema, "name": name, "controls": CONTROLS}],
                       topic_prefix=f"{name}{cluster}")
    pgshovel(stack, cluster, "set", "create", name, str(cfg))


def _replicate(stack, cluster, name: str, dsn: str, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pgshovel"), "replicate", name, "--target", dsn, "--bootstrap", mode,
                           "--until-caught-up"], env=cli_env(stack, cluster), capture_output=True, text=True,
                          timeout=300)


def test_replicate_carries_controlled_values_as_text(stack, cluster, db, schema, tmp_path, relay_factory, target,
                                                     monkeypatch):
    monkeypatch.setenv("PGSHOVEL2_TEST_SALT", SALT)
    _set(stack, cluster, db, schema, tmp_path, "crep")
    relay = relay_factory("crep")
    relay.wait_for("snapshot done")
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {names.qualified(schema, 'crep')} VALUES (2, 7, 'bob@example.com', NULL)")
    caught_up(stack, cluster, "crep")
    done = _replicate(stack, cluster, "crep", target.dsn, "kafka")
    assert done.returncode == 0, done.stderr
    tconn = target.connect()
    with tconn.cursor() as cur:
        cur.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'crep' "
                    "ORDER BY ordinal_position")
        assert cur.fetchall() == [("id", "integer"), ("age", "text"), ("email", "text"), ("born", "text")]
        cur.execute(f"SELECT id, age, email, born FROM {names.qualified(schema, 'crep')} ORDER BY id")
        assert cur.fetchall() == [
            (1, "**", hashlib.sha256(f"{SALT}ann@example.com".encode()).hexdigest(),
             hashlib.sha256(f"{SALT}1985-03-01".encode()).hexdigest()),
            (2, "**", hashlib.sha256(f"{SALT}bob@example.com".encode()).hexdigest(), None)]
    tconn.close()
    assert relay.stop() == 0


def test_replicate_copy_bootstrap_is_refused(stack, cluster, db, schema, tmp_path, relay_factory, target,
                                             monkeypatch):
    monkeypatch.setenv("PGSHOVEL2_TEST_SALT", SALT)
    _set(stack, cluster, db, schema, tmp_path, "ccopy")
    relay_factory("ccopy").wait_for("snapshot done")
    done = _replicate(stack, cluster, "ccopy", target.dsn, "copy")
    assert done.returncode != 0 and "age mask 2" in done.stderr and "mode kafka or parquet" in done.stderr, done.stderr
    tconn = target.connect()
    with tconn.cursor() as cur:
        cur.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'ccopy'")
        assert cur.fetchone()[0] == 0  # nothing made
    tconn.close()
