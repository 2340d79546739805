"""Database connections with errors that name what they were for."""

import psycopg2

from pgshovel2.errors import CaptureError, PgshovelError


def connect(dsn: str, what: str, error: type[PgshovelError] = CaptureError):
    """psycopg2 connection to dsn; raises error naming what (e.g. "set 'x'") on failure."""
    try:
        return psycopg2.connect(dsn)
    except psycopg2.OperationalError as exc:
        raise error(f"cannot connect to the database of {what}: {str(exc).strip()}") from exc
