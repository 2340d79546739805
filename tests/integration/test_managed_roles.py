"""The provider-style role setup of docs/managed.rst, on each stock server: the set's role ``cdc``
is no superuser and has not the REPLICATION attribute, but is a member of a replication role
(``cdc_replication``: NOLOGIN REPLICATION, as RDS's ``rds_replication`` is handed out) and of the
tables' owner role (``shop_owner``, the application's), and holds what ``set create
--print-grants`` prints, run by the DBA.

What it shows: a trigger set with the PL/pgSQL capture and PgQ's PL-only build runs end to end
with that role (it needs no replication at all). A logical pgoutput set does not: on stock
PostgreSQL the REPLICATION attribute is not inherited through membership, the server refuses the
role a replication connection, and ``set create`` refuses before it changes anything, naming the
attribute. With the attribute on the role itself (``ALTER ROLE cdc REPLICATION``, what Cloud SQL,
Azure, Supabase, Neon and Crunchy Bridge have their admin run) and the same grants, the logical
pgoutput set runs end to end; membership in the owner role is enough for its publication.
Amazon RDS/Aurora honour membership in rds_replication instead (rolreplication stays false there):
pgshovel2's checks accept a member of a role of that name; the stock server then refuses it."""

import re
import uuid
from pathlib import Path

import psycopg2
import pytest
import yaml
from psycopg2.extras import LogicalReplicationConnection

from tests.helpers import assert_verified, caught_up, pgshovel, verify

pytestmark = pytest.mark.stock
# The server's refusal of a replication connection to a role without the attribute (PG 14 | PG 17)
REFUSAL = "replication role to start walsender|permission denied to start WAL sender"


@pytest.fixture
def roles(stock_pg):
    """(server, suffix): a fresh database pgshovel on the stock server, the roles cdc_<s>
    (LOGIN, member of cdc_replication_<s> and shop_owner_<s>), cdc_replication_<s> (NOLOGIN
    REPLICATION) and shop_owner_<s> (NOLOGIN, owner of table public.orders_<s>)."""
    stock_pg.reset()
    s = uuid.uuid4().hex[:8]
    stock_pg.query(f"CREATE ROLE cdc_replication_{s} NOLOGIN REPLICATION; CREATE ROLE shop_owner_{s} NOLOGIN; "
                   f"CREATE ROLE cdc_{s} LOGIN IN ROLE cdc_replication_{s}, shop_owner_{s}; "
                   f"CREATE TABLE public.orders_{s} (id int PRIMARY KEY, amount numeric(10,2), note text); "
                   f"ALTER TABLE public.orders_{s} OWNER TO shop_owner_{s}; "
                   f"INSERT INTO public.orders_{s} SELECT g, g * 1.5, 'n' || g FROM generate_series(1, 20) g",
                   admin=True)
    yield stock_pg, s
    stock_pg.reset()  # drops what the roles own in database pgshovel (the set's schemas too)
    stock_pg.query(f"DROP ROLE cdc_{s}; DROP ROLE cdc_replication_{s}; DROP ROLE shop_owner_{s}", admin=True)


def _config(tmp_path: Path, server, s: str, name: str, cluster: str, **extra) -> str:
    dsn = server.dsn.replace("user=app", f"user=cdc_{s}")
    data = {"database": {"dsn": dsn}, "encoding": "json", "topic_prefix": f"{name}{cluster}",
            "tables": [{"schema": "public", "name": f"orders_{s}"}], **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _grant(stack, server, cluster: str, config: str, skip: str | None = None) -> str:
    """Run every statement set create --print-grants prints for config as the DBA (a superuser
    here, the provider's admin role there), except those containing skip; the text."""
    text = pgshovel(stack, cluster, "set", "create", "--print-grants", config).stdout
    for line in text.splitlines():
        if line and not line.startswith("--") and not (skip and skip in line):
            server.query(line, admin=True)
    return text


def _write_and_verify(stack, server, cluster: str, s: str, name: str, relay_factory) -> None:
    relay = relay_factory(name)
    relay.wait_for("snapshot done")
    server.query(f"INSERT INTO public.orders_{s} VALUES (100, 1.25, 'new'); "
                 f"UPDATE public.orders_{s} SET note = 'changed' WHERE id <= 5; "
                 f"DELETE FROM public.orders_{s} WHERE id > 15", admin=True)
    caught_up(stack, cluster, name)
    assert_verified(verify(stack, cluster, name))
    assert relay.stop() == 0


def test_trigger_plpgsql_set_as_a_member_of_a_replication_role(stack, cluster, roles, tmp_path, relay_factory):
    server, s = roles
    assert server.query(f"SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = 'cdc_{s}'") == \
        [(False, False)]
    # print-grants reads nothing: the config names what set create would pick on the server
    cfg = _config(tmp_path, server, s, "mpl", cluster, backend="trigger", capture="plpgsql", pgq="pl")
    grants = _grant(stack, server, cluster, cfg)
    assert "capture plpgsql" in grants and "REPLICATION" not in grants, grants
    out = pgshovel(stack, cluster, "set", "create", "mpl", cfg).stdout
    assert "capture plpgsql" in out, out
    _write_and_verify(stack, server, cluster, s, "mpl", relay_factory)
    pgshovel(stack, cluster, "set", "drop", "mpl")  # drops the triggers: as a member of the owner role


def test_logical_pgoutput_set_needs_the_attribute_on_the_role_itself(stack, cluster, roles, tmp_path,
                                                                     relay_factory):
    server, s = roles
    cfg = _config(tmp_path, server, s, "mlg", cluster, backend="logical", decoder="pgoutput")
    server.query(f"ALTER TABLE public.orders_{s} REPLICA IDENTITY FULL", admin=True)
    grants = _grant(stack, server, cluster, cfg, skip="REPLICATION;")  # membership instead of the attribute
    assert f'ALTER ROLE "cdc_{s}" REPLICATION;' in grants, grants
    cdc_dsn = server.dsn.replace("user=app", f"user=cdc_{s}")
    with pytest.raises(psycopg2.OperationalError, match=REFUSAL):
        psycopg2.connect(cdc_dsn, connection_factory=LogicalReplicationConnection)
    refused = pgshovel(stack, cluster, "set", "create", "mlg", cfg, check=False)
    assert refused.returncode != 0 and f"role cdc_{s} lacks the REPLICATION attribute" in refused.stderr, \
        refused.stderr
    assert server.query("SELECT count(*) FROM pg_replication_slots") == [(0,)]
    assert server.query("SELECT count(*) FROM pg_publication") == [(0,)]
    assert "no replication set" in pgshovel(stack, cluster, "set", "inspect", "mlg", check=False).stderr

    server.query(f"ALTER ROLE cdc_{s} REPLICATION", admin=True)
    out = pgshovel(stack, cluster, "set", "create", "mlg", cfg).stdout
    assert "decoder: pgoutput" in out, out
    _write_and_verify(stack, server, cluster, s, "mlg", relay_factory)
    pgshovel(stack, cluster, "set", "drop", "mlg")
    assert server.query("SELECT count(*) FROM pg_replication_slots") == [(0,)]


def test_rds_replication_membership_passes_the_privilege_check(stack, cluster, roles, tmp_path, relay_factory):
    """RDS's way -- a member of rds_replication, its rolreplication false -- passes the privilege
    checks of set create and of the relay (they refused such a role before). Stock PostgreSQL does
    not honour the membership: the server itself then refuses the relay's replication connection,
    and the relay's error names the refusal."""
    server, s = roles
    cfg = _config(tmp_path, server, s, "mrds", cluster, backend="logical", decoder="pgoutput")
    server.query(f"ALTER TABLE public.orders_{s} REPLICA IDENTITY FULL", admin=True)
    _grant(stack, server, cluster, cfg, skip="REPLICATION;")
    server.query(f"CREATE ROLE rds_replication NOLOGIN; GRANT rds_replication TO cdc_{s}", admin=True)
    try:
        out = pgshovel(stack, cluster, "set", "create", "mrds", cfg).stdout
        assert "decoder: pgoutput" in out, out
        relay = relay_factory("mrds")
        relay.wait_for("cannot open a replication connection")
        log = relay.log()
        assert "lacks" not in log and re.search(REFUSAL, log), log
        relay.stop()
        pgshovel(stack, cluster, "set", "drop", "mrds")
    finally:
        server.query("DROP ROLE rds_replication", admin=True)
    assert server.query("SELECT count(*) FROM pg_publication") == [(0,)]
