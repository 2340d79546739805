"""Shared CLI plumbing: global options, logging, and error reporting."""

import functools
import importlib
import logging
import sys
from collections.abc import Callable

import click

from pgshovel2.cli import logconfig
from pgshovel2.errors import PgshovelError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LazyGroup(click.Group):
    """A click group whose ``lazy`` subcommands ({name: "module:attribute"}) are imported only when
    one of them runs or help lists them: a set command then does not pay for the Kafka consumer,
    the schema registry client or Spark's plumbing (about half a second a call)."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attribute = self.lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)


def env_option(*decls: str, **kwargs) -> Callable:
    """A click option that can also be set as PGSHOVEL_<OPTION> (shown in --help)."""
    name = max(decls, key=len).lstrip("-").split("/")[0].replace("-", "_").upper()
    return click.option(*decls, envvar=f"PGSHOVEL_{name}", show_envvar=True,
                        show_default=True, **kwargs)


def zookeeper_options(func: Callable) -> Callable:
    """--zookeeper-hosts and --cluster."""
    func = env_option("--cluster", default="default", help="Cluster name (a namespace in ZooKeeper).")(func)
    return env_option("--zookeeper-hosts", default="127.0.0.1:2181",
                      help="ZooKeeper connect string.")(func)


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta[f"pgshovel2.{param.name}"] = value
    return value


def log_level_option(func: Callable) -> Callable:
    """--log-level, --logging-config FILE and --sentry-dsn (the last two read by setup_logging)."""
    func = env_option("--sentry-dsn", default=None, expose_value=False, callback=_remember,
                      help="Report errors to Sentry (needs: pip install pgshovel2[sentry]).")(func)
    func = env_option("--logging-config", default=None, type=click.Path(dir_okay=False), expose_value=False,
                      callback=_remember, help="Logging configuration file: YAML (logging.config.dictConfig "
                      "schema) or INI (logging.config.fileConfig); replaces --log-level.")(func)
    return env_option("--log-level", default="INFO",
                      type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                      help="Logging level.")(func)


def setup_logging(level: str) -> None:
    """Log to stderr at level, or as --logging-config says; start Sentry if --sentry-dsn is set.

    Raises click.ClickException for an unreadable or invalid logging config, or
    a Sentry DSN without the sentry extra installed.
    """
    meta = ctx.meta if (ctx := click.get_current_context(silent=True)) else {}
    config = meta.get("pgshovel2.logging_config")
    if config:
        logconfig.load(config)
    else:
        logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
        for noisy in ("kazoo", "httpx", "httpx2", "httpcore", "pyiceberg"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if meta.get("pgshovel2.sentry_dsn"):
        logconfig.start_sentry(meta["pgshovel2.sentry_dsn"])


def reports_errors(func: Callable) -> Callable:
    """Print PgshovelError as 'error: ...' and exit 1 instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except PgshovelError as exc:
            click.echo(f"error: {exc}", err=True)
            logconfig.report(exc)
            sys.exit(1)
    return wrapper
