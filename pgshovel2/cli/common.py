"""Shared CLI plumbing: global options, logging, and error reporting."""

import functools
import importlib
import logging
import sys
from collections.abc import Callable

import click

from pgshovel2 import redact
from pgshovel2.cli import logconfig
from pgshovel2.cluster import ClusterStore
from pgshovel2.errors import PgshovelError
from pgshovel2.zkauth import ZooKeeperAuth

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
    """--zookeeper-hosts, --cluster and the ZooKeeper security options (:func:`zookeeper_security`
    reads them)."""
    func = zookeeper_security_options(func)
    func = env_option("--cluster", default="default", help="Cluster name (a namespace in ZooKeeper).")(func)
    return env_option("--zookeeper-hosts", default="127.0.0.1:2181",
                      help="ZooKeeper connect string (host:port,...[/chroot]).")(func)


_ZK_SECURITY = (  # (option, settings key, help); all PGSHOVEL_ZOOKEEPER_* too, none shown in ps when set so
    ("--zookeeper-auth", "auth", "ZooKeeper authentication: none, sasl:USER:REF (SASL DIGEST-MD5) or "
     "digest:USER:REF, REF being the password as env:VAR or file:PATH. Znodes created get this principal "
     "alone in their ACL."),
    ("--zookeeper-ca", "ca", "CA certificates (PEM) of the ZooKeeper server's TLS certificate (turns TLS on)."),
    ("--zookeeper-cert", "cert", "Client certificate (PEM) for ZooKeeper's TLS port (turns TLS on)."),
    ("--zookeeper-key", "key", "Private key (PEM) of --zookeeper-cert."),
    ("--zookeeper-key-password", "key_password", "Password of --zookeeper-key, as env:VAR or file:PATH."),
    ("--zookeeper-acl", "acl", "More ACL entries for the znodes created, ';'-separated scheme:id:perms "
     "(perms: letters of cdrwa), e.g. sasl:relay:cdrwa."),
    ("--zookeeper-config", "config", "YAML file of ZooKeeper settings (auth, tls, ca, cert, key, key_password, acl: "
     "docs/security.rst); options and variables given override it."),
)


def zookeeper_security_options(func: Callable) -> Callable:
    """The ZooKeeper security options (_ZK_SECURITY and --zookeeper-tls), remembered in ctx.meta."""
    for option, _key, text in reversed(_ZK_SECURITY):
        func = env_option(option, default=None, expose_value=False, callback=_remember, help=text)(func)
    return env_option("--zookeeper-tls", is_flag=True, default=None, expose_value=False, callback=_remember,
                      help="Connect to ZooKeeper with TLS (its secure client port).")(func)


def zookeeper_security(ctx: click.Context | None = None) -> ZooKeeperAuth:
    """The ZooKeeperAuth of the running command's options, variables and --zookeeper-config.

    Raises click.UsageError for bad settings (a password that is not a reference, a bad ACL entry)."""
    meta = (ctx or click.get_current_context()).meta
    given = {key: meta.get(f"pgshovel2.{option[2:].replace('-', '_')}") for option, key, _ in _ZK_SECURITY}
    given["tls"] = meta.get("pgshovel2.zookeeper_tls") or None
    try:
        return ZooKeeperAuth.load(given.pop("config"), given, "--zookeeper-* options")
    except PgshovelError as exc:
        raise click.UsageError(str(exc)) from None


def cluster_store(ctx: click.Context, timeout: float = 10.0) -> ClusterStore:
    """The ClusterStore of the command's --zookeeper-hosts, --cluster and ZooKeeper security
    (ctx.obj of ``pgshovel``: hosts, cluster, zk_auth)."""
    return ClusterStore(ctx.obj["hosts"], ctx.obj["cluster"], timeout, ctx.obj["zk_auth"])


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
    logconfig.redact_handlers()
    if meta.get("pgshovel2.sentry_dsn"):
        logconfig.start_sentry(meta["pgshovel2.sentry_dsn"])


def reports_errors(func: Callable) -> Callable:
    """Print PgshovelError as 'error: ...' and exit 1 instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except PgshovelError as exc:
            click.echo(f"error: {redact.text(str(exc))}", err=True)
            logconfig.report(exc)
            sys.exit(1)
    return wrapper
