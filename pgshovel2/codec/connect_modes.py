"""Debezium's other value modes of the Connect form (``debezium:`` options of a set, named as
Debezium's connector properties): ``decimal_handling_mode`` ``string`` (the numeric's text) or
``double``, ``interval_handling_mode`` ``string`` (``io.debezium.time.Interval``, ISO 8601 with
every component: ``P1Y2M3DT4H5M6.5S``, ``P0Y0M0DT0H0M-1S``) and ``binary_handling_mode``
``base64``, ``base64-url-safe`` or ``hex`` (bytea as a string). Forms as Debezium 3.4.3 writes them
(recorded: tests/fixtures/debezium-3.4.3.Final-postgres-modes.json). Inputs are the capture
trigger's forms; the defaults (precise, numeric, bytes) are :mod:`pgshovel2.codec.connect`'s own.
"""

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgshovel2.codec.types import _money

_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True)
class Modes:
    """A set's Debezium value modes (docs/wire.rst, "Envelope debezium"); the defaults are Debezium's."""

    decimal: str = "precise"
    interval: str = "numeric"
    binary: str = "bytes"


DEFAULT = Modes()


def decimal(kind: str, mode: str, raw: bool) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """(Connect schema, trigger form -> value) of a numeric or money column in mode string or double
    (raw: for Avro, where a double holds NaN and ±Infinity; in JSON they stay the strings the JSON
    encoding writes for a double's)."""
    text = _money if kind == "money" else str
    if mode == "string":
        return {"type": "string"}, text

    def to_double(v: Any) -> float | str:
        t = text(v)
        if t in _FLOAT_WORDS:
            return _FLOAT_WORDS[t] if raw else t
        return float(t)
    return {"type": "double"}, to_double


def interval_text(v: list) -> str:
    """Trigger interval [months, days, µs] -> Debezium's Interval string: years and months from the
    months, days, then hours, minutes and seconds of the µs, each with its own sign (as PostgreSQL's
    fields), seconds with the fraction digits they need."""
    months, days, us = v
    years, months = int(months / 12), months - int(months / 12) * 12
    sign = "-" if us < 0 else ""
    hours, rest = divmod(abs(us), 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds = f"{rest // 1_000_000}.{rest % 1_000_000:06d}".rstrip("0").rstrip(".")
    h, m, s = (f"{sign}{n}" if n != "0" and n else n for n in (str(hours), str(minutes), seconds))
    return f"P{years}Y{months}M{days}DT{h}H{m}M{s}S"


def binary(mode: str) -> Callable[[str], str]:
    """trigger bytea (hex text) -> its string in binary_handling_mode mode."""
    if mode == "hex":
        return lambda v: v.lower()
    encode = base64.urlsafe_b64encode if mode == "base64-url-safe" else base64.b64encode
    return lambda v: encode(bytes.fromhex(v)).decode("ascii")
