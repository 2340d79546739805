"""Column controls of a set's table (``tables[i].controls``): what becomes of a column's values
before they leave the relay, as Debezium's ``column.exclude.list``, ``column.mask.with.N.chars``,
``column.mask.hash.v2.SHA-256.with.salt.*`` and ``column.truncate.to.N.chars``::

    tables:
      - name: app.users
        controls:
          password_hash: exclude          # never captured: not in the queue, the WAL decoding or Kafka
          ssn: {mask: 4}                  # every non-null value becomes "****" (a string)
          email: {hash: env:PII_SALT}     # hex SHA-256 of the salt and the value: equal values, equal
                                          # hashes (joins still work); the salt is a secret reference
          bio: {truncate: 100}            # text values cut to 100 characters (the type stays)

One control per column. This module checks the structure; the checks against the catalog (the
column exists and is captured; no exclude, mask or truncate on a key column; truncate on text
types only) are :func:`pgshovel2.catalog.resolve_table`'s, at set create and upgrade.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pgshovel2 import secretref
from pgshovel2.errors import ConfigError

ACTIONS = ("exclude", "mask", "hash", "truncate")
MAX_LENGTH = 1 << 20  # mask and truncate lengths (characters): up to 1 Mi


@dataclass(frozen=True)
class ColumnControl:
    """One column's control. action: one of ACTIONS. length: mask's number of ``*``, truncate's
    number of characters kept (None otherwise). salt: hash's secret reference (``env:VAR`` or
    ``file:PATH``; the reference is stored, the salt is read where the relay runs)."""

    column: str
    action: str
    length: int | None = None
    salt: str | None = None


def parse(data: Any, where: str, source: str) -> tuple[ColumnControl, ...]:
    """The controls mapping of a table entry (where: its config path, e.g. ``tables[0]``); () when
    absent. Raises ConfigError naming source, the field and the value (never a salt: only
    references are accepted)."""
    if data is None:
        return ()
    if not isinstance(data, dict) or not data:
        raise ConfigError(source, f"{where}.controls", data,
                          "must be a mapping of column name to exclude, {mask: N}, {hash: REFERENCE} "
                          "or {truncate: N}")
    return tuple(_control(column, spec, f"{where}.controls.{column}", source) for column, spec in data.items())


def _control(column: Any, spec: Any, field: str, source: str) -> ColumnControl:
    if not isinstance(column, str) or not column or len(column.encode("utf-8")) > 63 or "\x00" in column:
        raise ConfigError(source, field, column, "must be a column name (a non-empty identifier of at most 63 bytes)")
    if spec == "exclude":
        return ColumnControl(column, "exclude")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ACTIONS[1:]:
        raise ConfigError(source, field, _shown(spec),
                          "must be exclude, {mask: N}, {hash: env:VAR or file:PATH} or {truncate: N}")
    action, value = next(iter(spec.items()))
    if action == "hash":
        if not isinstance(value, str) or not secretref.is_reference(value):
            raise ConfigError(source, f"{field}.hash", "<hidden>" if isinstance(value, str) else value,
                              f"the salt must be a secret reference ({secretref.FORMS}), not the salt itself")
        return ColumnControl(column, "hash", salt=value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_LENGTH:
        raise ConfigError(source, f"{field}.{action}", value, f"must be a number of characters from 1 to {MAX_LENGTH}")
    return ColumnControl(column, action, length=value)


def _shown(spec: Any) -> Any:
    """spec as an error may show it: a hash's value hidden (it could be a salt written in clear)."""
    if isinstance(spec, dict) and "hash" in spec:
        return {**spec, "hash": "<hidden>"}
    return spec


def from_record(data: Any) -> tuple[ColumnControl, ...]:
    """The controls of a stored table config (a list of ColumnControl dicts; absent before controls
    existed: none)."""
    return tuple(ColumnControl(**c) for c in data or ())


def describe(control: ColumnControl) -> str:
    """``<column> <control>`` as a plan or report shows it: ``ssn mask 4``, ``email hash (env:SALT)``
    (the salt's reference, never a salt)."""
    what = {"exclude": "exclude", "mask": f"mask {control.length}", "truncate": f"truncate {control.length}",
            "hash": f"hash ({control.salt})"}[control.action]
    return f"{control.column} {what}"


def excluded(controls: tuple[ColumnControl, ...]) -> frozenset[str]:
    """The names of the columns controls exclude."""
    return frozenset(c.column for c in controls if c.action == "exclude")


def salts(controls: tuple[ColumnControl, ...], table: str,
          environ: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """Column name -> the salt (UTF-8 bytes) of each hashed column of controls, read from its
    reference where the process runs (environ: the variables, default os.environ). table names the
    table for errors. Raises SecretReferenceError naming the column and the reference, never a salt."""
    return {c.column: secretref.resolve(c.salt or "", f"the salt of column {c.column!r} of {table} (controls hash)",
                                        environ).encode("utf-8")
            for c in controls if c.action == "hash"}
