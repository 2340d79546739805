"""Least privilege: checks of what a set's roles hold, before anything is changed.

:func:`missing` (set create, as the admin role) names every privilege the admin role lacks and,
when the config names another relay role (``database.relay_dsn``), every one that role lacks
(``has_*_privilege(role, ...)`` answers for any role). :func:`relay_missing` is the relay's own
check at its start, as itself. What each role needs, and the SQL granting it:
:mod:`pgshovel2.backends.grants` (``pgshovel set create --print-grants``). Superusers need nothing.
"""

from psycopg2 import sql

from pgshovel2.backends.grants import RELAY_PGQ_FUNCTIONS, capture_kind, roles
from pgshovel2.config import SetConfig

# Whether the pg_roles row's role may open a replication connection: its own REPLICATION attribute
# (not inherited by members of a role that has it), or on Amazon RDS and Aurora membership in
# rds_replication, which AWS's PostgreSQL honours while leaving the member's rolreplication false.
REPLICATES = ("rolreplication OR CASE WHEN pg_catalog.to_regrole('rds_replication') IS NULL THEN false "
              "ELSE pg_catalog.pg_has_role(oid, 'rds_replication', 'MEMBER') END")
REPLICATION = "the REPLICATION attribute (ALTER ROLE ... REPLICATION; Amazon RDS/Aurora: GRANT rds_replication TO ...)"


def missing(cur, config: SetConfig, plugin: str | None = None) -> list[str]:
    """Every privilege the set of config needs that its admin role (cur's) or its relay role lacks, by
    name (empty when none is missing); plugin: a logical set's output plugin (``pgoutput`` needs a
    publication). Tables that do not exist are left to the catalog checks."""
    cur.execute(f"SELECT current_database(), current_user, rolsuper, {REPLICATES} FROM pg_catalog.pg_roles "
                "WHERE rolname = current_user")
    db, role, superuser, replication = cur.fetchone()
    problems = [] if superuser else [f"role {role} lacks {p}" for p in _admin(cur, config, plugin, db, replication)]
    _admin_role, relay = roles(config)
    if config.relay_dsn and relay != role:
        problems += [f"relay role {relay} (database.relay_dsn) {p}" for p in _relay_problems(cur, config, relay)]
    return problems


def relay_missing(cur, config: SetConfig) -> list[str]:
    """What cur's role (the relay's) lacks to relay the set of config, by name (empty: nothing)."""
    cur.execute("SELECT current_user")
    role = cur.fetchone()[0]
    return [f"relay role {role} {p}" for p in _relay_problems(cur, config, role)]


def _admin(cur, config: SetConfig, plugin: str | None, db: str, replication: bool) -> list[str]:
    if config.backend == "logical":
        problems = [] if replication else [REPLICATION]
        problems += _messages(cur, "current_user")
        owned = plugin == "pgoutput" and not config.publication
        problems += _table_problems(cur, config, "current_user", ("SELECT", LOCK), owner=owned)
        if owned and not _has(cur, "has_database_privilege(current_database(), 'CREATE')"):
            problems.append(f"CREATE on database {db} (for the set's publication)")
        return problems
    problems = []
    cur.execute("SELECT to_regnamespace('pgq') IS NULL, to_regnamespace('pgshovel2_pl') IS NULL")
    no_pgq, no_pl = cur.fetchone()
    kind = capture_kind(config)
    if (no_pgq or (kind == "plpgsql" and no_pl)) and not _has(cur, "has_database_privilege(current_database(), "
                                                                   "'CREATE')"):
        problems.append(f"CREATE on database {db} (for schemas pgq and pgshovel2_pl, which do not exist)")
    if not no_pgq and not _has(cur, "has_function_privilege('pgq.create_queue(text)', 'EXECUTE')"):
        problems.append("EXECUTE on pgq.create_queue (GRANT pgq_admin TO ...)")
    if kind == "c" and _exists(cur, "to_regnamespace('pgshovel2')") and \
            not _has(cur, "has_schema_privilege('pgshovel2', 'USAGE')"):
        problems.append("USAGE on schema pgshovel2")
    return problems + _table_problems(cur, config, "current_user", ("SELECT", "TRIGGER"), owner=False)


def _relay_problems(cur, config: SetConfig, role: str) -> list[str]:
    """What role lacks to relay the set (each an "lacks ..." or "does not exist")."""
    cur.execute(f"SELECT rolsuper, {REPLICATES} FROM pg_catalog.pg_roles WHERE rolname = %s", (role,))
    row = cur.fetchone()
    if row is None:
        return ["does not exist"]
    superuser, replication = row
    if superuser:
        return []
    problems = _table_problems(cur, config, role, ("SELECT",), owner=False)
    if config.backend == "logical":
        if not replication:
            problems.append(REPLICATION)
        problems += _messages(cur, role)
        if config.decoder != "pgoutput":
            problems += _schema_usage(cur, role, "pgshovel2_decoder")
        return [f"lacks {p}" for p in problems]
    problems += _schema_usage(cur, role, "pgshovel2" if capture_kind(config) == "c" else "pgshovel2_pl")
    if _exists(cur, "to_regclass('pgq.event_template')"):
        if not _has(cur, "has_table_privilege(%s, 'pgq.event_template', 'SELECT')", (role,)):
            problems.append("SELECT on table pgq.event_template")
        for function in RELAY_PGQ_FUNCTIONS:
            cur.execute("SELECT to_regprocedure(%s) IS NOT NULL AND NOT has_function_privilege(%s, %s, 'EXECUTE')",
                        (function, role, function))
            if cur.fetchone()[0]:
                problems.append(f"EXECUTE on function {function}")
    return [f"lacks {p}" for p in problems]


def _messages(cur, role: str) -> list[str]:
    """EXECUTE on pg_logical_emit_message (the set's markers), which a DBA may have left to the set's
    roles (pgshovel2.backends.grants._messages), for role (a name, or ``current_user``)."""
    who = sql.SQL("current_user") if role == "current_user" else sql.Literal(role)
    cur.execute(sql.SQL("SELECT coalesce(bool_and(has_function_privilege({}, oid, 'EXECUTE')), true) FROM "
                        "pg_catalog.pg_proc WHERE proname = 'pg_logical_emit_message' AND "
                        "pronamespace = 'pg_catalog'::regnamespace").format(who))
    return [] if cur.fetchone()[0] else ["EXECUTE on function pg_catalog.pg_logical_emit_message"]


def _schema_usage(cur, role: str, schema: str) -> list[str]:
    cur.execute("SELECT to_regnamespace(%s) IS NOT NULL AND NOT has_schema_privilege(%s, %s, 'USAGE')",
                (schema, role, schema))
    return [f"USAGE on schema {schema}"] if cur.fetchone()[0] else []


def _has(cur, expression: str, args: tuple = ()) -> bool:
    cur.execute(f"SELECT {expression}", args)
    return bool(cur.fetchone()[0])


def _exists(cur, expression: str) -> bool:
    cur.execute(f"SELECT {expression} IS NOT NULL")
    return bool(cur.fetchone()[0])


# set upgrade of a logical set locks its tables against writers (LOCK TABLE ... IN SHARE ROW EXCLUSIVE
# MODE, pgshovel2.backends.logical_version.lock_tables): PostgreSQL wants any of these for it.
LOCK = "LOCK"
_LOCK_NEEDS = "UPDATE (or DELETE, TRUNCATE; MAINTAIN on PostgreSQL 17+: set upgrade locks it against writers)"


def _any_of(cur, privilege: str) -> str:
    """has_table_privilege's privilege text for privilege (LOCK: any privilege that allows the lock)."""
    if privilege != LOCK:
        return privilege
    cur.execute("SELECT current_setting('server_version_num')::int >= 170000")
    return "UPDATE, DELETE, TRUNCATE" + (", MAINTAIN" if cur.fetchone()[0] else "")


def _table_problems(cur, config: SetConfig, role: str, privileges: tuple[str, ...], owner: bool) -> list[str]:
    """USAGE on each table's schema, privileges on each table, and (owner) its ownership, for role
    (a role name, or ``current_user``)."""
    who = sql.SQL("current_user") if role == "current_user" else sql.Literal(role)
    problems = []
    for t in config.tables:
        cur.execute(sql.SQL("SELECT to_regnamespace(%s) IS NOT NULL AND NOT has_schema_privilege({}, %s, 'USAGE')")
                    .format(who), ('"' + t.schema.replace('"', '""') + '"', t.schema))
        if cur.fetchone()[0]:
            problems.append(f"USAGE on schema {t.schema}")
            continue
        name = sql.Identifier(t.schema, t.name).as_string(cur)
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
        if not cur.fetchone()[0]:
            continue
        for privilege in privileges:
            cur.execute(sql.SQL("SELECT has_table_privilege({}, %s, %s)").format(who), (name, _any_of(cur, privilege)))
            if not cur.fetchone()[0]:
                what = _LOCK_NEEDS if privilege == LOCK else privilege
                problems.append(f"{what} on table {t.schema}.{t.name}")
        if owner:
            cur.execute(sql.SQL("SELECT pg_has_role({}, relowner, 'USAGE') FROM pg_class WHERE oid = %s::regclass")
                        .format(who), (name,))
            if not cur.fetchone()[0]:
                problems.append(f"ownership of table {t.schema}.{t.name} (for the set's publication)")
    return problems
