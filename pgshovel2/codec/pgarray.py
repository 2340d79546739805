"""PostgreSQL array values: parsing array_out text, the capture forms of arrays,
and rendering array literals.

An array is handled as ``(lower_bounds, elements)``: ``elements`` are nested
lists, one level per dimension (``[]`` for an empty array), and
``lower_bounds`` is one int per dimension, or None when every lower bound is
1 (PostgreSQL's default, which array_out does not print).
"""

from collections.abc import Callable
from typing import Any

from pgshovel2.errors import EncodeError

MAX_DIMS = 6  # PostgreSQL's MAXDIM


def parse_array(text: str) -> tuple[list[int] | None, list]:
    """Parse array_out text, e.g. ``[0:1]={1,NULL,"a \\"b\\""}`` -> ``([0], ['1', None, 'a "b"'])``.

    Elements stay text (None for NULL); nested arrays become nested lists. The
    dimension decoration (``[0:1][1:2]=``), printed when a lower bound is not
    1, gives the lower bounds. int2vector/oidvector text (space-separated,
    ``1 2 3``) is read as a one-dimensional array. Raises EncodeError naming
    the literal when it is malformed.
    """
    if not text.startswith(("{", "[")):  # int2vector, oidvector: "1 2 3" (or "" when empty)
        return None, text.split()
    bounds = None
    if text.startswith("["):
        eq = text.find("=")
        if eq < 0:
            raise EncodeError(f"bad array dimensions in {text[:80]!r}")
        bounds = _bounds(text[:eq], text)
        text = text[eq + 1:]
    value, pos = _parse(text, 0)
    if pos != len(text):
        raise EncodeError(f"trailing text in array literal {text[:80]!r}")
    if bounds is not None and all(b == 1 for b in bounds):
        bounds = None
    return bounds, value


def _bounds(decoration: str, text: str) -> list[int]:
    out = []
    for dim in decoration[1:-1].split("]["):
        lower, sep, _ = dim.partition(":")
        if not sep:
            raise EncodeError(f"bad array dimensions in {text[:80]!r}")
        out.append(int(lower))
    return out


def _parse(text: str, pos: int) -> tuple[list, int]:
    if text[pos:pos + 1] != "{":
        raise EncodeError(f"bad array literal {text[:80]!r}")
    out: list = []
    pos += 1
    if text[pos:pos + 1] == "}":
        return out, pos + 1
    try:
        while True:
            ch = text[pos]
            if ch == "{":
                item, pos = _parse(text, pos)
                out.append(item)
            elif ch == '"':
                item, pos = _quoted(text, pos + 1)
                out.append(item)
            else:
                end = pos
                while text[end] not in ",}":
                    end += 1
                word = text[pos:end].strip()
                out.append(None if word == "NULL" else word)
                pos = end
            if text[pos] == "}":
                return out, pos + 1
            pos += 1  # the ','
    except IndexError:
        raise EncodeError(f"unterminated array literal {text[:80]!r}") from None


def _quoted(text: str, pos: int) -> tuple[str, int]:
    chars = []
    while True:
        ch = text[pos]
        if ch == "\\":
            chars.append(text[pos + 1])
            pos += 2
        elif ch == '"':
            return "".join(chars), pos + 1
        else:
            chars.append(ch)
            pos += 1


def from_capture(value: Any) -> tuple[list[int] | None, list, int, bool]:
    """The capture trigger's form of an array column -> (lower_bounds, elements, dims, text).

    Forms (sql/capture/README.rst): a JSON array of element forms (one
    dimension, lower bound 1, or empty); ``{"dims", "lower_bounds",
    "elements"}`` with the element forms flat in storage order (any other
    shape); or the array_out text (element types without a form of their own,
    and multi-dimensional arrays in rows queued by older pgshovel2 versions).
    dims: the number of dimensions (an element form may itself be a JSON
    array: interval). text: True for the text form (elements are
    output-function text). Raises EncodeError for a malformed value.
    """
    if isinstance(value, list):
        return None, value, 1, False
    if isinstance(value, str):
        bounds, items = parse_array(value)
        return bounds, items, depth(items), True
    if isinstance(value, dict):
        try:
            dims, lower, flat = value["dims"], value["lower_bounds"], value["elements"]
        except KeyError as exc:
            raise EncodeError(f"array form without {exc}") from None
        expected = 1
        for d in dims:
            expected *= d
        if len(dims) != len(lower) or not 0 < len(dims) <= MAX_DIMS or expected != len(flat):
            raise EncodeError(f"inconsistent array form: dims {dims}, lower_bounds {lower}, "
                              f"{len(flat)} elements")
        return (None if all(b == 1 for b in lower) else list(lower)), nest(flat, dims), len(dims), False
    raise EncodeError(f"unexpected array form {type(value).__name__}")


def nest(flat: list, dims: list[int]) -> list:
    """Flat elements in storage (row-major) order -> nested lists of shape dims."""
    if len(dims) == 1:
        return list(flat)
    step = len(flat) // dims[0] if dims[0] else 0
    return [nest(flat[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]


def flatten(elements: list) -> list:
    """Nested elements -> flat list in row-major order (PostgreSQL's storage order)."""
    if not elements or not isinstance(elements[0], list):
        return list(elements)
    return [x for sub in elements for x in flatten(sub)]


def depth(elements: list) -> int:
    """Number of dimensions of nested elements whose leaves are not lists (1 for an empty array)."""
    n = 1
    while elements and isinstance(elements[0], list):
        elements, n = elements[0], n + 1
    return n


def map_leaves(elements: list, dims: int, convert: Callable[[Any], Any]) -> list:
    """elements with convert applied to each non-NULL leaf; dims: the nesting depth."""
    if dims == 1:
        return [None if x is None else convert(x) for x in elements]
    return [map_leaves(sub, dims - 1, convert) for sub in elements]


def _quote(text: str) -> str:
    if text == "" or text.upper() == "NULL" or any(c in text for c in '{}," \\\t\n\r\v\f'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def format_array(elements: list, lower_bounds: list[int] | None, element_text: Callable[[Any], str]) -> str:
    """An array literal (array_in text) of nested elements, with lower_bounds when given.

    element_text: the input text of one non-NULL element (leaves must not be
    lists). E.g. ``[1, None]``, ``[0]`` -> ``[0:1]={1,NULL}``.
    """
    def body(items: list, level: int) -> str:
        if level > 1:
            return "{" + ",".join(body(sub, level - 1) for sub in items) + "}"
        return "{" + ",".join("NULL" if x is None else _quote(element_text(x)) for x in items) + "}"

    dims = depth(elements) if elements else 1
    text = body(elements, dims)
    if lower_bounds is None or not elements:
        return text
    shape, level = [], elements
    for _ in range(dims):
        shape.append(len(level))
        level = level[0] if level else []
    return "".join(f"[{lb}:{lb + n - 1}]" for lb, n in zip(lower_bounds, shape, strict=True)) + "=" + text
