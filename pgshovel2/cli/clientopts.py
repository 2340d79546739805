"""The Kafka and schema registry options of the commands that use them (docs/security.rst).

:func:`kafka_options` adds ``--bootstrap-servers`` and ``--kafka-config`` and hands the command
``kafka``, a pgshovel2.kafkaconf.KafkaSettings (the file's and the PGSHOVEL_KAFKA_* variables'
properties, checked by librdkafka). :func:`registry_options` adds ``--schema-registry`` and its
basic-auth and TLS options and hands it ``registry``, a pgshovel2.registryconf.RegistrySettings
or None. Bad settings are usage errors naming the option or property and where it came from.
"""

import functools
import logging
from collections.abc import Callable

import click
from click.core import ParameterSource

from pgshovel2 import secretref
from pgshovel2.cli.common import env_option
from pgshovel2.errors import PgshovelError
from pgshovel2.kafkaconf import DEFAULT_BOOTSTRAP, KafkaSettings
from pgshovel2.registryconf import VARIABLES, RegistrySettings, redact_url

log = logging.getLogger("pgshovel2.cli")


def kafka_options(func: Callable) -> Callable:
    """--bootstrap-servers and --kafka-config (and PGSHOVEL_KAFKA_*): func gets kafka (KafkaSettings)."""
    @functools.wraps(func)
    def wrapper(*args, bootstrap_servers: str | None, kafka_config: str | None, **kwargs):
        try:
            kafka = KafkaSettings.load(bootstrap_servers, kafka_config)
            kafka.check()
        except PgshovelError as exc:
            raise click.UsageError(str(exc)) from None
        return func(*args, kafka=kafka, **kwargs)

    wrapper = env_option("--kafka-config", default=None, type=click.Path(dir_okay=False),
                         help="Kafka client properties file (Java syntax, like Kafka's client.properties): any "
                              "librdkafka property, e.g. security.protocol, sasl.*, ssl.*; producer., consumer., "
                              "admin. prefixes for one kind of client; values may be env:NAME or file:PATH. "
                              "PGSHOVEL_KAFKA_<PROPERTY> variables (dots as underscores) win over it.")(wrapper)
    return env_option("--bootstrap-servers", default=None,
                      help=f"Kafka bootstrap servers [default: bootstrap.servers of --kafka-config, else "
                           f"{DEFAULT_BOOTSTRAP}]")(wrapper)


def registry_options(purpose: str) -> Callable[[Callable], Callable]:
    """--schema-registry (help: "Schema registry URL (purpose)."), its basic auth and TLS options:
    func gets registry (RegistrySettings, None without a URL)."""
    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, schema_registry: str | None, schema_registry_user_info: str | None,
                    schema_registry_ca: str | None, schema_registry_cert: str | None,
                    schema_registry_key: str | None, **kwargs):
            registry = _registry(schema_registry, schema_registry_user_info, schema_registry_ca,
                                 schema_registry_cert, schema_registry_key)
            return func(*args, registry=registry, **kwargs)

        for option in reversed(_registry_options(purpose)):
            wrapper = option(wrapper)
        return wrapper
    return decorate


def _registry_options(purpose: str) -> list[Callable]:
    return [
        env_option("--schema-registry", default=None,
                   help=f"Confluent-compatible schema registry URL ({purpose}); user info in it is taken out "
                        "and never shown."),
        env_option("--schema-registry-user-info", default=None, metavar="REF",
                   help="Basic auth USER:PASSWORD for the schema registry, as env:NAME or file:PATH (the value "
                        f"itself only in {VARIABLES['user_info']}, never on the command line)."),
        env_option("--schema-registry-ca", default=None, type=click.Path(dir_okay=False),
                   help="CA bundle (PEM) to verify the schema registry's certificate [default: the system's]."),
        env_option("--schema-registry-cert", default=None, type=click.Path(dir_okay=False),
                   help="Client certificate (PEM) for the schema registry (mutual TLS); needs --schema-registry-key."),
        env_option("--schema-registry-key", default=None, type=click.Path(dir_okay=False),
                   help="The client certificate's unencrypted key (PEM)."),
    ]


def _registry(url: str | None, user_info: str | None, ca: str | None, cert: str | None,
              key: str | None) -> RegistrySettings | None:
    """The registry settings of the options (None without a URL); click.UsageError for bad ones."""
    ctx = click.get_current_context()
    from_line = ctx.get_parameter_source("schema_registry_user_info") == ParameterSource.COMMANDLINE
    if user_info and from_line and not secretref.is_reference(user_info):
        raise click.BadParameter("on the command line it must be a reference, env:NAME or file:PATH (a value there "
                                 f"shows in ps); put the value itself in {VARIABLES['user_info']}",
                                 param_hint="--schema-registry-user-info")
    if not url:
        if user_info or ca or cert or key:
            raise click.UsageError("the schema registry options need --schema-registry URL")
        return None
    origin = "--schema-registry-user-info" if from_line else f"variable {VARIABLES['user_info']}"
    try:
        settings = RegistrySettings.load(url, user_info, ca, cert, key, origin=origin)
    except PgshovelError as exc:
        raise click.UsageError(str(exc)) from None
    if settings.user_info_origin == "the schema registry URL" and \
            ctx.get_parameter_source("schema_registry") == ParameterSource.COMMANDLINE:
        log.warning("the schema registry URL %s on the command line carries credentials, which show in ps: use "
                    "PGSHOVEL_SCHEMA_REGISTRY or --schema-registry-user-info env:NAME / file:PATH",
                    redact_url(url))
    return settings
