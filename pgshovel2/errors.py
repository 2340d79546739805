"""Errors pgshovel2 raises for bad input and unavailable services.

Every error names the thing that is wrong and where it was found, so the CLI
can print it as is and exit non-zero.
"""


class PgshovelError(Exception):
    """Base class of all errors pgshovel2 reports to the operator."""


class ConfigError(PgshovelError):
    """A replication-set configuration is invalid.

    source: the config file path (or other origin); field: dotted path of the
    offending field, e.g. ``tables[2].columns``; value: the offending value.
    """

    def __init__(self, source: str, field: str, value: object, message: str):
        self.source, self.field, self.value = source, field, value
        super().__init__(f"{source}: {field}: {message} (got {value!r})")


class ClusterError(PgshovelError):
    """The ZooKeeper state is missing, conflicting or unreachable."""


class CaptureError(PgshovelError):
    """Installing or removing capture objects in the database failed."""


class RelayError(PgshovelError):
    """The relay cannot continue without risking loss or corruption."""


class UnavailableError(RelayError):
    """A service the relay needs (PostgreSQL, Kafka, the registry) is down or went away.

    Nothing was acknowledged that is not in Kafka, so the relay can be rebuilt
    and retried from its committed position.
    """


class StopRequestedError(PgshovelError):
    """A stop was requested (SIGTERM/SIGINT) while waiting for a service: the wait ended early.

    Nothing was acknowledged that is not in Kafka: the next start resumes from the committed position.
    """


class FencedError(RelayError):
    """Another relay of the same set took over its Kafka transactional id."""


class SchemaRejectedError(RelayError):
    """The schema registry refused a schema (e.g. it breaks the subject's compatibility rule)."""


class EncodeError(PgshovelError):
    """A captured value cannot be represented in the configured encoding."""


class ConflictError(ClusterError):
    """Another admin (or relay) changed the set first; nothing was written."""


class SchemaChangeError(RelayError):
    """A DDL change on a captured table cannot be expressed compatibly in the stream.

    The relay stops before the change; every event before it is in Kafka and
    the rest stays in the queue.
    """


class RequestError(PgshovelError):
    """An operator's request (e.g. ``pgshovel set snapshot``) names something that does not exist or
    cannot be done; nothing was written."""
