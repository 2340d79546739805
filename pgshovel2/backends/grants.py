"""The SQL a DBA runs so that a set works with two roles that are not superusers
(``pgshovel set create --print-grants CONFIG``), from the config alone (nothing is read).

- The **admin role** (``database.dsn``) runs ``set create``, ``set upgrade`` and ``set drop``: it
  installs the capture objects (PgQ queue, triggers; or the publication) in the set's
  transaction. It gets TRIGGER (trigger backend) and SELECT on the tables, PgQ's ``pgq_admin``,
  USAGE on our schemas; never ownership of a table, unless asked (``transfer_ownership``).
- The **relay role** (``database.relay_dsn``; the admin role when the config has none) reads and
  acknowledges: SELECT on the tables (snapshots), and for the trigger backend EXECUTE on the PgQ
  consumer functions it calls (next_batch_info, next_batch_custom, batch_event_sql,
  finish_batch, force_tick; pgq.ticker(text) to tick its queue, pgq.insert_event(text, text,
  text) for an online snapshot's watermarks) and SELECT on the event tables; for the logical
  backend the REPLICATION attribute (Amazon RDS/Aurora: membership in rds_replication). Logical
  sets: ``pg_logical_emit_message`` (every role's by default) is left to the two roles, since the
  set's markers are such messages. PgQ's maintenance (event table rotation) stays with pgqd or a
  role holding pgq_admin.
- The **writers** of the tables need nothing: never grant them pgq_writer or EXECUTE on
  pgq.insert_event (they could append events no change made).

What each path needs, and why (docs/security.rst, "Roles and grants"):

============================ ===================================================================
trigger, capture c           extensions pgq and pgshovel2 (a superuser, once); USAGE on schema
                             pgshovel2 (its functions); pgq_admin (create_queue, markers);
                             EXECUTE on pgshovel2.drop_trigger (set upgrade/drop drop triggers,
                             which PostgreSQL lets only the table's owner do)
trigger, capture plpgsql     schema pgshovel2_pl, made by the DBA for the admin role (CREATE
                             SCHEMA ... AUTHORIZATION: no CREATE on the database); with PgQ's
                             PL-only build (pgq: pl) CREATE on the database (it makes schema pgq);
                             set upgrade/drop: ownership of the tables (or membership in their
                             owner's role): printed as a comment, as ALTER TABLE only with
                             transfer_ownership
logical, decoder pgshovel2   extension pgshovel2_decoder (a superuser, once); USAGE on its schema;
                             REPLICATION for both roles (the relay makes the slot, set drop drops it);
                             the admin role UPDATE on the tables (set upgrade's LOCK; MAINTAIN on 17+)
logical, decoder pgoutput    the DBA's publication (``publication: {existing: NAME}``: printed),
                             or CREATE on the database and ownership of the tables (a publication
                             FOR TABLE needs it; only with transfer_ownership)
============================ ===================================================================
"""

from psycopg2.extensions import make_dsn, parse_dsn

from pgshovel2.config import SetConfig

WRITERS = ("-- the roles that write these tables need no grant for pgshovel2: their own privileges on the "
           "tables are enough (never grant them pgq_writer or EXECUTE on pgq.insert_event: they could append "
           "events no change made)")
# Amazon RDS/Aurora grant replication by membership, not by the attribute (backends.privileges.REPLICATES)
_RDS = " (Amazon RDS/Aurora: GRANT rds_replication TO {} instead)"
# The PgQ functions the relay calls, and those they call in turn (pgq_ticker, pgq_source, chunks)
RELAY_PGQ_FUNCTIONS = (
    "pgq.next_batch_info(text, text)", "pgq.next_batch(text, text)",
    "pgq.next_batch_custom(text, text, interval, integer, interval)",
    "pgq.find_tick_helper(integer, bigint, timestamp with time zone, bigint, bigint, interval)",
    "pgq.batch_event_sql(bigint)", "pgq.batch_event_tables(bigint)", "pgq.get_batch_info(bigint)",
    "pgq.finish_batch(bigint)", "pgq.force_tick(text)", "pgq.ticker(text)",
    "pgq.insert_event(text, text, text)", "pgq.insert_event(text, text, text, text, text, text, text)",
)


def ident(name: str) -> str:
    """name as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def roles(config: SetConfig) -> tuple[str, str]:
    """(admin role, relay role) named by the config's DSNs (``user=``; a placeholder when none)."""
    admin = parse_dsn(config.dsn).get("user") or "<role of database.dsn>"
    if not config.relay_dsn:
        return admin, admin
    return admin, parse_dsn(make_dsn(config.dsn, **parse_dsn(config.relay_dsn))).get("user") or admin


def grants_sql(config: SetConfig, transfer_ownership: bool = False) -> str:
    """The SQL (one statement a line, ``--`` comments) for the admin and relay roles of config (module
    docstring); transfer_ownership: give the admin role the tables (ALTER TABLE ... OWNER TO) where a
    path needs an owner, instead of saying so in a comment."""
    admin, relay = roles(config)
    db = parse_dsn(config.dsn).get("dbname") or admin
    kind = config.backend + (f", capture {config.capture}" if config.capture else "") + (
        f", decoder {config.decoder}" if config.decoder else "")
    lines = [f"-- pgshovel2 grants: {kind}, database {ident(db)}, admin role {ident(admin)}, relay role {ident(relay)}"]
    lines += _admin(config, ident(admin), ident(db), transfer_ownership)
    if relay != admin:
        lines += _relay(config, ident(relay), ident(db))
    else:
        lines.append("-- the relay role: the admin role (the config has no database.relay_dsn): nothing more")
    lines.append(WRITERS)
    return "\n".join(lines) + "\n"


def _tables(config: SetConfig) -> list[str]:
    return [f"{ident(t.schema)}.{ident(t.name)}" for t in config.tables]


def _schemas(config: SetConfig) -> list[str]:
    return sorted({ident(t.schema) for t in config.tables})


def capture_kind(config: SetConfig) -> str:
    """c or plpgsql: what the grants are printed for -- the config's, else set create's default where
    the extensions are installed: c, unless PgQ is the PL-only build (the C capture needs the extension)."""
    return config.capture or ("plpgsql" if config.pgq == "pl" else "c")


def _admin(config: SetConfig, role: str, db: str, transfer: bool) -> list[str]:
    tables = _tables(config)
    lines = [f"-- the admin role {role} (database.dsn): set create, set upgrade, set drop",
             f"GRANT CONNECT ON DATABASE {db} TO {role};",
             *(f"GRANT USAGE ON SCHEMA {s} TO {role};" for s in _schemas(config))]
    if config.backend == "logical":
        lines += [*(f"GRANT SELECT ON TABLE {t} TO {role};" for t in tables),
                  "-- set upgrade locks the tables against writers while it switches (LOCK TABLE ... IN SHARE ROW "
                  "EXCLUSIVE MODE), which PostgreSQL allows with UPDATE, DELETE or TRUNCATE (PostgreSQL 17+: "
                  "MAINTAIN, which writes nothing: GRANT MAINTAIN instead)",
                  *(f"GRANT UPDATE ON TABLE {t} TO {role};" for t in tables),
                  f"ALTER ROLE {role} REPLICATION;  -- set drop drops the set's replication slot{_RDS.format(role)}",
                  *_messages(config)]
        return lines + (_admin_pgoutput(config, role, db, transfer) if config.decoder == "pgoutput"
                        else _admin_decoder(role))
    lines += [*(f"GRANT SELECT, TRIGGER ON TABLE {t} TO {role};" for t in tables),
              "-- a partitioned table: the same on each of its partitions (its TRUNCATE triggers are there)"]
    if capture_kind(config) == "c":
        if config.capture is None:
            lines.append("-- capture not given: set create takes c where the pgshovel2 extension is installed "
                         "(these lines); give capture: plpgsql for the other path's")
        return lines + [
            "-- by a superuser, once: PgQ and the capture extension",
            "CREATE EXTENSION IF NOT EXISTS pgq;", "CREATE EXTENSION IF NOT EXISTS pgshovel2;",
            "ALTER EXTENSION pgshovel2 UPDATE;",
            f"GRANT pgq_admin TO {role};  -- the set's queue (create_queue, register_consumer, version markers)",
            f"GRANT USAGE ON SCHEMA pgshovel2 TO {role};",
            "-- set upgrade and set drop drop the set's triggers without owning the tables:",
            f"GRANT EXECUTE ON FUNCTION pgshovel2.drop_trigger(regclass, name) TO {role};"]
    lines.append(f"CREATE SCHEMA IF NOT EXISTS pgshovel2_pl AUTHORIZATION {role};  -- the PL/pgSQL capture "
                 "functions, owned by the admin role")
    if config.pgq == "pl":
        lines.append(f"GRANT CREATE ON DATABASE {db} TO {role};  -- PgQ's PL-only build creates schema pgq (once)")
    else:
        lines += ["CREATE EXTENSION IF NOT EXISTS pgq;  -- by a superuser, once (pgq: pl installs PgQ's PL-only "
                  "build instead)", f"GRANT pgq_admin TO {role};"]
    return lines + _ownership("set upgrade and set drop drop the set's triggers, which PostgreSQL lets only a "
                              "table's owner do", tables, role, transfer)


def _messages(config: SetConfig) -> list[str]:
    """A logical set's markers (versions, drops, renames, watermarks) are logical decoding messages,
    which PostgreSQL lets every role emit: left to the set's two roles, so no other role of the
    database can write one the relay would take for the set's (every overload: PostgreSQL 17 added
    two)."""
    admin, relay = (ident(r) for r in roles(config))
    to = admin if admin == relay else f"{admin}, {relay}"
    return ["-- logical decoding messages carry the set's markers: only the set's roles may emit one (by a superuser, "
            "in the set's database; another application of it emitting messages needs the same grant)",
            "DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT oid::regprocedure FROM pg_catalog.pg_proc "
            "WHERE proname = 'pg_logical_emit_message' AND pronamespace = 'pg_catalog'::regnamespace LOOP "
            "EXECUTE 'REVOKE EXECUTE ON FUNCTION ' || f || ' FROM PUBLIC'; "
            f"EXECUTE 'GRANT EXECUTE ON FUNCTION ' || f || ' TO {to}'; END LOOP; END $$;"]


def _admin_decoder(role: str) -> list[str]:
    return ["CREATE EXTENSION IF NOT EXISTS pgshovel2_decoder;  -- by a superuser, once (our output plugin)",
            f"GRANT USAGE ON SCHEMA pgshovel2_decoder TO {role};"]


def _admin_pgoutput(config: SetConfig, role: str, db: str, transfer: bool) -> list[str]:
    tables = _tables(config)
    if config.publication:
        return ["-- the publication the set reads (publication.existing), made and kept by the DBA (a superuser, or "
                "the tables' owner with CREATE on the database); set create checks it, pgshovel2 never alters or "
                "drops it:",
                f"CREATE PUBLICATION {ident(config.publication)} FOR TABLE {', '.join(tables)} "
                "WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true);"]
    return [f"GRANT CREATE ON DATABASE {db} TO {role};  -- the set's own publication",
            *_ownership("CREATE PUBLICATION ... FOR TABLE needs ownership of the tables; or have their owner make "
                        "the publication and name it in the config (publication: {existing: NAME})",
                        tables, role, transfer)]


def _ownership(why: str, tables: list[str], role: str, transfer: bool) -> list[str]:
    if transfer:
        return [f"-- {why} (--transfer-ownership):", *(f"ALTER TABLE {t} OWNER TO {role};" for t in tables)]
    return [f"-- {why}: make {role} a member of each table's owner role (GRANT <owner> TO {role}), or run",
            "-- set create --print-grants --transfer-ownership for ALTER TABLE ... OWNER TO lines"]


def _relay(config: SetConfig, role: str, db: str) -> list[str]:
    lines = [f"-- the relay role {role} (database.relay_dsn): reads and acknowledges; also what consumers' "
             "bootstraps and set verify read the tables with",
             f"GRANT CONNECT ON DATABASE {db} TO {role};",
             *(f"GRANT USAGE ON SCHEMA {s} TO {role};" for s in _schemas(config)),
             *(f"GRANT SELECT ON TABLE {t} TO {role};" for t in _tables(config))]
    if config.backend == "logical":
        lines.append(f"ALTER ROLE {role} REPLICATION;  -- the set's replication slot and its stream{_RDS.format(role)}")
        if config.decoder != "pgoutput":
            lines.append(f"GRANT USAGE ON SCHEMA pgshovel2_decoder TO {role};  -- encode_row, heartbeat")
        return lines
    schema = "pgshovel2" if capture_kind(config) == "c" else "pgshovel2_pl"
    pgq = [f"GRANT SELECT ON TABLE pgq.event_template TO {role};  -- PgQ copies it to the queue's event tables",
           f"GRANT EXECUTE ON FUNCTION {', '.join(RELAY_PGQ_FUNCTIONS)} TO {role};"]
    if config.pgq == "pl":  # schema pgq does not exist before set create installs it
        pgq = ["-- after set create installed PgQ's PL-only build, as its owner (the admin role):",
               *(f"-- {line}" for line in pgq)]
    return lines + [
        f"GRANT USAGE ON SCHEMA {schema} TO {role};  -- encode_row (snapshots)", *pgq,
        f"-- a partitioned table: the relay creates the capture triggers of partitions attached later, so {role} "
        "needs TRIGGER on them (ALTER DEFAULT PRIVILEGES FOR ROLE <their owner> IN SCHEMA <theirs> GRANT TRIGGER "
        f"ON TABLES TO {role})",
        f"-- a queue made before these grants: GRANT SELECT ON ALL TABLES IN SCHEMA pgq TO {role};",
        f"-- PgQ's maintenance (event table rotation): pgqd, or GRANT pgq_admin TO {role} for the relay's own"]
