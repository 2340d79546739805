"""Database connections with errors that name what they were for.

A DSN may hold secret references (``password=env:VAR``, ``password=file:PATH``, also for
``sslpassword``; pgshovel2.secretref): :func:`libpq_dsn` resolves them when a connection is
made, in the process that makes it; the DSN as given (what ZooKeeper stores) never holds the
secret. Without one, libpq's own ways apply: ``~/.pgpass`` (PGPASSFILE), PGPASSWORD, a
service file (PGSERVICEFILE).
"""

import re

import psycopg2
from psycopg2.extensions import make_dsn, parse_dsn

from pgshovel2 import redact, secretref
from pgshovel2.errors import CaptureError, PgshovelError


def libpq_dsn(dsn: str, what: str, error: type[PgshovelError] = CaptureError) -> str:
    """dsn with its secret references resolved, for libpq only (never store or print it).

    Raises error naming what when libpq cannot parse dsn (the message shows the DSN redacted and
    none of libpq's quoted pieces, which may be parts of a password), ConfigError when a
    reference does not resolve.
    """
    try:
        params = parse_dsn(dsn)
    except psycopg2.ProgrammingError as exc:
        reason = re.sub(r'"[^"]*"', '"..."', str(exc).strip().splitlines()[0])
        raise error(f"malformed DSN of {what} ({reason}): {redact.dsn(dsn)}") from None
    refs = {k: v for k, v in params.items() if k in redact.SECRET_DSN_KEYS and secretref.is_reference(v)}
    if not refs:
        return dsn
    for key, ref in refs.items():
        params[key] = secretref.required(ref, f"the DSN of {what}, {key}")
    return make_dsn(**params)


def open_connection(dsn: str, what: str, error: type[PgshovelError] = CaptureError, **kwargs):
    """psycopg2.connect(dsn with its references resolved, **kwargs); psycopg2's errors as they come
    (callers that name them differently), a malformed DSN or a bad reference as error."""
    return psycopg2.connect(libpq_dsn(dsn, what, error), **kwargs)


def connect(dsn: str, what: str, error: type[PgshovelError] = CaptureError, **kwargs):
    """psycopg2 connection to dsn (references resolved); raises error naming what (e.g. "set 'x'") on
    failure (libpq's connection errors never hold the password)."""
    try:
        return open_connection(dsn, what, error, **kwargs)
    except psycopg2.OperationalError as exc:
        raise error(f"cannot connect to the database of {what}: {str(exc).strip()}") from exc


def close_quietly(conn) -> None:
    """Close a psycopg2 connection (None: nothing), ignoring the errors of one already broken."""
    if conn is not None:
        try:
            conn.close()
        except psycopg2.Error:
            pass


# SQLSTATE classes of a server or connection going away: connection exception (08), operator
# intervention (57: admin shutdown, crash shutdown, cannot connect now), insufficient resources (53).
_OUTAGE_CLASSES = ("08", "57", "53")


def outage(exc: psycopg2.Error, conn=None) -> bool:
    """True when exc means the database or the connection went away (retrying is the answer):
    an OperationalError/InterfaceError, a bare DatabaseError without SQLSTATE (libpq lost the
    server: "error with status PGRES_COPY_BOTH and no message from the libpq"), an SQLSTATE
    of class 08/57/53, or conn (when given) closed."""
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return True
    if conn is not None and conn.closed:
        return True
    code = getattr(exc, "pgcode", None)
    if code is None:  # libpq's own errors come as the bare DatabaseError class
        return type(exc) is psycopg2.DatabaseError
    return code[:2] in _OUTAGE_CLASSES


def one_row(dsn: str, query: str, params: tuple, fields: tuple[str, ...]) -> dict | None:
    """The first row of query on dsn as {field: value}, None when there is none, or {"error": why}
    when the database does not answer or refuses (for status lines: never raises)."""
    try:
        conn = open_connection(dsn, "status", connect_timeout=5, application_name="pgshovel2 status")
    except (psycopg2.Error, PgshovelError) as exc:
        return {"error": f"database does not answer: {str(exc).strip()}"}
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            row = cur.fetchone()
    except psycopg2.Error as exc:
        return {"error": str(exc).strip()}
    finally:
        conn.close()
    return None if row is None else dict(zip(fields, row, strict=True))
