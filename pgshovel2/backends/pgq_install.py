"""PgQ in a set's database: the ``pgq`` extension, or PgQ's own PL/pgSQL-only build.

Managed PostgreSQL (no superuser, no custom C) cannot ``CREATE EXTENSION pgq``. PgQ ships
``pgq_pl_only.sql`` for that case (Debian: postgresql-NN-pgq3,
``/usr/share/postgresql/NN/contrib/pgq_pl_only.sql``): the same tables and functions in
PL/pgSQL, run as plain SQL by the database owner. It is read on the host running
``pgshovel set create`` (path: ``PGSHOVEL_PGQ_PL_SQL`` or the Debian locations), never
shipped with pgshovel2.

What the file needs beyond owning the database: it creates the roles ``pgq_reader``,
``pgq_writer`` and ``pgq_admin`` and grants to them (CREATEROLE). A role without
CREATEROLE, where those roles do not exist, gets the file without the role statements and
grants to them (:func:`without_roles`): PgQ then works for its owner (and superusers)
only; other roles cannot be given PgQ access through those group roles (grant on the pgq
schema's objects directly instead). Nothing in the file is C.

The PL-only ``pgq.version()`` reads ``pg_extension`` and so answers NULL; after installing
we replace it by one returning the file's version (from the ``pgq.control`` of the same
PostgreSQL share directory, or ``PGSHOVEL_PGQ_PL_VERSION``), so ``pgq.version()`` tells
the version of either kind. The schema's comment records the kind, version and file.
"""

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from pgshovel2.errors import CaptureError

MODES = ("auto", "extension", "pl")
ENV_PATH, ENV_VERSION = "PGSHOVEL_PGQ_PL_SQL", "PGSHOVEL_PGQ_PL_VERSION"
_SHARE = Path("/usr/share/postgresql")
_ROLES = ("pgq_reader", "pgq_writer", "pgq_admin")


@dataclass(frozen=True)
class PlSource:
    """A PL-only PgQ build on this host: install (``pgq_pl_only.sql``), upgrade
    (``pgq_pl_only.upgrade.sql``, may be missing) and version (``"3.5"``)."""

    install: Path
    upgrade: Path | None
    version: str


def locate(path: str | None = None) -> PlSource:
    """The PL-only PgQ build: path, else $PGSHOVEL_PGQ_PL_SQL, else the newest
    /usr/share/postgresql/*/contrib/pgq_pl_only.sql.

    Raises CaptureError naming the places looked at when there is none, or when its version
    cannot be told (no pgq.control in <share>/extension and no $PGSHOVEL_PGQ_PL_VERSION).
    """
    given = path or os.environ.get(ENV_PATH)
    if given:
        candidates = [Path(given)]
    else:
        candidates = sorted(_SHARE.glob("*/contrib/pgq_pl_only.sql"),
                            key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0, reverse=True)
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        looked = given or f"{_SHARE}/*/contrib/pgq_pl_only.sql"
        raise CaptureError(f"PgQ cannot be created as an extension here and its PL-only build was not found "
                           f"at {looked} on this host: install PgQ's pgq_pl_only.sql (Debian: "
                           f"postgresql-15-pgq3) or name it with ${ENV_PATH}")
    upgrade = found.with_name("pgq_pl_only.upgrade.sql")
    return PlSource(found, upgrade if upgrade.is_file() else None, _file_version(found))


def _file_version(file: Path) -> str:
    if os.environ.get(ENV_VERSION):
        return os.environ[ENV_VERSION]
    control = file.parent.parent / "extension" / "pgq.control"
    try:
        text = control.read_text(encoding="utf-8")
    except OSError:
        text = ""
    match = re.search(r"^default_version\s*=\s*'([^']+)'", text, re.M)
    if not match:
        raise CaptureError(f"cannot tell the PgQ version of {file}: no default_version in {control}; "
                           f"set ${ENV_VERSION}")
    return match.group(1)


def installed(cur) -> tuple[str, str] | None:
    """(kind ``extension``|``pl``, version) of the PgQ in cur's database, None when there is none.

    A ``pgq`` schema with ``pgq.insert_event`` but no extension is a PL-only PgQ (ours or a
    DBA's); its version is what ``pgq.version()`` answers (``unknown`` for NULL).
    """
    cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgq'")
    row = cur.fetchone()
    if row is not None:
        return "extension", row[0]
    cur.execute("SELECT to_regproc('pgq.version') IS NOT NULL, "
                "to_regprocedure('pgq.insert_event(text,text,text)') IS NOT NULL")
    has_version, has_insert = cur.fetchone()
    if not has_insert:
        return None
    version = None
    if has_version:
        cur.execute("SELECT pgq.version()")
        version = cur.fetchone()[0]
    return "pl", version or "unknown"


def extension_possible(cur, mode: str) -> bool:
    """Whether :func:`ensure` with mode will leave the ``pgq`` extension in cur's database
    (not the PL-only build): it is installed, or mode allows it and the server has it and the
    current role may create it (superuser, or the extension trusted). Reads only."""
    have = installed(cur)
    if have is not None:
        return have[0] == "extension"
    if mode == "pl":
        return False
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extension_versions WHERE name = 'pgq' "
                "AND (trusted OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)))")
    return bool(cur.fetchone()[0])


def ensure(cur, mode: str = "auto", path: str | None = None) -> str:
    """Make PgQ available in cur's database in the caller's transaction; returns its kind
    (``extension`` or ``pl``), to record in the set.

    An existing PgQ is reused. mode ``auto`` creates the extension when the server has it and
    the role may, else installs the PL-only build; ``extension``/``pl`` force one kind.
    Raises CaptureError when the forced kind conflicts with the installed one, or when
    neither can be installed (the reason names the extension or the file).
    """
    if mode not in MODES:
        raise CaptureError(f"unknown PgQ mode {mode!r}: one of {', '.join(MODES)}")
    have = installed(cur)
    if have is not None:
        if mode != "auto" and have[0] != mode:
            raise CaptureError(f"the set asks for PgQ as {mode!r} but the database already has PgQ "
                               f"{have[1]} as {have[0]!r}: one database has one PgQ; use pgq: {have[0]} or auto")
        return have[0]
    if mode in ("auto", "extension"):
        reason = _try_extension(cur)
        if reason is None:
            return "extension"
        if mode == "extension":
            raise CaptureError(f"CREATE EXTENSION pgq failed: {reason} (pgq: pl installs PgQ's PL-only build)")
    install_pl(cur, locate(path))
    return "pl"


def _try_extension(cur) -> str | None:
    """CREATE EXTENSION pgq under a savepoint; None when done, else why not (rolled back)."""
    cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pgq'")
    if cur.fetchone() is None:
        return "the server has no pgq extension"
    cur.execute("SAVEPOINT pgshovel2_pgq")
    try:
        cur.execute("CREATE EXTENSION pgq")
    except (psycopg2.errors.InsufficientPrivilege, psycopg2.errors.FeatureNotSupported,
            psycopg2.errors.UndefinedFile, psycopg2.errors.UndefinedObject) as exc:
        cur.execute("ROLLBACK TO SAVEPOINT pgshovel2_pgq")
        return str(exc).strip().splitlines()[0]
    cur.execute("RELEASE SAVEPOINT pgshovel2_pgq")
    return None


def can_create_roles(cur) -> bool:
    """Whether the roles the PL-only file creates exist or the current role may create them."""
    cur.execute("SELECT count(*) FROM pg_roles WHERE rolname = ANY(%s)", (list(_ROLES),))
    if cur.fetchone()[0] == len(_ROLES):
        return True
    cur.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
    return bool(cur.fetchone()[0])


def install_pl(cur, source: PlSource, upgrade: bool = False) -> None:
    """Run the PL-only build (its upgrade file when upgrade) in cur's transaction, then set
    ``pgq.version()`` and the schema comment. Raises CaptureError naming the file when the
    database refuses (the caller's transaction is then aborted)."""
    file = source.upgrade if upgrade and source.upgrade else source.install
    text = file.read_text(encoding="utf-8")
    if not can_create_roles(cur):
        text = without_roles(text, str(file))
    try:
        cur.execute(text)
        cur.execute("RESET client_min_messages")
        cur.execute(sql.SQL("CREATE OR REPLACE FUNCTION pgq.version() RETURNS text LANGUAGE sql "
                            "IMMUTABLE SET search_path = pg_catalog, pg_temp AS {}").format(
                                sql.Literal(f"SELECT {_quote(source.version)}::text")))
        note = {"kind": "pl", "version": source.version, "file": str(file), "by": "pgshovel2"}
        cur.execute(sql.SQL("COMMENT ON SCHEMA pgq IS {}").format(sql.Literal(json.dumps(note))))
    except psycopg2.Error as exc:
        raise CaptureError(f"installing PgQ from {file} failed: {str(exc).strip()}") from exc


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_ROLE_BLOCK = re.compile(r"\n\s*-- create roles\n.*?(?=\n\s*perform 1 from pg_attribute)", re.S)
_ROLE_GRANT = re.compile(r"^\s*execute 'grant usage on ' .*' to pgq_admin';\n", re.M)
_GRANT_STMT = re.compile(r"^(REVOKE|GRANT)\b[^;]*\b(pgq_reader|pgq_writer|pgq_admin)\b[^;]*;\n?", re.M | re.I)


def without_roles(text: str, where: str) -> str:
    """The PL-only SQL without creating pgq_reader/pgq_writer/pgq_admin and without grants to
    them. Raises CaptureError naming where when the text is not laid out as expected (a PgQ
    version this was not written for): nothing is run then."""
    text, blocks = _ROLE_BLOCK.subn("\n", text)
    text, grants = _ROLE_GRANT.subn("", text)
    text, statements = _GRANT_STMT.subn("", text)
    if blocks != 1 or grants != 1 or re.search(r"\b(create role|pgq_reader|pgq_writer|pgq_admin)\b", text, re.I):
        raise CaptureError(f"{where}: cannot leave out PgQ's role statements (this role may not create roles "
                           f"pgq_reader, pgq_writer, pgq_admin): create them as a superuser or CREATEROLE role "
                           f"first (CREATE ROLE pgq_reader; CREATE ROLE pgq_writer; "
                           f"CREATE ROLE pgq_admin IN ROLE pgq_reader, pgq_writer)")
    return text
