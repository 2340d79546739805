"""Text forms of transactions for ``pgshovel tail``: JSON lines and a
readable block per transaction. Pure functions of Transaction/Change.

JSON (one object per change per line)::

    {"txid": 815, "position": "...", "ts_ms": 1763679580123, "table": "public.acc", "op": "u",
     "key": {"id": 1}, "value": {"id": 1, "bal": 5}}

Decoded values become JSON as the JSON encoding writes them (WIRE.md):
bytes -> base64 string, Decimal -> exact string, date/time/datetime ->
ISO 8601 (aware UTC datetimes end in ``Z``), UUID -> string, NaN/±Infinity
floats -> "NaN"/"Infinity"/"-Infinity", escaped json values (JsonValue) ->
``{"pgshovel.json": text}``. Truncates have op ``t`` and null
key/value; snapshot rows op ``r`` and txid 0.

Pretty::

    BEGIN txid 815 (5 changes, 2026-11-20T22:39:40.123Z)
      u public.acc {id: 1} -> {id: 1, bal: 5}
      d public.acc {id: 2}
      t public.hist
    COMMIT
"""

import base64
import datetime as dt
import json
import math
import uuid
from decimal import Decimal
from typing import Any

import click

from pgshovel2.codec.jsonvalue import ESCAPE_KEY, JsonValue
from pgshovel2.consumer.model import Change, Transaction

OP_COLOURS = {"c": "green", "u": "yellow", "d": "red", "t": "magenta", "r": "cyan"}
MAX_TEXT = 60


def jsonable(value: Any) -> Any:
    """A decoded key/value (or part of one) as plain JSON types (rules in the module doc)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, JsonValue):
        return {ESCAPE_KEY: value.text}
    if isinstance(value, dt.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if value.utcoffset() == dt.timedelta(0) and text.endswith("+00:00") else text
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return value


def change_json(change: Change) -> str:
    """One change as a JSON line (no newline)."""
    return json.dumps({"txid": change.txid, "position": change.position, "ts_ms": change.ts_ms,
                       "table": change.table, "op": change.op, "key": jsonable(change.key),
                       "value": jsonable(change.value)}, ensure_ascii=False, allow_nan=False)


def iso_ms(ts_ms: int) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    when = dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, JsonValue):
        text = "json:" + value.text  # json:null is not SQL NULL (null)
    elif isinstance(value, bytes):
        text = "\\x" + value.hex()
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, dict):
        return _record(value)
    elif isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    else:
        text = str(jsonable(value))
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def _record(record: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in record.items()) + "}"


def change_line(change: Change) -> str:
    """``  op schema.table {key} -> {value}`` (the arrow part only when there is a value)."""
    parts = [click.style(change.op, fg=OP_COLOURS.get(change.op), bold=True), change.table]
    if change.key is not None:
        parts.append(_record(change.key))
    if change.value is not None:
        parts.append("-> " + _record(change.value) if change.key is not None else _record(change.value))
    return "  " + " ".join(parts)


def pretty(txn: Transaction) -> list[str]:
    """The lines of one transaction's block (ANSI styles; click.echo drops them off a TTY)."""
    count = len(txn.changes)
    if txn.snapshot:
        head = f"SNAPSHOT ({count} row{'s' * (count != 1)}, {iso_ms(txn.ts_ms)})"
        tail = "END SNAPSHOT"
    else:
        head = f"BEGIN txid {txn.txid} ({count} change{'s' * (count != 1)}, {iso_ms(txn.ts_ms)})"
        tail = "COMMIT"
    return [click.style(head, bold=True), *(change_line(c) for c in txn.changes), click.style(tail, bold=True)]
