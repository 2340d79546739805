"""Database connections with errors that name what they were for."""

import psycopg2
from psycopg2.extensions import parse_dsn

from pgshovel2.errors import CaptureError, PgshovelError


def connect(dsn: str, what: str, error: type[PgshovelError] = CaptureError):
    """psycopg2 connection to dsn; raises error naming what (e.g. "set 'x'") on failure."""
    try:
        return psycopg2.connect(dsn)
    except psycopg2.OperationalError as exc:
        raise error(f"cannot connect to the database of {what}: {str(exc).strip()}") from exc


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


def redacted(dsn: str) -> str:
    """The DSN without its password (for manifests, status lines and messages)."""
    try:
        params = parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return ""
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "password")


def one_row(dsn: str, query: str, params: tuple, fields: tuple[str, ...]) -> dict | None:
    """The first row of query on dsn as {field: value}, None when there is none, or {"error": why}
    when the database does not answer or refuses (for status lines: never raises)."""
    try:
        conn = psycopg2.connect(dsn, connect_timeout=5, application_name="pgshovel2 status")
    except psycopg2.Error as exc:
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
