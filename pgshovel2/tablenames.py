"""How an operator names a table of a set, the same everywhere (a set config's ``tables:`` entry,
``set snapshot --table``, ``set accept-ddl``, ``tail --table``, the consumer library's tables):

- ``schema.table``: both parts exact identifiers (no case folding); a part holding a ``.`` or a
  ``"`` is written in double quotes, a quote doubled (``sales."my.table"``, ``"a""b"``);
- the quoted tag as ``set inspect`` shows it (``"sales"."orders"``), which is the same form;
- ``table`` alone: the set's table of that name when exactly one schema has it (in a config: the
  schema ``public``).

:func:`split` parses a name; :func:`find` picks the table of a set it names, or raises
:class:`TableNameError` listing the candidates (ambiguous) or naming the set (not found).
"""

from collections.abc import Iterable

from pgshovel2 import names


class TableNameError(ValueError):
    """A table name that cannot be parsed, names no table of a set, or names several (ambiguous:
    True, candidates: their (schema, table))."""

    def __init__(self, message: str, candidates: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.candidates = candidates
        self.ambiguous = len(candidates) > 1


def split(text: str) -> tuple[str | None, str]:
    """(schema or None, table) of text (module docstring). Raises TableNameError for an empty part,
    an unclosed quote, a quote inside an unquoted part, or more than two parts."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            part, i = _quoted(text, i)
        else:
            end = text.find(".", i)
            end = n if end < 0 else end
            part, i = text[i:end], end
            if '"' in part:
                raise TableNameError(f"table name {text!r}: a double quote inside an unquoted part (quote the "
                                     'whole part, doubling the quote: "a""b")')
        if not part:
            raise TableNameError(f"table name {text!r}: an empty part")
        parts.append(part)
        if i >= n:
            break
        if text[i] != ".":
            raise TableNameError(f"table name {text!r}: expected '.' after a quoted part at character {i + 1}")
        i += 1
    if len(parts) > 2:
        raise TableNameError(f"table name {text!r}: more than schema.table (quote a part holding a dot: "
                             'schema."my.table")')
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The identifier of the quoted part starting at text[i] and the index after it."""
    out, j = [], i + 1
    while j < len(text):
        if text[j] == '"':
            if text[j + 1:j + 2] == '"':
                out.append('"')
                j += 2
                continue
            return "".join(out), j + 1
        out.append(text[j])
        j += 1
    raise TableNameError(f"table name {text!r}: a double quote that never closes")


def display(schema: str, table: str) -> str:
    """``schema.table`` as an operator writes it (:func:`split` reads it back): parts quoted only
    when they hold a dot or a quote."""
    return ".".join(names.quote_ident(p) if "." in p or '"' in p or not p else p for p in (schema, table))


def find(text: str, tables: Iterable[tuple[str, str]], set_name: str) -> tuple[str, str]:
    """The (schema, table) among tables (a set's) that text names. Raises TableNameError: not a
    table of set_name (listing its tables), a bare name in several schemas (listing them), or a
    name that does not parse."""
    tables = list(dict.fromkeys(tables))
    if text in (names.qualified(s, t) for s, t in tables):  # the tag, as set inspect prints it
        return next((s, t) for s, t in tables if names.qualified(s, t) == text)
    try:
        schema, name = split(text)
    except TableNameError:
        schema, name = None, None
    matches = ([(s, t) for s, t in tables if (s, t) == (schema, name)] if schema is not None
               else [(s, t) for s, t in tables if t == name])
    # names written unquoted as they are (a dot in a name), as before quoting was understood
    matches = (matches or [(s, t) for s, t in tables if f"{s}.{t}" == text]
               or [(s, t) for s, t in tables if t == text])
    if len(matches) == 1:
        return matches[0]
    listed = ", ".join(sorted(display(s, t) for s, t in (matches or tables)))
    if matches:
        raise TableNameError(f"table {text!r} is ambiguous in set {set_name!r}: it could be {listed} (write "
                             "schema.table)", tuple(matches))
    raise TableNameError(f"table {text!r} is not a table of set {set_name!r}; its tables: {listed}")
