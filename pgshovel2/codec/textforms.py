"""Output-function text -> the capture value forms (sql/capture/README.rst "Value forms").

The ``pgoutput`` decoder and the snapshot of a set without our C code get each column as
the text of its type's output function, in a session whose settings are pinned
(:data:`SESSION_SETTINGS`). :func:`converter` turns that text into exactly what our
capture C code writes (as ``json.loads`` reads it), so everything after the source is
shared: the same keys and values reach Kafka whichever decoder read the WAL.

Which form a column takes follows ``encode.c``: its base type (domains stripped) when that
is one of :data:`SCALAR_OIDS`; an array whose element type (not domain-stripped) is one
of :data:`ARRAY_ELEMENT_OIDS`; anything else stays text. Built-in type OIDs are fixed.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from pgshovel2.codec import pgarray
from pgshovel2.codec.temporal import DAYS_2000, days_from_civil, time_from_text
from pgshovel2.errors import EncodeError
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

# Settings that make output text session-independent: libpq ``options`` and SET statements.
SESSION_SETTINGS = {"DateStyle": "ISO", "IntervalStyle": "postgres", "extra_float_digits": "3",
                    "bytea_output": "hex", "TimeZone": "UTC", "client_encoding": "UTF8"}
# search_path pinned too: reg* values (regclass, regproc, ...) name objects qualified unless in
# pg_catalog, as our C encoder and the PL/pgSQL capture write them (sql/capture/README.rst). The
# walsender (pgoutput) and snapshot reads pin it; a session running the user's SQL (an online
# snapshot's --where) does not.
WALSENDER_SETTINGS = {**SESSION_SETTINGS, "search_path": "pg_catalog"}

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL = 700, 701, 1082, 1083, 1114, 1184, 1186
_US_DAY = 86_400_000_000
_TS = re.compile(r"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
                 r"(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?( BC)?")
_DATE = re.compile(r"(\d{4,})-(\d\d)-(\d\d)( BC)?")
_IV_PART = re.compile(r"([+-]?\d+) (year|mon|day)s?")
_IV_TIME = re.compile(r"([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")


def _bool(text: str) -> bool:
    return text == "t"


def _float(text: str) -> Any:
    if text in ("NaN", "Infinity", "-Infinity"):
        return text
    if text == "-0":
        return -0.0
    return json.loads(text)  # the shortest-exact digits, read as the capture JSON is read


def _bytea(text: str) -> str:
    if not text.startswith("\\x"):
        raise EncodeError(f"bytea text {text[:20]!r} is not hex (bytea_output = hex expected)")
    return text[2:]


def _year(digits: str, bc: str | None) -> int:
    return 1 - int(digits) if bc else int(digits)


def date_form(text: str) -> int:
    """ISO date text (``2020-01-02``, ``0044-03-15 BC``, ``infinity``) -> days since 2000-01-01."""
    if text in ("infinity", "-infinity"):
        return INT32_MAX if text == "infinity" else INT32_MIN
    m = _DATE.fullmatch(text)
    if not m:
        raise EncodeError(f"cannot parse date {text!r} (DateStyle ISO expected)")
    return days_from_civil(_year(m[1], m[4]), int(m[2]), int(m[3])) - DAYS_2000


def timestamp_form(text: str) -> int:
    """ISO timestamp(tz) text -> microseconds since 2000-01-01 00:00 (UTC when it has an offset)."""
    if text in ("infinity", "-infinity"):
        return INT64_MAX if text == "infinity" else INT64_MIN
    m = _TS.fullmatch(text)
    if not m:
        raise EncodeError(f"cannot parse timestamp {text!r} (DateStyle ISO expected)")
    days = days_from_civil(_year(m[1], m[12]), int(m[2]), int(m[3])) - DAYS_2000
    us = ((int(m[4]) * 60 + int(m[5])) * 60 + int(m[6])) * 1_000_000 + int((m[7] or "").ljust(6, "0"))
    if m[8]:
        offset = (int(m[9]) * 60 + int(m[10] or 0)) * 60 + int(m[11] or 0)
        us -= (offset if m[8] == "+" else -offset) * 1_000_000
    return days * _US_DAY + us


def interval_form(text: str) -> list[int]:
    """IntervalStyle postgres text (``1 year -2 mons 3 days -04:05:06.5``) -> [months, days, µs]."""
    months = days = us = 0
    rest = text
    t = _IV_TIME.search(rest)
    if t:
        us = ((int(t[2]) * 60 + int(t[3])) * 60 + int(t[4])) * 1_000_000 + int((t[5] or "").ljust(6, "0"))
        us = -us if t[1] == "-" else us
        rest = rest[:t.start()]
    for n, unit in _IV_PART.findall(rest):
        if unit == "year":
            months += int(n) * 12
        elif unit == "mon":
            months += int(n)
        else:
            days += int(n)
    if _IV_PART.sub("", rest).strip():
        raise EncodeError(f"cannot parse interval {text!r} (IntervalStyle postgres expected)")
    return [months, days, us]


SCALAR_OIDS: dict[int, Callable[[str], Any]] = {
    BOOL: _bool, INT2: int, INT4: int, INT8: int, OID: int, FLOAT4: _float, FLOAT8: _float,
    DATE: date_form, TIME: time_from_text, TIMESTAMP: timestamp_form, TIMESTAMPTZ: timestamp_form,
    INTERVAL: interval_form, BYTEA: _bytea,
}
ARRAY_ELEMENT_OIDS = frozenset({BOOL, FLOAT4, FLOAT8, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, BYTEA})


def _shape(elements: list, dims: int) -> list[int]:
    shape, level = [], elements
    for _ in range(dims):
        shape.append(len(level))
        level = level[0] if level else []
    return shape


def _array(element: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        bounds, items = pgarray.parse_array(text)
        dims = pgarray.depth(items)
        flat = [None if x is None else element(x) for x in pgarray.flatten(items)]
        if dims == 1 and bounds is None or not items:
            return flat
        lower = bounds if bounds is not None else [1] * dims
        return {"dims": _shape(items, dims), "lower_bounds": lower, "elements": flat}
    convert.element = element  # type: ignore[attr-defined]  # for native_form
    return convert


def _text(text: str) -> str:
    return text


# The native decoder's name of each converter (native/src/pgoutput.rs does the same conversion).
_NATIVE_FORMS: dict[Callable[[str], Any], str] = {
    _bool: "bool", int: "int", _float: "float", date_form: "date", time_from_text: "time",
    timestamp_form: "timestamp", interval_form: "interval", _bytea: "bytea", _text: "text"}


def native_form(conv: Callable[[str], Any]) -> str:
    """The name native/src/pgoutput.rs knows a converter (from :func:`converter`) by: ``bool``,
    ``int``, ``float``, ``date``, ``time``, ``timestamp``, ``interval``, ``bytea``, ``text``,
    ``array:<name>`` for an array of elements of that name, or ``python`` for one it leaves
    to Python (a change with a non-null value of it)."""
    element = getattr(conv, "element", None)
    if element is not None:
        return f"array:{_NATIVE_FORMS[element]}"
    return _NATIVE_FORMS.get(conv, "python")


def converter(base_oid: int, element_oid: int) -> Callable[[str], Any]:
    """The text -> capture form function of a column whose base type (domains stripped) is
    base_oid; element_oid: the element type of that base type when it is a true array
    (``typsubscript = array_subscript_handler``), else 0. Functions raise EncodeError for
    text that is not in the pinned settings' form."""
    if base_oid in SCALAR_OIDS:
        return SCALAR_OIDS[base_oid]
    if element_oid in ARRAY_ELEMENT_OIDS:
        return _array(SCALAR_OIDS[element_oid])
    return _text
