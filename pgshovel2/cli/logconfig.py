"""Logging from a configuration file, and Sentry error reports (optional extra).

``--logging-config FILE``: ``.yaml``/``.yml``/``.json`` files are read as a
:func:`logging.config.dictConfig` mapping, anything else (``.ini``, ``.conf``)
with :func:`logging.config.fileConfig`, as the original pgshovel did.
``--sentry-dsn DSN`` (or PGSHOVEL_SENTRY_DSN): ``sentry_sdk.init``; its logging
integration sends ERROR log records, and :func:`report` sends the error a
command ends with.
"""

import configparser
import logging.config
from pathlib import Path

import click
import yaml

from pgshovel2 import __version__

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


def start_sentry(dsn: str) -> None:
    """Initialize Sentry. Raises click.ClickException when the sentry extra is missing or the DSN is bad."""
    global _sentry
    try:
        import sentry_sdk
    except ImportError as exc:
        raise click.ClickException("--sentry-dsn needs the sentry extra: pip install 'pgshovel2[sentry]'") from exc
    try:
        sentry_sdk.init(dsn=dsn, release=f"pgshovel2@{__version__}")
    except Exception as exc:  # sentry_sdk.utils.BadDsn and friends
        raise click.ClickException(f"--sentry-dsn {dsn!r}: {exc}") from exc
    _sentry = sentry_sdk


def report(exc: BaseException) -> None:
    """Send exc to Sentry (and wait up to 5 s for it to leave) when Sentry is on; else nothing."""
    if _sentry is not None:
        _sentry.capture_exception(exc)
        _sentry.flush(timeout=5)
