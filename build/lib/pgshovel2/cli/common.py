"""Shared CLI plumbing: global options, logging, and error reporting."""

import functools
import logging
import sys
from collections.abc import Callable

import click

from pgshovel2.errors import PgshovelError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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


def log_level_option(func: Callable) -> Callable:
    """--log-level."""
    return env_option("--log-level", default="INFO",
                      type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                      help="Logging level.")(func)


def setup_logging(level: str) -> None:
    """Log to stderr at level."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    for noisy in ("kazoo", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def reports_errors(func: Callable) -> Callable:
    """Print PgshovelError as 'error: ...' and exit 1 instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except PgshovelError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    return wrapper
