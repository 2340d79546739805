"""Kafka client settings: the one place every Kafka client of pgshovel2 gets its librdkafka
properties from (the relay's producer, native or confluent_kafka; every consumer and admin
client; Spark's Kafka source through pgshovel2.kafkajava). docs/security.rst documents them.

Where properties come from, each later source winning over the earlier ones:

1. a client-properties file in Java syntax, like Kafka's own client.properties
   (``--kafka-config FILE`` / ``PGSHOVEL_KAFKA_CONFIG``);
2. variables ``PGSHOVEL_KAFKA_<PROPERTY>``: the property upper-cased, dots as underscores
   (``PGSHOVEL_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` is ``security.protocol``).

A property prefixed ``producer.``, ``consumer.`` or ``admin.`` applies to that kind of client
only and wins over the unprefixed one (Kafka Connect's convention); ``spark.`` properties are
Java client properties for Spark's Kafka source. Any value may be a secret reference
(``env:NAME``, ``file:PATH``: pgshovel2.secretref), resolved when the settings are loaded, in
the process that uses them. Values are never printed: errors name a property and where it came
from (:meth:`KafkaSettings.origin`). ``bootstrap.servers`` is ``--bootstrap-servers`` when
given, else the property, else 127.0.0.1:9092. ``group.id`` is the prefix of the consumer groups
pgshovel2's consumers use (they never commit offsets; default ``pgshovel2``):
``<prefix>-<purpose>-<random>``, so one prefixed ACL covers them.

Functions that make clients take ``Kafka``: a KafkaSettings, or a bootstrap string that
:func:`settings` turns into one with this process's environment (its PGSHOVEL_KAFKA_CONFIG
file and PGSHOVEL_KAFKA_* variables).
"""

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from pgshovel2 import javaprops, kafkaaccess, kafkalog, secretref
from pgshovel2.errors import PgshovelError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
FILE_VARIABLE = "PGSHOVEL_KAFKA_CONFIG"
VARIABLE_PREFIX = "PGSHOVEL_KAFKA_"
ROLES = ("producer", "consumer", "admin", "spark")
DEFAULT_GROUP_PREFIX = "pgshovel2"

# Properties pgshovel2 sets itself where it needs them: a user's value would break a guarantee.
FIXED = {
    "transactional.id": "the relay's transactional id (pgshovel2.<cluster>.<set>) is what fences a former relay",
    "enable.idempotence": "exactly-once delivery needs the idempotent producer",
    "acks": "the idempotent producer needs acks=all",
    "partitioner": "set topics are partitioned with murmur2_random, Kafka's Java default (WIRE.md)",
    "isolation.level": "pgshovel2's consumers read committed Kafka transactions only",
    "enable.auto.commit": "pgshovel2's consumers never commit offsets",
    "enable.auto.offset.store": "pgshovel2's consumers never commit offsets",
    "enable.partition.eof": "pgshovel2's readers rely on end-of-partition events",
    "delivery.report.only.error": "the relay's producer is driven by its failure reports",
}
# Quiet clients made only to check settings (no bootstrap: they never connect).
CHECK_LOG_LEVEL = 3


class KafkaSettingsError(PgshovelError):
    """Kafka client settings are invalid or incomplete: names the property and where it came from."""


@dataclass(frozen=True)
class Setting:
    """A property's value (references resolved) and where it came from (``file F, line N`` or
    ``variable PGSHOVEL_KAFKA_X``; ``, from env:NAME`` when it was a reference)."""

    value: str = field(repr=False)
    origin: str


@dataclass(frozen=True)
class KafkaSettings:
    """Kafka client settings: bootstrap (``host:port[,host:port]``), common (property -> Setting,
    for every client) and roles (role -> property -> Setting: producer, consumer, admin: librdkafka
    properties; spark: Java client properties). str() is the bootstrap servers (no secrets)."""

    bootstrap: str
    common: Mapping[str, Setting] = field(default_factory=dict)
    roles: Mapping[str, Mapping[str, Setting]] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.bootstrap

    @classmethod
    def load(cls, bootstrap: str | None = None, path: str | None = None,
             environ: Mapping[str, str] | None = None) -> "KafkaSettings":
        """Settings from the properties file path (None: the one PGSHOVEL_KAFKA_CONFIG names, if
        any) and the PGSHOVEL_KAFKA_* variables of environ (default os.environ); bootstrap: the
        servers given on the command line (None: the property's, else DEFAULT_BOOTSTRAP).

        Raises KafkaSettingsError for a property pgshovel2 sets itself (FIXED), a role-prefixed
        bootstrap.servers or group.id, an empty name; PropertiesError for an unreadable or
        malformed file; SecretReferenceError for an unresolvable reference.
        """
        environ = os.environ if environ is None else environ
        path = path or environ.get(FILE_VARIABLE) or None
        found: dict[str, tuple[str, str]] = {}  # name -> (raw value, origin)
        if path:
            for entry in javaprops.read(path):
                found[entry.key] = (entry.value, f"file {path}, line {entry.line}")
        for name, value in sorted(environ.items()):
            if name.startswith(VARIABLE_PREFIX) and name != FILE_VARIABLE:
                found[name[len(VARIABLE_PREFIX):].lower().replace("_", ".")] = (value, f"variable {name}")
        common: dict[str, Setting] = {}
        roles: dict[str, dict[str, Setting]] = {r: {} for r in ROLES}
        for name, (value, origin) in found.items():
            role, prop = _split_role(name)
            _check_name(role, prop, origin)
            resolved = secretref.resolve(value, f"Kafka property {name} ({origin})", environ)
            setting = Setting(resolved, origin + (f", from {value}" if secretref.is_reference(value) else ""))
            (roles[role] if role else common)[prop] = setting
        servers = common.pop("bootstrap.servers", None)
        return cls(bootstrap or (servers.value if servers else DEFAULT_BOOTSTRAP), common,
                   {r: p for r, p in roles.items() if p})

    def properties(self, role: str) -> dict[str, Setting]:
        """The user's properties for a client of role (producer, consumer, admin): the common
        ones with the role's own over them (group.id left out: see :meth:`group_id`)."""
        merged = {**self.common, **self.roles.get(role, {})}
        merged.pop("group.id", None)
        return merged

    def origin(self, name: str, role: str | None = None) -> str | None:
        """Where property name (as role's client sees it) came from; None when it is not set."""
        setting = self.roles.get(role or "", {}).get(name) or self.common.get(name)
        return setting.origin if setting else None

    def group_prefix(self) -> str:
        """The prefix of pgshovel2's consumer groups: the consumer's group.id property, else
        DEFAULT_GROUP_PREFIX."""
        prefix = self.roles.get("consumer", {}).get("group.id") or self.common.get("group.id")
        return prefix.value if prefix else DEFAULT_GROUP_PREFIX

    def group_id(self, purpose: str) -> str:
        """A new consumer group id for purpose (e.g. "reader"): ``<prefix>-<purpose>-<uuid>``."""
        return f"{self.group_prefix()}-{purpose}-{uuid.uuid4()}"

    def config(self, role: str, defaults: Mapping[str, Any] | None = None,
               ours: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """librdkafka settings of a client of role: bootstrap.servers, then defaults
        (pgshovel2's tunable choices), the user's properties over them, and ours (what pgshovel2
        must set) over everything."""
        user = {k: s.value for k, s in self.properties(role).items()}
        return {"bootstrap.servers": self.bootstrap, **(defaults or {}), **user, **(ours or {})}

    def check(self) -> None:
        """Make (and drop) a client of each role with these settings and no bootstrap servers
        (so none connects): librdkafka checks every property. Raises KafkaSettingsError naming
        the property and where it came from."""
        quiet = {"log_level": CHECK_LOG_LEVEL}
        for role, make in (("producer", _producer_class()), ("consumer", Consumer), ("admin", AdminClient)):
            settings = self.config(role, ours={**quiet, **({"group.id": "check"} if role == "consumer" else {})})
            settings.pop("bootstrap.servers")
            create(self, role, lambda s=settings, m=make: m(s))

    def describe(self) -> str:
        """The properties set and where each came from, for logs (never a value)."""
        lines = [f"{name} ({s.origin})" for name, s in sorted(self.common.items())]
        lines += [f"{role}.{name} ({s.origin})" for role, props in sorted(self.roles.items())
                  for name, s in sorted(props.items())]
        return ", ".join(lines) or "no properties besides bootstrap.servers"


Kafka = KafkaSettings | str
T = TypeVar("T")


def settings(kafka: Kafka) -> KafkaSettings:
    """kafka itself, or for a bootstrap string the settings of this process's environment
    (:meth:`KafkaSettings.load` with PGSHOVEL_KAFKA_CONFIG and the PGSHOVEL_KAFKA_* variables)."""
    return kafka if isinstance(kafka, KafkaSettings) else KafkaSettings.load(kafka)


def create(kafka: Kafka, role: str, make: Callable[[], T]) -> T:
    """make(): a client of role; its settings errors (KafkaException, ValueError, TypeError)
    become KafkaSettingsError naming the properties the error mentions and where they came from."""
    try:
        return make()
    except (KafkaException, ValueError, TypeError) as exc:
        text = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        raise KafkaSettingsError(f"Kafka {role} client settings: {text}{_origins(settings(kafka), role, text)}") \
            from None


def admin(kafka: Kafka, **ours: Any) -> AdminClient:
    """An AdminClient with kafka's admin settings (ours over them: e.g. logger, by default
    pgshovel2.kafkalog.LIBRDKAFKA, which folds repeated lines); its failures are
    explained by pgshovel2.kafkaaccess.explain. Raises KafkaSettingsError."""
    kafka, failures = settings(kafka), kafkaaccess.Failures()
    ours = {"error_cb": failures, "logger": kafkalog.LIBRDKAFKA, **ours}
    client = create(kafka, "admin", lambda: _Admin(kafka.config("admin", ours=ours)))
    return _carry(client, kafka, "admin", failures)


def consumer(kafka: Kafka, purpose: str, **ours: Any) -> Consumer:
    """A Consumer with kafka's consumer settings, in a new group (:meth:`KafkaSettings.group_id`
    of purpose), ours over them; its failures are explained by pgshovel2.kafkaaccess.explain.
    Raises KafkaSettingsError."""
    kafka, failures = settings(kafka), kafkaaccess.Failures()
    config = kafka.config("consumer", ours={"group.id": kafka.group_id(purpose), "error_cb": failures,
                                            "logger": kafkalog.LIBRDKAFKA, **ours})
    return _carry(create(kafka, "consumer", lambda: _Consumer(config)), kafka, "consumer", failures)


def _carry(client: T, kafka: KafkaSettings, role: str, failures: kafkaaccess.Failures) -> T:
    """client, carrying what kafkaaccess.explain reads."""
    client.pgshovel_settings, client.pgshovel_role, client.pgshovel_failures = kafka, role, failures
    return client


class _Admin(AdminClient):
    """An AdminClient that carries its settings and failure log (kafkaaccess.explain)."""


class _Consumer(Consumer):
    """A Consumer that carries its settings and failure log (kafkaaccess.explain)."""


def _producer_class() -> Callable[[dict], Any]:
    from confluent_kafka import Producer
    return Producer


def _split_role(name: str) -> tuple[str | None, str]:
    head, _, rest = name.partition(".")
    return (head, rest) if head in ROLES and rest else (None, name)


def _check_name(role: str | None, prop: str, origin: str) -> None:
    """Raises KafkaSettingsError for a property name no client may take from the user."""
    shown = f"{role}.{prop}" if role else prop
    if not prop or prop.startswith(".") or prop.endswith(".") or ".." in prop:
        raise KafkaSettingsError(f"Kafka property {shown!r} ({origin}): not a property name")
    if role == "spark":
        return
    if prop in FIXED:
        raise KafkaSettingsError(f"Kafka property {shown} ({origin}) is set by pgshovel2 itself: {FIXED[prop]}")
    if role and prop == "bootstrap.servers":
        raise KafkaSettingsError(f"Kafka property {shown} ({origin}): the bootstrap servers are the same for "
                                 "every client: give bootstrap.servers without a role prefix")
    if role in ("producer", "admin") and prop == "group.id":
        raise KafkaSettingsError(f"Kafka property {shown} ({origin}): only consumers have a group")


def _origins(kafka: KafkaSettings, role: str, text: str) -> str:
    """' (name from origin; ...)' for the user's properties text mentions by name (or by value,
    for a property that holds no secret), else where every property came from."""
    props = kafka.properties(role)
    named = [f"{name} from {s.origin}" for name, s in sorted(props.items()) if name in text] or \
        [f"{name} from {s.origin}" for name, s in sorted(props.items())
         if not is_secret(name) and len(s.value) > 2 and s.value in text]
    if named:
        return f" ({'; '.join(named)})"
    return f" (properties set: {kafka.describe()})"


def is_secret(name: str) -> bool:
    """Whether property name may hold a secret (a password, key material, a token, a JAAS config)."""
    if name.endswith(".location"):
        return False
    return any(word in name for word in ("password", "secret", "token", "key", "jaas", "oauthbearer.config"))
