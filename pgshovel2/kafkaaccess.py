"""When Kafka refuses a client: its credentials (authentication, TLS) or an ACL (authorization).

librdkafka reports a failed authentication or TLS handshake as an error event and lets the
requests that needed the connection time out; an ACL denial comes back as the request's error.
Clients made by pgshovel2.kafkaconf keep the events (:class:`Failures`, their error_cb), and
:func:`explain` turns either kind into a :class:`KafkaAccessError` that says what is missing and
where the settings came from, instead of "timed out". A retry cannot fix these: the relay stops
on them (KafkaAccessError is a RelayError, not an UnavailableError). docs/security.rst lists the
ACLs each command needs.
"""

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pgshovel2.errors import RelayError

# librdkafka's events that explain why requests fail
CREDENTIAL_ERRORS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL)
AUTHORIZATION = {  # Kafka's error -> the resource type its ACL is on
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId",
}
# the properties an authentication or TLS failure is about, named with their origins
CREDENTIAL_PROPERTIES = ("security.protocol", "sasl.mechanisms", "sasl.mechanism", "sasl.username",
                         "sasl.password", "sasl.oauthbearer.config", "ssl.ca.location", "ssl.certificate.location",
                         "ssl.key.location", "ssl.keystore.location")
SEE = "docs/security.rst, 'Kafka ACLs'"


class KafkaAccessError(RelayError):
    """Kafka refused a client: wrong or missing credentials, a failed TLS handshake, or an ACL
    that does not allow the operation. Says what is missing; retrying does not help."""


class Failures:
    """A client's error_cb: keeps the last authentication or TLS failure librdkafka reported
    (the timeouts that follow are explained by it)."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if err.code() in CREDENTIAL_ERRORS:
            self.last = err


def error_of(exc: BaseException) -> KafkaError | None:
    """The KafkaError inside a KafkaException (or exc itself), None for other exceptions."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return exc if isinstance(exc, KafkaError) else None


def denied(err: KafkaError | None, what: str, needs: str) -> KafkaAccessError | None:
    """The access error of err when it is an ACL denial (what: the failed operation, e.g.
    "cannot read the relay position from 'x.positions'"; needs: the ACL it takes, e.g. "READ
    and DESCRIBE on topic 'x.positions'"), or a credentials failure; None for other errors."""
    if err is None:
        return None
    if err.code() in AUTHORIZATION:
        return KafkaAccessError(f"{what}: Kafka denied it ({err.str()}): the client's principal needs {needs} "
                                f"({SEE})")
    if err.code() in CREDENTIAL_ERRORS:
        return KafkaAccessError(f"{what}: Kafka refused the client's credentials: {err.str()}")
    return None


def explain(client: Any, exc: BaseException | None, what: str, needs: str) -> KafkaAccessError | None:
    """Why a call of client (made by pgshovel2.kafkaconf) failed with exc, when Kafka refused it:
    an ACL denial in exc itself (:func:`denied`), or an authentication or TLS failure the client
    reported meanwhile (served here: a consumer's poll may drop a message, harmless on a failure
    path). None when neither explains it (the caller reports exc as before)."""
    found = denied(error_of(exc) if exc is not None else None, what, needs)
    if found is not None:
        return found
    failures = getattr(client, "pgshovel_failures", None)
    if failures is None:
        return None
    try:
        client.poll(0)
    except Exception:  # a fatal error raised by poll: the caller's exc stands
        pass
    return credentials_error(failures.last, what, getattr(client, "pgshovel_settings", None),
                             getattr(client, "pgshovel_role", ""))


def credentials_error(err: KafkaError | None, what: str, settings: Any, role: str) -> KafkaAccessError | None:
    """The access error of an authentication or TLS failure err (None: None), naming the
    credential properties of settings (a kafkaconf.KafkaSettings, or None) and their origins."""
    if err is None:
        return None
    kind = "TLS handshake" if err.code() == KafkaError._SSL else "authentication"
    origins = []
    if settings is not None:
        origins = [f"{p} from {o}" for p in CREDENTIAL_PROPERTIES if (o := settings.origin(p, role))]
    where = f" (settings: {'; '.join(origins)})" if origins else " (no security properties are set: see " \
        "--kafka-config and the PGSHOVEL_KAFKA_* variables)"
    return KafkaAccessError(f"{what}: Kafka {kind} failed: {err.str()}{where}")
