"""Reading Java properties files (the syntax of Kafka's own client.properties).

As java.util.Properties.load reads them: ``key=value``, ``key: value`` or ``key value``;
``#`` and ``!`` start comment lines; a line ending in an odd number of backslashes continues
on the next one (whose leading blanks are dropped); ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>``
are escapes. A key given twice keeps its last value, as in Java.
"""

from dataclasses import dataclass

from pgshovel2.errors import PgshovelError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANKS = " \t\f"


class PropertiesError(PgshovelError):
    """A properties file cannot be read or parsed (names the file and line)."""


@dataclass(frozen=True)
class Entry:
    """One property: its key and value (escapes undone), and the line it starts on (from 1)."""

    key: str
    value: str
    line: int


def read(path: str) -> list[Entry]:
    """The entries of properties file path, in file order. Raises PropertiesError naming the
    file (and line) when it cannot be read or holds a malformed escape."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise PropertiesError(f"cannot read properties file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PropertiesError(f"properties file {path} is not UTF-8 text") from None
    return parse(text, path)


def parse(text: str, source: str) -> list[Entry]:
    """The entries of properties text (source names it in errors), in order."""
    entries = []
    for line_no, logical in _logical_lines(text):
        stripped = logical.lstrip(_BLANKS)
        if not stripped or stripped[0] in "#!":
            continue
        key, value = _split(stripped)
        where = f"{source}, line {line_no}"
        entries.append(Entry(_unescape(key, where), _unescape(value, where), line_no))
    return entries


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if pending is not None:
            line = line.lstrip(_BLANKS)
        else:
            start = number
            if line.lstrip(_BLANKS)[:1] in ("#", "!"):  # a comment never continues
                out.append((number, line))
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = (pending or "") + line[:-1]
            continue
        out.append((start, (pending or "") + line))
        pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def _split(line: str) -> tuple[str, str]:
    """(raw key, raw value) of a logical line starting with its key."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _BLANKS:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"{where}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
