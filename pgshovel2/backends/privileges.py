"""Least privilege: the grants a non-superuser role needs for a set, and a check of them.

:func:`grants_sql` prints, from a set config alone, the SQL a DBA runs for the role of the
config's DSN (``pgshovel set create --print-grants CONFIG``). :func:`missing` checks, before
set create changes anything, the privileges the trigger backend needs in the database and
names every missing one (``has_*_privilege``), for both backends.

Trigger backend: CREATE on the database (schemas ``pgq``, PgQ's PL-only build, and
``pgshovel2``), USAGE on each table's schema, SELECT (the snapshot) and TRIGGER (creating the
capture triggers) on each table. ``set upgrade`` and ``set drop`` drop triggers, which only
the table's owner may (``ALTER TABLE ... OWNER TO`` or membership in the owner role). The C
capture extension needs a superuser once; PgQ's PL-only build needs nothing more (without
CREATEROLE it is installed without its group roles, see pgshovel2.backends.pgq_install).
Logical backend: the REPLICATION attribute, SELECT on each table, and ownership of the
tables for a publication (pgoutput).
"""

from psycopg2 import sql
from psycopg2.extensions import parse_dsn

from pgshovel2.config import SetConfig


def _role(config: SetConfig) -> str:
    return parse_dsn(config.dsn).get("user") or "<role of database.dsn>"


def _dbname(config: SetConfig) -> str:
    return parse_dsn(config.dsn).get("dbname") or _role(config)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def grants_sql(config: SetConfig) -> str:
    """The SQL (text, one statement a line, ``--`` comments) granting what the set of config
    needs to the role of its DSN (``user=``; a placeholder when the DSN names none)."""
    role, db = _ident(_role(config)), _ident(_dbname(config))
    tables = [f"{_ident(t.schema)}.{_ident(t.name)}" for t in config.tables]
    schemas = sorted({_ident(t.schema) for t in config.tables})
    lines = [f"-- grants for the {config.backend} backend, role {role}, database {db}"]
    if config.backend == "logical":
        lines += [f"ALTER ROLE {role} REPLICATION;",
                  *(f"GRANT USAGE ON SCHEMA {s} TO {role};" for s in schemas),
                  *(f"GRANT SELECT ON TABLE {t} TO {role};" for t in tables),
                  "-- pgoutput's publication: CREATE on the database and ownership of the tables",
                  f"GRANT CREATE ON DATABASE {db} TO {role};",
                  *(f"ALTER TABLE {t} OWNER TO {role};" for t in tables)]
        return "\n".join(lines) + "\n"
    lines += ["-- schemas pgq (PgQ's PL-only build) and pgshovel2_pl (PL/pgSQL capture functions)",
              f"GRANT CREATE ON DATABASE {db} TO {role};",
              *(f"GRANT USAGE ON SCHEMA {s} TO {role};" for s in schemas),
              *(f"GRANT SELECT, TRIGGER ON TABLE {t} TO {role};" for t in tables),
              "-- set upgrade and set drop drop triggers: only a table's owner may",
              *(f"ALTER TABLE {t} OWNER TO {role};  -- or GRANT <owner of the table> TO {role}" for t in tables),
              "-- every other role that writes these tables appends to the set's queue, as PgQ's writers do:",
              "-- GRANT pgq_writer TO <writer>;"]
    if config.pgq == "extension":
        lines.append(f"-- pgq: extension needs a superuser once: CREATE EXTENSION pgq; GRANT pgq_admin TO {role};")
    return "\n".join(lines) + "\n"


def missing(cur, config: SetConfig, plugin: str | None = None) -> list[str]:
    """Every privilege the set of config needs that cur's role lacks, by name (empty when
    none is missing); plugin: a logical set's output plugin (``pgoutput`` needs a publication).
    Tables that do not exist are left to the catalog checks."""
    cur.execute("SELECT current_database(), current_user, rolsuper, rolreplication FROM pg_roles "
                "WHERE rolname = current_user")
    db, role, superuser, replication = cur.fetchone()
    if superuser:
        return []
    if config.backend == "logical":
        problems = [] if replication else ["the REPLICATION attribute (ALTER ROLE ... REPLICATION)"]
        problems += _table_problems(cur, config, ("SELECT",), owner=plugin == "pgoutput")
        if plugin == "pgoutput" and not _can_create_in_database(cur):
            problems.append(f"CREATE on database {db} (for the set's publication)")
    else:
        cur.execute("SELECT to_regnamespace('pgq') IS NULL OR (to_regnamespace('pgshovel2') IS NULL "
                    "AND to_regnamespace('pgshovel2_pl') IS NULL)")
        needs_schema = cur.fetchone()[0]
        problems = [f"CREATE on database {db} (for schemas pgq and pgshovel2_pl)"] \
            if needs_schema and not _can_create_in_database(cur) else []
        problems += _table_problems(cur, config, ("SELECT", "TRIGGER"), owner=False)
    return [f"role {role} lacks {p}" for p in problems]


def _can_create_in_database(cur) -> bool:
    cur.execute("SELECT has_database_privilege(current_database(), 'CREATE')")
    return bool(cur.fetchone()[0])


def _table_problems(cur, config: SetConfig, privileges: tuple[str, ...], owner: bool) -> list[str]:
    """USAGE on each table's schema, privileges on each table, and (owner) its ownership."""
    problems = []
    for t in config.tables:
        cur.execute("SELECT to_regnamespace(%s) IS NOT NULL AND NOT has_schema_privilege(%s, 'USAGE')",
                    (_ident(t.schema), t.schema))
        if cur.fetchone()[0]:
            problems.append(f"USAGE on schema {t.schema}")
            continue
        name = sql.Identifier(t.schema, t.name).as_string(cur)
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
        if not cur.fetchone()[0]:
            continue
        for privilege in privileges:
            cur.execute("SELECT has_table_privilege(%s, %s)", (name, privilege))
            if not cur.fetchone()[0]:
                problems.append(f"{privilege} on table {t.schema}.{t.name}")
        if owner:
            cur.execute("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = %s::regclass", (name,))
            if not cur.fetchone()[0]:
                problems.append(f"ownership of table {t.schema}.{t.name} (for the set's publication)")
    return problems
