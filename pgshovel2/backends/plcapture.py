"""The PL/pgSQL capture of the ``trigger`` backend (schema ``pgshovel2_pl``, sql/capture_pl).

The same events as the C extension's ``pgshovel2.capture`` (sql/capture), from functions a
non-superuser table owner can install: :func:`choose` picks the capture of a new set,
:func:`ensure` installs or updates the functions, :func:`register` records a table's layout.
Functions taking a cursor run inside the caller's transaction and never commit.
"""

from importlib import resources

import psycopg2
from psycopg2 import sql

from pgshovel2.errors import CaptureError

SCHEMA = "pgshovel2_pl"
VERSION = "6"  # pgshovel2_pl.version() of pgshovel2/backends/sql/pgshovel2_pl/*.sql
C_EXTENSION = "pgshovel2"


def choose(cur, wanted: str | None, extension_version: str, pgq_extension: bool) -> tuple[str, str]:
    """(kind, why) of a new trigger set's capture: wanted (``c``/``plpgsql``, from the set
    config) when given, else ``c`` when version extension_version of the pgshovel2 extension
    is installed in the database, or available on its server and creatable by the current role
    (superuser, or the extension trusted), and PgQ is or can be the pgq extension
    (pgq_extension: the C extension requires it); else ``plpgsql``."""
    if wanted is not None:
        return wanted, f"set config 'capture: {wanted}'"
    if not pgq_extension:
        return "plpgsql", (f"PgQ in this database is (or will be) its PL-only build, and the {C_EXTENSION} C "
                           f"extension requires the pgq extension: PL/pgSQL capture in schema {SCHEMA}")
    cur.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = %s) OR EXISTS ("
                "SELECT 1 FROM pg_available_extension_versions WHERE name = %s AND version = %s "
                "AND (trusted OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)))",
                (C_EXTENSION, C_EXTENSION, extension_version))
    if cur.fetchone()[0]:
        return "c", f"the {C_EXTENSION} extension (version {extension_version}) is available on the server"
    return "plpgsql", (f"the {C_EXTENSION} C extension (version {extension_version}) is not available "
                       f"on the server or not creatable by this role: PL/pgSQL capture in schema {SCHEMA}")


def installed_version(cur) -> str | None:
    """pgshovel2_pl.version() in the cursor's database, None when not installed."""
    cur.execute("SELECT to_regproc('pgshovel2_pl.version') IS NOT NULL")
    if not cur.fetchone()[0]:
        return None
    cur.execute("SELECT pgshovel2_pl.version()")
    return cur.fetchone()[0]


def ensure(cur) -> None:
    """Install the PL/pgSQL capture functions (schema pgshovel2_pl) at VERSION unless there.

    Raises CaptureError naming the schema and the database's refusal (e.g. no CREATE
    privilege on the database); the caller's transaction is then aborted.
    """
    if installed_version(cur) == VERSION:
        return
    folder = resources.files("pgshovel2.backends").joinpath("sql/pgshovel2_pl")
    script = "\n".join(f.read_text("utf-8") for f in sorted(folder.iterdir(), key=lambda f: f.name)
                       if f.name.endswith(".sql"))
    try:
        cur.execute(script)
    except psycopg2.Error as exc:
        raise CaptureError(f"cannot install the PL/pgSQL capture (schema {SCHEMA}) in the set's database: "
                           f"{str(exc).strip()}") from exc


def register(cur, queue: str, tag: str, cols: str, keys: str, mode: str, rel: str | None = None) -> str:
    """Record the layout the set of queue captures the table tag (its quoted qualified name)
    in: the trigger's arguments (cols and keys as ``"1,2"``, mode ``all``/``subset`` with
    ``,before``); rel: the table's name now when a rename changed it (Table.sql_name), else
    the tag. Returns the name (in schema pgshovel2_pl) of the row trigger function
    generated for it, which takes the same arguments as ``pgshovel2_pl.capture``."""
    cur.execute("SELECT pgshovel2_pl.register(%s, %s::regclass, %s, %s::int2[], %s::int2[], %s)",
                (queue, rel or tag, tag, "{" + cols + "}", "{" + keys + "}", mode))
    return cur.fetchone()[0]


def forget(cur, queue: str, tag: str | None = None) -> None:
    """Delete the recorded layouts of queue (of the table only, when given: its name now,
    Table.sql_name) and their
    generated trigger functions (call it after dropping the triggers); nothing when
    pgshovel2_pl is not installed."""
    if installed_version(cur) is None:
        return
    cur.execute("DELETE FROM pgshovel2_pl.layout WHERE queue = %s AND (%s::text IS NULL OR rel = to_regclass(%s)) "
                "RETURNING pgshovel2_pl.trigger_function(queue, rel)", (queue, tag, tag))
    functions = cur.fetchall()
    cur.execute("SELECT to_regclass('pgshovel2_pl.layout_sig') IS NOT NULL")  # version 3 on
    if cur.fetchone()[0]:
        cur.execute("DELETE FROM pgshovel2_pl.layout_sig WHERE queue = %s "
                    "AND (%s::text IS NULL OR rel = to_regclass(%s))", (queue, tag, tag))
    for (function,) in functions:
        cur.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(SCHEMA, function)))
