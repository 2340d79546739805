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


class ConfigProblemsError(ConfigError):
    """Several problems of one config found at once (every unknown field, say): errors, each a
    ConfigError naming the file and its field; source, field and value are the first's."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = list(errors)
        first = self.errors[0]
        self.source, self.field, self.value = first.source, first.field, first.value
        PgshovelError.__init__(self, f"{first.source}: {len(self.errors)} problems:\n  "
                               + "\n  ".join(str(e) for e in self.errors))


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


class KeyLayoutError(EncodeError):
    """A key value does not fit the key schema a table keeps after a DDL widened a key column
    (Table.key_layout): the table can only go on under a new topic generation
    (``pgshovel set accept-ddl SET TABLE --new-topic``). table: its tag; column: the key column;
    value: the value that does not fit."""

    def __init__(self, table: str, column: str, value: object, message: str):
        self.table, self.column, self.value = table, column, value
        super().__init__(message)


class ConflictError(ClusterError):
    """Another admin (or relay) changed the set first; nothing was written."""


class SchemaChangeError(RelayError):
    """A DDL change on a captured table cannot be expressed compatibly in the stream.

    The relay stops before the change; every event before it is in Kafka and
    the rest stays in the queue, until an operator's decision
    (``pgshovel set accept-ddl``). table: the table's tag; statement: the DDL; reason: why it
    is not compatible; key_change: True when it changes the table's key (only a new topic
    generation can follow it).
    """

    def __init__(self, message: str, table: str = "", statement: str = "", reason: str = "",
                 key_change: bool = False):
        self.table, self.statement, self.reason, self.key_change = table, statement, reason, key_change
        super().__init__(message)


class RequestError(PgshovelError):
    """An operator's request (e.g. ``pgshovel set snapshot``) names something that does not exist or
    cannot be done; nothing was written."""
