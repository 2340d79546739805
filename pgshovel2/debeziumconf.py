"""Options of ``envelope: debezium`` in a set config (``debezium:``) and in its stored record: which
of Debezium's forms the set's events take (docs/wire.rst, "Envelope debezium"). Parsed by
:func:`parse` for :func:`pgshovel2.config.parse_config`, read back by :func:`from_record`.
"""

from dataclasses import dataclass

from pgshovel2.configmodel import (
    BINARY_MODES,
    DECIMAL_MODES,
    INTERVAL_MODES,
    SKIPPABLE,
    UNAVAILABLE_VALUE_PLACEHOLDER,
    UNCHANGED_TOAST,
)
from pgshovel2.errors import ConfigError

# The stored record's ``debezium.form``: 2 when ``schemas`` covers Avro too (absent: 1, JSON only)
STORED_FORM = 2


@dataclass(frozen=True)
class DebeziumConfig:
    """Options of ``envelope: debezium`` (docs/wire.rst, "Envelope debezium").

    schemas: keys and values carry Debezium's Connect schemas and value forms: with encoding json
    each is Kafka Connect JsonConverter's ``{"schema", "payload"}`` (``schemas.enable=true``), with
    avro the Connect schemas as Confluent's AvroConverter registers them (codec.connect_avro);
    False: the schemaless JSON event with pgshovel2's JSON values, or pgshovel2's own Avro schemas.
    Sets stored before the option existed keep False (their topics' form): JSON sets stored before
    it, Avro sets stored before it covered Avro (:data:`STORED_FORM`); new sets default to True.
    skipped_operations: Debezium's ``skipped.operations``, as its default ``(t,)``: no ``op: t``
    events for TRUNCATE (the transactions topic's TRUNCATE record only); ``()`` writes one per
    truncated table. Data changes (c, u, d) are never skipped.
    unchanged_toast: what an UPDATE's unchanged TOASTed value, which the WAL does not log (replica
    identity other than FULL), becomes in ``after``: ``placeholder`` (new sets), Debezium's
    ``unavailable.value.placeholder`` (unavailable_value_placeholder, Debezium's default
    ``__debezium_unavailable_value``) where the column's form can hold it (strings, bytes, text and
    integer arrays, as Debezium), else null; ``header``: null (sets stored before the option). Either
    way the message's ``pgshovel.unchanged`` header names the columns (docs/wire.rst).
    decimal_handling_mode, interval_handling_mode, binary_handling_mode: Debezium's properties of
    the same names (``decimal.handling.mode`` ...), for the Connect form (schemas) only: the forms
    of numeric/money, interval and bytea values (codec.connect_modes; defaults Debezium's).
    """

    schemas: bool = True
    skipped_operations: tuple[str, ...] = ("t",)
    unchanged_toast: str = "placeholder"
    unavailable_value_placeholder: str = UNAVAILABLE_VALUE_PLACEHOLDER
    decimal_handling_mode: str = DECIMAL_MODES[0]
    interval_handling_mode: str = INTERVAL_MODES[0]
    binary_handling_mode: str = BINARY_MODES[0]

    @property
    def placeholder(self) -> str | None:
        """The text unchanged TOASTed values take in ``after``, or None (null)."""
        return self.unavailable_value_placeholder if self.unchanged_toast == "placeholder" else None

    @property
    def truncate_events(self) -> bool:
        """Whether a TRUNCATE writes Debezium ``op: t`` events to the table's topic."""
        return "t" not in self.skipped_operations


def parse(data: dict, envelope: str, source: str) -> DebeziumConfig:
    """The ``debezium`` mapping of a set config's data (source: the file, for errors), only with
    envelope debezium. Raises ConfigError naming the field."""
    if "debezium" not in data:
        return DebeziumConfig()
    value = data["debezium"]
    if envelope != "debezium":
        raise ConfigError(source, "debezium", value, "applies to envelope: debezium only")
    if not isinstance(value, dict):
        raise ConfigError(source, "debezium", value, "must be a mapping {schemas: true|false, "
                          "skipped_operations: [t] or [], unchanged_toast: placeholder|header, "
                          "unavailable_value_placeholder: TEXT}")
    # unknown fields: configmodel.unknown_fields, before any field is parsed
    schemas = value.get("schemas", True)
    if not isinstance(schemas, bool):
        raise ConfigError(source, "debezium.schemas", schemas, "must be true or false")
    skipped = value.get("skipped_operations", ["t"])
    if not isinstance(skipped, list) or any(op not in SKIPPABLE for op in skipped):
        raise ConfigError(source, "debezium.skipped_operations", skipped,
                          "must be a list of the operations Debezium's skipped.operations may name that pgshovel2 "
                          "skips: [t] (no op t events for TRUNCATE, the default) or [] (c, u and d are never "
                          "skipped: no change is dropped)")
    if "t" not in skipped and data.get("encoding", "avro") != "json":
        raise ConfigError(source, "debezium.skipped_operations", skipped,
                          "op t events need JSON (encoding: json): their key is Connect's null key, which Avro "
                          "has no form for, and Kafka refuses a null key on a compacted table topic")
    unchanged, placeholder = _parse_unchanged_toast(value, source)
    modes = {key: _mode(value, key, choices, schemas, source) for key, choices in (
        ("decimal_handling_mode", DECIMAL_MODES), ("interval_handling_mode", INTERVAL_MODES),
        ("binary_handling_mode", BINARY_MODES))}
    return DebeziumConfig(schemas=schemas, skipped_operations=tuple(dict.fromkeys(skipped)),
                          unchanged_toast=unchanged, unavailable_value_placeholder=placeholder, **modes)


def _mode(value: dict, key: str, choices: tuple[str, ...], schemas: bool, source: str) -> str:
    """One of Debezium's value modes (choices[0] its default); only with schemas (the Connect form)."""
    mode = value.get(key, choices[0])
    if mode not in choices:
        raise ConfigError(source, f"debezium.{key}", mode, f"must be one of {', '.join(choices)} (Debezium's "
                          f"{key.replace('_', '.')}; default {choices[0]})")
    if key in value and not schemas:
        raise ConfigError(source, f"debezium.{key}", mode, "applies to Debezium's Connect forms (schemas: true) "
                          "only; with schemas: false values take pgshovel2's own forms")
    return mode


def _parse_unchanged_toast(value: dict, source: str) -> tuple[str, str]:
    """(unchanged_toast, unavailable_value_placeholder) of the ``debezium`` mapping value."""
    unchanged = value.get("unchanged_toast", UNCHANGED_TOAST[0])
    if unchanged not in UNCHANGED_TOAST:
        raise ConfigError(source, "debezium.unchanged_toast", unchanged,
                          "must be placeholder (Debezium's unavailable.value.placeholder in the field, the default) "
                          "or header (null in the field); the pgshovel.unchanged header names the column either way")
    placeholder = value.get("unavailable_value_placeholder", UNAVAILABLE_VALUE_PLACEHOLDER)
    if "unavailable_value_placeholder" in value and unchanged != "placeholder":
        raise ConfigError(source, "debezium.unavailable_value_placeholder", placeholder,
                          "applies to unchanged_toast: placeholder only (header writes null)")
    if not isinstance(placeholder, str) or not placeholder:
        raise ConfigError(source, "debezium.unavailable_value_placeholder", placeholder,
                          f"must be a non-empty string (Debezium's default: {UNAVAILABLE_VALUE_PLACEHOLDER})")
    return unchanged, placeholder


def from_record(stored: dict | None, encoding: str) -> DebeziumConfig:
    """The DebeziumConfig of a stored record (to_dict): a record before the option has schemas
    False (schemaless JSON), and so has an Avro record before :data:`STORED_FORM` 2 (its
    ``schemas`` meant JSON only: its topics hold pgshovel2's own Avro schemas)."""
    if stored is None:
        return DebeziumConfig(schemas=False, unchanged_toast="header")
    schemas = stored["schemas"] and (encoding != "avro" or stored.get("form", 1) >= STORED_FORM)
    return DebeziumConfig(schemas=schemas,
                          skipped_operations=tuple(stored.get("skipped_operations", ("t",))),
                          unchanged_toast=stored.get("unchanged_toast", "header"),
                          unavailable_value_placeholder=stored.get("unavailable_value_placeholder",
                                                                   UNAVAILABLE_VALUE_PLACEHOLDER),
                          decimal_handling_mode=stored.get("decimal_handling_mode", DECIMAL_MODES[0]),
                          interval_handling_mode=stored.get("interval_handling_mode", INTERVAL_MODES[0]),
                          binary_handling_mode=stored.get("binary_handling_mode", BINARY_MODES[0]))
