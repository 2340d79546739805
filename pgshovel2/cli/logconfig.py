"""Logging from a configuration file, and Sentry error reports (optional extra).

``--logging-config FILE``: ``.yaml``/``.yml``/``.json`` files are read as a
:func:`logging.config.dictConfig` mapping, anything else (``.ini``, ``.conf``)
with :func:`logging.config.fileConfig`, as the original pgshovel did.
``--sentry-dsn DSN`` (or PGSHOVEL_SENTRY_DSN): ``sentry_sdk.init``; its logging
integration sends ERROR log records, and :func:`report` sends the error a
command ends with.

Secrets: every handler gets :class:`RedactingFilter` (pgshovel2.redact.text over the message
and the traceback of each record), and Sentry runs without local variables or default PII, every
event and breadcrumb scrubbed by :func:`scrub_event` before it leaves.
"""

import configparser
import logging
import logging.config
from pathlib import Path
from typing import Any

import click
import yaml

from pgshovel2 import __version__, redact

_sentry = None


def load(path: str) -> None:
    """Configure logging from path. Raises click.ClickException naming the file when it is invalid."""
    try:
        if Path(path).suffix.lower() in (".yaml", ".yml", ".json"):
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a mapping (logging.config.dictConfig schema)")
            data.setdefault("version", 1)
            data.setdefault("disable_existing_loggers", False)  # ours exist since import
            logging.config.dictConfig(data)
        else:
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ImportError, yaml.YAMLError,
            configparser.Error) as exc:
        raise click.ClickException(f"logging config {path}: {exc}") from exc


class RedactingFilter(logging.Filter):
    """Masks secrets (pgshovel2.redact.text) in a record's message and traceback before any handler
    formats it; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact record in place; always True."""
        message = record.getMessage()
        clean = redact.text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact.text(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER = RedactingFilter()


def redact_handlers() -> None:
    """Add the RedactingFilter to every handler of every logger configured so far."""
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def scrub_event(event: dict[str, Any], _hint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sentry's before_send (and before_breadcrumb): the event with every secret masked
    (pgshovel2.redact.deep over all its strings and secret-looking keys)."""
    return redact.deep(event)


def start_sentry(dsn: str) -> None:
    """Initialize Sentry: no local variables (a DSN or a password may be one), default PII left off
    (the SDK's default), every event and breadcrumb scrubbed by scrub_event.
    Raises click.ClickException when the sentry extra is missing or the DSN is bad."""
    global _sentry
    try:
        import sentry_sdk
    except ImportError as exc:
        raise click.ClickException("--sentry-dsn needs the sentry extra: pip install 'pgshovel2[sentry]'") from exc
    try:
        sentry_sdk.init(dsn=dsn, release=f"pgshovel2@{__version__}", include_local_variables=False,
                        before_send=scrub_event, before_breadcrumb=scrub_event)
    except Exception as exc:  # sentry_sdk.utils.BadDsn and friends
        raise click.ClickException(f"--sentry-dsn {redact.url(dsn)!r}: {redact.text(str(exc))}") from None
    _sentry = sentry_sdk


def report(exc: BaseException) -> None:
    """Send exc to Sentry (and wait up to 5 s for it to leave) when Sentry is on; else nothing."""
    if _sentry is not None:
        _sentry.capture_exception(exc)
        _sentry.flush(timeout=5)
