"""A set on PostgreSQL as a secured deployment runs it (issue #67): TLS with sslmode=verify-full,
scram-sha-256 only, the relay role also showing a client certificate (tests/secure.py,
scripts/secure/postgres.sh). The DBA runs what ``set create --print-grants`` prints and nothing
else: set create, upgrade and drop as the admin role, the relay as the relay role (trigger and
logical backends), status and verify, an online snapshot, ``pgshovel replicate`` into a role
that is not a superuser. A wrong password, a certificate not trusted, a missing grant: each a
clear error naming it, and nothing written."""

import subprocess
import uuid

import psycopg2
import pytest
import yaml
from confluent_kafka.admin import AdminClient

from pgshovel2.cluster import ClusterStore
from tests.helpers import BIN, assert_verified, caught_up, cli_env, pgshovel, verify
from tests.online import wait_state


class Secure:
    """One test's view of the secured server: its fresh database, configs, the DBA's SQL."""

    def __init__(self, server, dbname: str, tmp_path):
        self.server, self.db, self.tmp = server, dbname, tmp_path
        self.certs = server.certs

    def dsn(self, role: str) -> str:
        return self.server.dsn(role, self.db)

    def dba(self, statements: str) -> list[tuple]:
        return self.server.run(statements, self.db)

    def config(self, name: str, cluster: str, tables: list[str], **extra) -> str:
        """A set config: the admin role's DSN, the relay role's keywords over it (its user, its
        client certificate), tables of schema public."""
        relay = f"user=pgshovel_relay sslcert={self.certs / 'client.pem'} sslkey={self.certs / 'client.key'}"
        data = {"database": {"dsn": self.dsn("pgshovel_admin"), "relay_dsn": relay}, "encoding": "json",
                "topic_prefix": f"{name}{cluster}", "tables": tables, **extra}
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path)

    def grant(self, stack, cluster: str, config: str, *flags: str) -> str:
        """Run every statement set create --print-grants prints for config, as the DBA; the text."""
        text = pgshovel(stack, cluster, "set", "create", "--print-grants", *flags, config).stdout
        for line in text.splitlines():
            if line and not line.startswith("--"):
                self.dba(line)
        return text

    def as_app(self, statements: str) -> None:
        conn = psycopg2.connect(self.dsn("app"))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statements)
        conn.close()


@pytest.fixture
def secure(secure_postgres, secure_db, tmp_path) -> Secure:
    return Secure(secure_postgres, secure_db, tmp_path)


def _table(secure: Secure, name: str, rows: int = 5) -> None:
    secure.dba(f"CREATE TABLE public.{name} (id int PRIMARY KEY, v text); "
               f"INSERT INTO public.{name} SELECT g, 'v' || g FROM generate_series(1, {rows}) g; "
               f"ALTER TABLE public.{name} REPLICA IDENTITY FULL; GRANT USAGE ON SCHEMA public TO app; "
               f"ALTER TABLE public.{name} OWNER TO app")  # the application owns its tables


def _topics(stack) -> set[str]:
    return set(AdminClient({"bootstrap.servers": stack.bootstrap}).list_topics(timeout=10).topics)


def _sets(stack, cluster: str) -> list[str]:
    with ClusterStore(stack.zk, cluster) as store:
        return store.list_sets()


def _no_forged_marker(secure: Secure) -> None:
    """After the grants a writer may not emit a logical decoding message (a set's marker would be one)."""
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="pg_logical_emit_message"):
        secure.as_app("SELECT pg_logical_emit_message(true, 'pgshovel2.version', '{\"version\": 9}')")


def _versions(stack, cluster: str, name: str) -> int:
    with ClusterStore(stack.zk, cluster) as store:
        return store.get_set(name)[0].version


def _write_and_check(stack, cluster, secure: Secure, name: str, table: str) -> None:
    secure.as_app(f"INSERT INTO public.{table} VALUES (100, 'new'); UPDATE public.{table} SET v = 'upd' "
                  f"WHERE id = 1; DELETE FROM public.{table} WHERE id = 2")
    caught_up(stack, cluster, name)
    assert_verified(verify(stack, cluster, name))


@pytest.mark.parametrize("capture", ["c", "plpgsql"])
def test_trigger_set_with_admin_and_relay_roles(stack, cluster, secure, relay_factory, capture):
    name = f"sec{capture[0]}"
    _table(secure, "acct")
    cfg = secure.config(name, cluster, ["acct"], backend="trigger", capture=capture)
    proc = pgshovel(stack, cluster, "set", "create", name, cfg, check=False)  # before the grants
    assert proc.returncode == 1, proc.stderr
    for what in ("role pgshovel_admin lacks SELECT on table public.acct", "TRIGGER on table public.acct",
                 "relay role pgshovel_relay (database.relay_dsn) lacks SELECT on table public.acct"):
        assert what in proc.stderr, proc.stderr
    assert secure.dba("SELECT count(*) FROM pgq.queue") == [(0,)] and _sets(stack, cluster) == []

    grants = secure.grant(stack, cluster, cfg)
    assert "OWNER TO" not in grants.replace("OWNER TO lines", "")
    pgshovel(stack, cluster, "set", "create", name, cfg)
    relay = relay_factory(name)
    relay.wait_for("snapshot done")
    _write_and_check(stack, cluster, secure, name, "acct")
    pgshovel(stack, cluster, "set", "snapshot", name, "--where", "id < 50", "--chunk-size", "2")
    wait_state(stack, cluster, name, "done")
    status = pgshovel(stack, cluster, "set", "status", name).stdout
    assert "sslmode=verify-full" in status and secure.server.password("pgshovel_admin") not in status, status
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):  # the writer may not append events
        secure.as_app("SELECT pgq.insert_event('pgshovel2.x.y', 'I', '{}')")
    assert relay.stop() == 0
    if capture == "plpgsql":  # set drop drops the triggers: PostgreSQL wants the tables' owner (a member of its role)
        secure.dba("GRANT app TO pgshovel_admin")
    out = pgshovel(stack, cluster, "set", "drop", name).stdout
    assert "znode" in out, out
    assert secure.dba("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgshovel2%'") == [(0,)]


def test_logical_set_on_the_dbas_publication(stack, cluster, secure, relay_factory):
    _table(secure, "orders")
    _table(secure, "other")
    cfg = secure.config("seclog", cluster, ["orders"], backend="logical", decoder="pgoutput",
                        publication={"existing": "shop_pub"})
    grants = pgshovel(stack, cluster, "set", "create", "--print-grants", cfg).stdout
    assert "OWNER TO" not in grants.replace("OWNER TO lines", "") and "CREATE ON DATABASE" not in grants
    (publication,) = [line for line in grants.splitlines() if line.startswith("CREATE PUBLICATION")]
    assert publication.startswith('CREATE PUBLICATION "shop_pub" FOR TABLE "public"."orders"'), publication
    for line in grants.splitlines():
        if line and not line.startswith("--") and line != publication:
            secure.dba(line)
    proc = pgshovel(stack, cluster, "set", "create", "seclog", cfg, check=False)
    assert proc.returncode == 1 and "'shop_pub'" in proc.stderr and "does not exist" in proc.stderr, proc.stderr
    secure.dba("CREATE PUBLICATION shop_pub FOR TABLE public.other")  # not the set's table
    proc = pgshovel(stack, cluster, "set", "create", "seclog", cfg, check=False)
    assert proc.returncode == 1 and '"public"."orders" is not in it' in proc.stderr, proc.stderr
    assert _sets(stack, cluster) == []
    secure.dba("ALTER PUBLICATION shop_pub ADD TABLE public.orders WHERE (id > 2); "
               "ALTER PUBLICATION shop_pub SET (publish = 'insert, update')")
    proc = pgshovel(stack, cluster, "set", "create", "seclog", cfg, check=False)
    for what in ("must publish insert, update, delete and truncate", '"public"."orders" has a row filter'):
        assert proc.returncode == 1 and what in proc.stderr, proc.stderr
    assert _sets(stack, cluster) == []
    secure.dba("DROP PUBLICATION shop_pub")
    secure.dba(publication)  # the DBA makes it (its maker needs CREATE on the database, and the tables)
    _no_forged_marker(secure)

    pgshovel(stack, cluster, "set", "create", "seclog", cfg)
    relay = relay_factory("seclog")
    relay.wait_for("snapshot done")
    _write_and_check(stack, cluster, secure, "seclog", "orders")
    published = "SELECT tablename::text FROM pg_publication_tables WHERE pubname = 'shop_pub' ORDER BY 1"
    wider = secure.config("seclog", cluster, ["orders", "other"], backend="logical", decoder="pgoutput",
                          publication={"existing": "shop_pub"})
    proc = pgshovel(stack, cluster, "set", "upgrade", "seclog", wider, check=False)  # no grant on other yet
    for what in ("role pgshovel_admin lacks SELECT on table public.other",
                 "relay role pgshovel_relay (database.relay_dsn) lacks SELECT on table public.other"):
        assert proc.returncode == 1 and what in proc.stderr, proc.stderr
    assert "role pgshovel_admin lacks UPDATE (or DELETE, TRUNCATE" in proc.stderr  # the upgrade's LOCK TABLE
    secure.dba("GRANT SELECT ON public.other TO pgshovel_admin, pgshovel_relay; GRANT UPDATE ON public.other "
               "TO pgshovel_admin")
    proc = pgshovel(stack, cluster, "set", "upgrade", "seclog", wider, check=False)  # other: not in shop_pub
    assert proc.returncode == 1 and '"public"."other" is not in it' in proc.stderr, proc.stderr
    assert secure.dba(published) == [("orders",)]  # never altered by us
    assert _versions(stack, cluster, "seclog") == 1
    secure.dba("ALTER PUBLICATION shop_pub ADD TABLE public.other")  # the DBA adds it: the upgrade goes on
    secure.as_app("DELETE FROM public.other")  # an added table is captured from the upgrade on (no snapshot)
    pgshovel(stack, cluster, "set", "upgrade", "seclog", wider)
    _write_and_check(stack, cluster, secure, "seclog", "other")
    pgshovel(stack, cluster, "set", "snapshot", "seclog", "--where", "id < 50", "--chunk-size", "2")
    wait_state(stack, cluster, "seclog", "done")
    assert relay.stop() == 0
    pgshovel(stack, cluster, "set", "drop", "seclog")
    assert secure.dba(published) == [("orders",), ("other",)]
    assert secure.dba("SELECT pubname FROM pg_publication") == [("shop_pub",)]  # the DBA's: kept


def test_logical_set_with_our_decoder(stack, cluster, secure, relay_factory):
    _table(secure, "items")
    cfg = secure.config("secdec", cluster, ["items"], backend="logical", decoder="pgshovel2")
    secure.grant(stack, cluster, cfg)
    _no_forged_marker(secure)
    pgshovel(stack, cluster, "set", "create", "secdec", cfg)
    secure.dba("ALTER ROLE pgshovel_relay NOREPLICATION")  # a missing grant: the relay says which, writes nothing
    refused = relay_factory("secdec")
    assert refused.proc.wait(60) != 0
    assert "relay role pgshovel_relay lacks the REPLICATION attribute" in refused.log(), refused.log()
    assert not any(t.startswith(f"secdec{cluster}") for t in _topics(stack))
    assert secure.dba("SELECT count(*) FROM pg_replication_slots") == [(0,)]
    secure.dba("ALTER ROLE pgshovel_relay REPLICATION")
    relay = relay_factory("secdec")
    relay.wait_for("snapshot done")
    _write_and_check(stack, cluster, secure, "secdec", "items")
    # an online snapshot as the relay role: its watermarks are logical messages the grants leave to it
    pgshovel(stack, cluster, "set", "snapshot", "secdec", "--where", "id < 50", "--chunk-size", "2")
    wait_state(stack, cluster, "secdec", "done")
    assert relay.stop() == 0
    pgshovel(stack, cluster, "set", "drop", "secdec")
    assert secure.dba("SELECT count(*) FROM pg_replication_slots") == [(0,)]


def test_wrong_password_untrusted_certificate_missing_grant(stack, cluster, secure, relay_factory):
    _table(secure, "pay")
    cfg = secure.config("secbad", cluster, ["pay"], backend="trigger", capture="c")
    secure.grant(stack, cluster, cfg)
    wrong = secure.tmp / "pgpass"
    wrong.write_text("*:*:*:pgshovel_admin:not-the-password\n*:*:*:pgshovel_relay:not-the-password\n")
    wrong.chmod(0o600)
    other_ca = secure.tmp / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=other",
                    "-keyout", str(secure.tmp / "other.key"), "-out", str(other_ca), "-days", "1"],
                   check=True, capture_output=True)
    for old, new, says in ((str(secure.server.passfile), str(wrong),
                            'password authentication failed for user "pgshovel_admin"'),
                           (str(secure.certs / "ca.pem"), str(other_ca), "certificate verify failed")):
        bad = secure.tmp / "bad.yaml"
        bad.write_text(open(cfg).read().replace(old, new))
        proc = pgshovel(stack, cluster, "set", "create", "secbad", str(bad), check=False)
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr
        assert "not-the-password" not in proc.stderr
    assert secure.dba("SELECT count(*) FROM pgq.queue") == [(0,)] and _sets(stack, cluster) == []

    pgshovel(stack, cluster, "set", "create", "secbad", cfg)
    secure.dba("ALTER ROLE pgshovel_relay PASSWORD 'not-the-password'")  # the relay's passfile is now wrong
    try:
        relay = relay_factory("secbad")
        relay.wait_for('password authentication failed for user "pgshovel_relay"')
        assert secure.server.password("pgshovel_relay") not in relay.log()
        relay.stop()
    finally:
        secure.dba(f"ALTER ROLE pgshovel_relay PASSWORD '{secure.server.password('pgshovel_relay')}'")
    assert not any(t.startswith(f"secbad{cluster}") for t in _topics(stack))
    secure.dba("REVOKE EXECUTE ON FUNCTION pgq.finish_batch(bigint) FROM pgshovel_relay")
    relay = relay_factory("secbad")
    assert relay.proc.wait(60) != 0
    assert "relay role pgshovel_relay lacks EXECUTE on function pgq.finish_batch(bigint)" in relay.log(), relay.log()
    assert not any(t.startswith(f"secbad{cluster}") for t in _topics(stack))  # nothing written to Kafka


def test_replicate_into_a_role_that_is_not_a_superuser(stack, cluster, secure, relay_factory, secure_postgres):
    _table(secure, "acct", rows=20)
    cfg = secure.config("secrep", cluster, ["acct"], backend="trigger", capture="c")
    secure.grant(stack, cluster, cfg)
    pgshovel(stack, cluster, "set", "create", "secrep", cfg)
    relay = relay_factory("secrep")
    relay.wait_for("snapshot done")
    secure.as_app("UPDATE public.acct SET v = 'changed' WHERE id <= 3")
    caught_up(stack, cluster, "secrep")
    target = secure_postgres.dsn("replica", "replica")
    run = [str(BIN / "pgshovel"), "replicate", "secrep", "--target", target, "--until-caught-up"]
    done = subprocess.run(run, env=cli_env(stack, cluster), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert 'GRANT SET ON PARAMETER session_replication_role TO "replica"' in done.stderr, done.stderr
    assert secure_postgres.run("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgshovel2_replica'",
                               "replica", "replica") == [(0,)]
    secure_postgres.run("GRANT SET ON PARAMETER session_replication_role TO replica", "replica")
    try:
        done = subprocess.run(run, env=cli_env(stack, cluster), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        rows = secure_postgres.run("SELECT id, v FROM public.acct ORDER BY id", "replica", "replica")
        assert rows == secure.dba("SELECT id, v FROM public.acct ORDER BY id") and len(rows) == 20
    finally:
        secure_postgres.run("DROP SCHEMA IF EXISTS pgshovel2_replica, public CASCADE; CREATE SCHEMA public "
                            "AUTHORIZATION pg_database_owner", "replica")
        secure_postgres.run("REVOKE SET ON PARAMETER session_replication_role FROM replica", "replica")
    assert relay.stop() == 0


def test_jdbc_of_a_tls_connection_with_a_client_certificate(secure):
    """Spark's JDBC URL and properties (pgshovel2.sparkjobs.jdbc) come from the libpq connection:
    verify-full with the CA, the client certificate, its key as PKCS#8 DER, the passfile's password."""
    from pgshovel2.sparkjobs.jdbc import jdbc_source

    conn = psycopg2.connect(secure.dsn("pgshovel_relay"))
    try:
        url, props = jdbc_source(conn)
    finally:
        conn.close()
    assert url == f"jdbc:postgresql://localhost:{secure.server.port}/{secure.db}"
    assert props["user"] == "pgshovel_relay" and props["password"] == secure.server.password("pgshovel_relay")
    assert props["sslmode"] == "verify-full" and props["sslrootcert"] == str(secure.certs / "ca.pem")
    assert props["sslcert"] == str(secure.certs / "client.pem") and props["sslkey"].endswith(".pk8")
    with open(props["sslkey"], "rb") as f:
        assert f.read(1) == b"\x30"  # DER: an ASN.1 SEQUENCE


def test_spark_bootstrap_reads_over_tls(stack, cluster, secure, relay_factory, spark, tmp_path):
    """The Spark bootstrap's JDBC reads (every partition) reach the secured server as the relay role:
    verify-full, scram, client certificate."""
    from pgshovel2.sparkjobs import bootstrap

    _table(secure, "big", rows=3000)
    cfg = secure.config("secspk", cluster, ["big"], backend="trigger", capture="c")
    secure.grant(stack, cluster, cfg)
    pgshovel(stack, cluster, "set", "create", "secspk", cfg)
    relay = relay_factory("secspk")
    relay.wait_for("snapshot done")
    with ClusterStore(stack.zk, cluster) as store:
        opts = bootstrap.BootstrapOptions(str(tmp_path / f"boot-{uuid.uuid4().hex[:6]}"), stack.bootstrap,
                                          stack.registry, partition_rows=500)
        manifest = bootstrap.run(spark, store, "secspk", opts)
    assert sum(c.rows for c in manifest.tables) == 3000
    assert relay.stop() == 0
