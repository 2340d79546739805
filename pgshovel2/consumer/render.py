"""Text forms of transactions for ``pgshovel tail``: JSON lines and a
readable block per transaction (:class:`Pretty`).

JSON (one object per change per line)::

    {"txid": 815, "position": "...", "ts_ms": 1763679580123, "table": "public.acc", "op": "u",
     "key": {"id": 1}, "value": {"id": 1, "bal": 5}}

Decoded values become JSON as the JSON encoding writes them (WIRE.md):
bytes -> base64 string, Decimal -> exact string, date/time/datetime ->
ISO 8601 (aware UTC datetimes end in ``Z``), UUID -> string, NaN/±Infinity
floats -> "NaN"/"Infinity"/"-Infinity", escaped json values (JsonValue) ->
``{"pgshovel.json": text}``. Truncates have op ``t`` and null
key/value; snapshot rows op ``r`` and txid 0.

Pretty (row envelope; the debezium envelope shows ``before {row}`` ahead of ``->``)::

    BEGIN txid 815 (5 changes, 2026-11-20T22:39:40.123Z)
      u public.acc {id: 1} -> {id: 1, bal: 5.50, "Full Name": 'Ann', ok: t, at: '2026-11-20 22:39:40.1+00'}
      d public.acc {id: 2}
      t public.hist
    COMMIT

Columns by their names (quoted like SQL identifiers when they need it), values
as PostgreSQL prints them (pgshovel2.consumer.pgtext): numbers and booleans
bare, everything else as a SQL string literal (``E'...'`` when it holds
control characters), NULL as ``NULL``; longer than 60 characters cut with ``…``.
"""

import base64
import dataclasses
import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import click

from pgshovel2 import names
from pgshovel2.catalog import Column
from pgshovel2.codec.avro import envelope_row_schema
from pgshovel2.codec.jsonvalue import ESCAPE_KEY, JsonValue
from pgshovel2.consumer import pgtext
from pgshovel2.consumer.connectjson import ConnectReader, is_connect
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.errors import ConsumerError
from pgshovel2.consumer.model import Change, Transaction
from pgshovel2.setrecord import SetRecord

OP_COLOURS = {"c": "green", "u": "yellow", "d": "red", "t": "magenta", "r": "cyan", "drop": "magenta",
              "schema": "magenta", "topic": "magenta"}
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
    out = {"txid": change.txid, "position": change.position, "ts_ms": change.ts_ms,
           "table": change.table, "op": change.op, "key": jsonable(change.key), "value": jsonable(change.value)}
    if change.unchanged:  # pgshovel.unchanged: these null fields are not the row's values
        out["unchanged"] = sorted(change.unchanged)
    return json.dumps(out, ensure_ascii=False, allow_nan=False)


def iso_ms(ts_ms: int) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    when = dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decoded(change: Change, decoder: Decoder) -> Change:
    """change with its key/value bytes (``SetReader(decode=False)``) decoded by decoder (a DDL's mark
    has none: as it is)."""
    if change.op in ("drop", "schema", "topic"):
        return change
    where = f"{change.topic!r} [{change.partition}] offset {change.offset}"
    return dataclasses.replace(change, key=decoder.decode(change.key, f"the key of {where}"),
                               value=decoder.decode(change.value, f"the value of {where}"))


_PLAIN_IDENT = re.compile(r"[a-z_][a-z0-9_$]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
Row = Callable[[dict[str, Any]], str]
Cells = dict[str, tuple[str, pgtext.Text]]  # Avro field name -> (shown name + ": ", shown value)
_JSON_DECODE = json.JSONDecoder(parse_float=Decimal).decode  # exact numbers, for jsonb values
_STYLED_OPS = {op: click.style(op, fg=colour, bold=True) for op, colour in OP_COLOURS.items()}


def ident(name: str) -> str:
    """A column name as SQL writes it: bare when it can be, else double-quoted."""
    return name if _PLAIN_IDENT.fullmatch(name) else names.quote_ident(name)


def literal(text: str) -> str:
    """text as a SQL string literal: ``'...'``, or ``E'...'`` with escapes when it holds control characters."""
    if text.isprintable() or _CONTROL.search(text) is None:
        return "'" + text.replace("'", "''") + "'"
    return "E'" + "".join(_ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if _CONTROL.match(ch) else ch)
                          for ch in text) + "'"


def _shown(text: pgtext.Text, bare: bool, max_text: int) -> pgtext.Text:
    """A non-null value -> its shown form: PostgreSQL's text, cut at max_text, quoted unless bare."""
    if text is str and bare and max_text >= 20:  # integers: nothing to cut or quote
        return str

    def show(value: Any) -> str:
        out = text(value)
        if len(out) > max_text:
            out = out[:max_text - 1] + "…"
        return out if bare else literal(out)
    return show


def _row(cells: list[tuple[str, str, pgtext.Text]]) -> Row:
    """Renders a datum's fields [(shown name + ": ", field name, shown value)] as ``{name: value, ...}``."""
    def render(datum: dict[str, Any]) -> str:
        return "{" + ", ".join([prefix + ("NULL" if (v := datum[f]) is None else show(v))
                                for prefix, f, show in cells]) + "}"
    return render


class Pretty:
    """The pretty form of a set's transactions: one block of lines per transaction.

    record: the set's record (pgshovel2.setrecord): column kinds and names for JSON messages
    (and Avro string fields), the envelope.
    Avro messages are rendered from their writer schema (field property
    ``pgshovel.column`` for the name), fetched through decoder. Changes must
    hold message bytes (``SetReader(decode=False)``): each is decoded as it is
    rendered. max_text: longest value shown. Raises ConsumerError naming the
    message that cannot be decoded.
    """

    def __init__(self, record: SetRecord, decoder: Decoder, max_text: int = MAX_TEXT):
        self.decoder, self.max_text = decoder, max_text
        self.debezium = record.config.envelope == "debezium"
        self._connect = ConnectReader(escapes=True)  # raw JSON messages, escape objects as they are
        self._columns: dict[str, dict[str, Column]] = {}
        self._by_table: dict[str, dict[str, Column]] = {}
        for table in record.wire_tables:
            cols = {a: c for c in table.columns for a in (*c.aliases, c.name)}
            self._by_table[f"{table.schema}.{table.name}"] = cols
            self._columns[record.topic(table)] = cols
        self._avro: dict[tuple[str, int], tuple[Row, bool, Cells]] = {}
        self._json: dict[str, dict[str, tuple[str, pgtext.Text]]] = {}
        self._keys: dict[tuple[str, bytes], list[str] | None] = {}  # (topic, key header) -> key fields

    def lines(self, txn: Transaction) -> Iterator[str]:
        """The block of txn, line by line (ANSI styles; click.echo drops them off a terminal)."""
        count = len(txn.changes)
        if txn.snapshot:
            yield click.style(f"SNAPSHOT ({count} row{'s' * (count != 1)}, {iso_ms(txn.ts_ms)})", bold=True)
        else:
            yield click.style(f"BEGIN txid {txn.txid} ({count} change{'s' * (count != 1)}, {iso_ms(txn.ts_ms)})",
                              bold=True)
        for change in txn.changes:
            yield self.change_line(change)
        yield click.style("END SNAPSHOT" if txn.snapshot else "COMMIT", bold=True)

    def change_line(self, change: Change) -> str:
        """``  op schema.table {key} -> {value}`` (debezium: ``{key} before {row} -> {row}``)."""
        op = _STYLED_OPS.get(change.op) or click.style(change.op, bold=True)
        if change.op in ("drop", "schema", "topic"):  # a DDL's mark (Change docstring)
            what = {"drop": "table dropped: it ends in the set here (its rows are gone)",
                    "schema": "the value schema changed incompatibly (an operator accepted it)",
                    "topic": f"goes on in topic {(change.value or {}).get('new_topic')}"}[change.op]
            return f"  {op} {change.table} {what}"
        parts = [op, change.table]
        where = f"{change.topic!r} [{change.partition}] offset {change.offset}"
        text = envelope = row = None
        if change.value is not None:
            text, envelope, row = self._render(change, change.value, f"the value of {where}")
        if change.key is not None:
            key = self._key_from_row(change, change.key, row, where) if row is not None else None
            parts.append(key if key is not None else self._render(change, change.key, f"the key of {where}")[0])
        if envelope is not None:
            before, after = envelope
            if before is not None:
                parts.append(f"before {before}")
            if after is not None:
                parts.append(f"-> {after}")
        elif text is not None:
            parts.append(f"-> {text}" if change.key is not None else text)
        if change.unchanged:
            parts.append("(unchanged, not shown: " + ", ".join(ident(c) for c in sorted(change.unchanged)) + ")")
        return "  " + " ".join(parts)

    # -- decoding and rendering ----------------------------------------------------------------

    def _render(self, change: Change, data: bytes, where: str) -> tuple[str, tuple[str | None, str | None] | None,
                                                                      tuple[dict[str, Any], Cells] | None]:
        """(row text, None, (Avro datum, its cells) or None), or for a debezium event ("", (before, after), None)."""
        if data[:1] == b"\x00":
            schema_id, writer, datum = self.decoder.avro(data, where)
            cached = self._avro.get((change.topic, schema_id))
            if cached is None:
                cached = self._avro[(change.topic, schema_id)] = self._avro_row(change, writer)
            row, envelope, cells = cached
            if not envelope:
                return row(datum), None, (datum, cells)
        else:
            try:
                datum = _JSON_DECODE(data.decode("utf-8"))
            except ValueError as exc:
                raise ConsumerError(f"cannot decode {where}: {exc}") from exc
            if not isinstance(datum, dict):
                raise ConsumerError(f"{where} is {datum!r:.80}, not a JSON object")
            if is_connect(datum):  # JsonConverter's schema + payload: the payload in pgshovel2's forms
                datum = self._connect.read(datum, data)
            row, envelope = (lambda d: self._json_row(change, d)), self.debezium and "source" in datum
        if not envelope:
            return row(datum), None, None
        before, after = datum.get("before"), datum.get("after")
        return "", (None if before is None else row(before), None if after is None else row(after)), None

    def _key_from_row(self, change: Change, key: bytes, row: tuple[dict[str, Any], Cells], where: str) -> str | None:
        """The key shown from the value's own fields (a row image holds the key columns): one Avro
        decode per change instead of two. None when the key is not an Avro record of those fields."""
        header = key[:5]
        datum, cells = row
        if (change.topic, header) not in self._keys:
            fields = None
            if header[:1] == b"\x00":
                _, writer, _ = self.decoder.avro(key, f"the key of {where}")
                fields = [f["name"] for f in writer.get("fields", ())] if writer.get("type") == "record" else []
            self._keys[(change.topic, header)] = fields if fields and all(f in cells for f in fields) else None
        fields = self._keys[(change.topic, header)]
        if fields is None:
            return None
        return "{" + ", ".join([cells[f][0] + ("NULL" if (v := datum[f]) is None else cells[f][1](v))
                                for f in fields]) + "}"

    def _kinds(self, change: Change) -> dict[str, Column]:
        return self._columns.get(change.topic) or self._by_table.get(change.table) or {}

    def _avro_row(self, change: Change, writer: dict[str, Any]) -> tuple[Row, bool, Cells]:
        """The row renderer of an Avro writer schema (a row record, or a debezium Envelope)."""
        envelope = writer.get("name") == "Envelope" and \
            {f["name"] for f in writer["fields"]} >= {"before", "after", "source"}
        record = envelope_row_schema(writer) if envelope else writer
        columns = self._kinds(change)
        cells = []
        for f in record["fields"]:
            name = f.get("pgshovel.column", f["name"])
            col = columns.get(name)
            kind = col.kind if col is not None else pgtext.kind_of_type(f.get("pgshovel.type", ""))
            show = _shown(pgtext.avro_text(f["type"], kind), pgtext.avro_bare(f["type"], kind), self.max_text)
            cells.append((f"{ident(name)}: ", f["name"], show))
        return _row(cells), envelope, {f: (prefix, show) for prefix, f, show in cells}

    def _json_row(self, change: Change, datum: dict[str, Any]) -> str:
        cells = self._json.setdefault(change.topic, {})
        out = []
        for name, value in datum.items():
            cell = cells.get(name)
            if cell is None:
                col = self._kinds(change).get(name)
                kind, is_array = (col.kind, col.is_array) if col is not None else pgtext.guess_kind(value)
                bare = kind in pgtext.BARE_KINDS and not is_array
                cell = cells[name] = (f"{ident(name)}: ",
                                      _shown(pgtext.json_text(kind, is_array), bare, self.max_text))
            out.append(cell[0] + ("NULL" if value is None else cell[1](value)))
        return "{" + ", ".join(out) + "}"
