"""json/jsonb values in the JSON encoding (docs/wire.rst, "json and jsonb").

A json value travels embedded (the JSON value itself), except where that would
be read as something else; then it travels as the escape object
``{"pgshovel.json": "<its JSON text>"}``:

- the JSON literal ``null`` (embedded, it would read as SQL NULL);
- inside an array column, an element that is a JSON array (it would read as
  a dimension);
- a value containing, at any depth, an object whose only key is
  ``pgshovel.json`` (it would read as an escape);
- a value with a number beyond a double's range (it would read as Infinity,
  which is no JSON) or a string that is no Unicode text (a lone surrogate
  escape such as ``"\\ud83d"``, which type json accepts: no UTF-8 form);
- a value nested deeper than MAX_EMBED_DEPTH arrays and objects (PostgreSQL
  accepts thousands of levels; Python's json, serde_json (128) and Jackson
  (1000) refuse a document that deep, and the relay reads none of it
  recursively: the depth is counted over the text in one pass).

So every object with the single key ``pgshovel.json`` and a string value found
in a column value of a JSON message is an escape, wherever it is: a reader
needs no type information to find them.
"""

import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

ESCAPE_KEY = "pgshovel.json"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Levels of arrays and objects a json value may have and travel embedded (``[]`` is 1, ``1`` 0).
# With the envelope (debezium: payload, after) and up to 6 array dimensions around it, a JSON
# message then nests at most 110 levels: under serde_json's default limit of 128, which is the
# lowest of the common readers. native/src/canon.rs has the same rule.
MAX_EMBED_DEPTH = 100
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_BRACKETS_ONLY = {c: None for c in range(128) if c not in _NESTING}


class _NotFiniteError(ValueError):
    """A JSON number beyond a double's range."""


def _finite(token: str) -> float:
    number = float(token)
    if math.isinf(number):
        raise _NotFiniteError(token)
    return number


_loads = json.JSONDecoder(parse_float=_finite).decode


@dataclass(frozen=True)
class JsonValue:
    """A json/jsonb value that travelled escaped: text is its JSON text (e.g. ``"null"``).

    The consumer library yields these for the escape objects of the JSON
    encoding, so that the JSON literal null (``JsonValue("null")``) stays
    distinct from SQL NULL (None). value: the parsed JSON value.
    """

    text: str

    @property
    def value(self) -> Any:
        return json.loads(self.text)


def _needs_escape(value: Any) -> bool:
    """Some object in value has the one key ESCAPE_KEY, or some string (or key) a lone surrogate."""
    if isinstance(value, dict):
        return (len(value) == 1 and ESCAPE_KEY in value) or any(
            _SURROGATE.search(k) or _needs_escape(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_needs_escape(v) for v in value)
    return isinstance(value, str) and _SURROGATE.search(value) is not None


def too_deep(text: str, limit: int = MAX_EMBED_DEPTH) -> bool:
    """True when the JSON text nests more than limit levels of arrays and objects (brackets
    inside strings do not count). Never recursive: strings are cut out by one regular
    expression, the remaining brackets summed by itertools.accumulate."""
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _STRINGS.sub("", text).translate(_BRACKETS_ONLY)
    return max(accumulate(map(_NESTING.__getitem__, brackets.encode("ascii", "ignore"))), default=0) > limit


def embed(text: str, element: bool = False) -> Any:
    """The JSON-encoding value of a json/jsonb value given as its JSON text.

    element: the value is an element of an array column. Raises ValueError
    for text that is not JSON (not checked for a value nested deeper than
    MAX_EMBED_DEPTH: that one is escaped as it stands, without parsing it).
    """
    if too_deep(text):
        return {ESCAPE_KEY: text}
    try:
        value = _loads(text)
    except _NotFiniteError:
        return {ESCAPE_KEY: text}
    if value is None or (element and isinstance(value, list)):
        return {ESCAPE_KEY: text}
    # the key can only occur literally or behind a \u escape, a surrogate only behind one
    if (ESCAPE_KEY in text or "\\u" in text) and _needs_escape(value):
        return {ESCAPE_KEY: text}
    return value


def is_escape(value: Any) -> bool:
    """True for an escape object ``{"pgshovel.json": "<text>"}``."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ESCAPE_KEY), str)


def unescape(value: Any) -> Any:
    """A decoded column value with every escape object replaced by a JsonValue (in place for
    containers, which are also returned)."""
    if isinstance(value, dict):
        if is_escape(value):
            return JsonValue(value[ESCAPE_KEY])
        for k, v in value.items():
            if isinstance(v, dict | list):
                value[k] = unescape(v)
        return value
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict | list):
                value[i] = unescape(v)
    return value
