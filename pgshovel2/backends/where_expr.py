"""The ``--where`` condition of an online snapshot: one SQL expression, never more.

``pgshovel set snapshot --where EXPR`` stores EXPR in the set's ``snapshot_request`` znode and
the relay adds it to each chunk's query as ``... WHERE <key range> AND (EXPR)``. Text spliced
into a statement could end the expression and go on (``true); COMMIT; CREATE TABLE x(...)``,
``true) OR (SELECT ...) IS NULL --``) and run as the relay's role; the znode is written by
whoever may write ZooKeeper. So both sides -- the CLI before it writes the request and the relay
before each query, never trusting the znode -- accept EXPR only when :func:`check` finds it to be
one expression at the parenthesis level it is put in: its parentheses balanced and never closing
more than they opened, no ``;``, no comment (``--``, ``/* */``), no psql backslash command;
string constants (``'...'``, ``E'...'``, dollar quotes), quoted identifiers and their contents
are read as PostgreSQL's lexer reads them, so that none of these hides in one or escapes from
one. The chunk query is then a single statement, and it runs in a READ ONLY transaction (which
the expression therefore cannot end) that is rolled back: a data-modifying CTE, a function
writing a table, ``nextval()`` are refused by PostgreSQL itself. On the CLI side it is also
planned (EXPLAIN, not run) against each table (pgshovel2.backends.chunks.check_table).
"""

import re

from psycopg2 import sql

MAX_LENGTH = 10_000  # characters: a condition, not a program
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")


class WhereError(ValueError):
    """The text is not one SQL expression (the message says why and where)."""


def check(where: str) -> str:
    """Return where (stripped) when it is one SQL expression as the module docstring says; raise
    WhereError naming the problem and its character offset otherwise (an empty condition too)."""
    if not isinstance(where, str) or not where.strip():
        raise WhereError("--where is empty: give an SQL condition, or leave --where out")
    text = where.strip()
    if len(text) > MAX_LENGTH:
        raise WhereError(f"--where is {len(text)} characters long; at most {MAX_LENGTH}")
    if "\x00" in text:
        raise WhereError("--where holds a NUL character")
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "'":
            i = _string_end(text, i, escapes=i > 0 and text[i - 1] in "eE" and not _ident_char(text, i - 2))
        elif ch == '"':
            i = _quoted_end(text, i, '"', "quoted identifier")
        elif ch == "$" and not _ident_char(text, i - 1) and (m := _DOLLAR_TAG.match(text, i)):
            end = text.find(m.group(0), m.end())
            if end < 0:
                raise WhereError(f"--where: dollar-quoted string opened at character {i + 1} never ends")
            i = end + len(m.group(0))
        elif text.startswith("--", i) or text.startswith("/*", i):
            raise WhereError(f"--where: a comment at character {i + 1}: comments are not allowed in the condition")
        elif ch == ";":
            raise WhereError(f"--where: ';' at character {i + 1}: the condition must be one expression, "
                             "not statements")
        elif ch == "\\":
            raise WhereError(f"--where: a backslash at character {i + 1} outside a string constant")
        elif ch == "(":
            depth, i = depth + 1, i + 1
        elif ch == ")":
            if depth == 0:
                raise WhereError(f"--where: ')' at character {i + 1} closes a parenthesis the condition did not "
                                 "open: the condition must be one expression")
            depth, i = depth - 1, i + 1
        else:
            i += 1
    if depth:
        raise WhereError(f"--where: {depth} parenthesis(es) left open: the condition must be one expression")
    return text


def condition(where: str) -> sql.Composable:
    """``(where)`` as SQL to add to a WHERE clause, after :func:`check` (raises WhereError); its
    ``%`` doubled, as the statement is run with parameters."""
    return sql.SQL("(") + sql.SQL(check(where).replace("%", "%%")) + sql.SQL(")")


def _ident_char(text: str, i: int) -> bool:
    return 0 <= i < len(text) and (text[i].isalnum() or text[i] in "_$")


def _string_end(text: str, start: int, escapes: bool) -> int:
    """The index after the string constant opening at start ('' doubles a quote; with escapes,
    E'...', a backslash escapes the next character)."""
    i, n = start + 1, len(text)
    while i < n:
        if text[i] == "\\":
            if not escapes:  # read as an escape only where standard_conforming_strings is off: refuse both ways
                raise WhereError(f"--where: a backslash in the string constant at character {start + 1}: "
                                 "write E'...' for escapes")
            i += 2
            continue
        if text[i] == "'":
            if i + 1 < n and text[i + 1] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    raise WhereError(f"--where: string constant opened at character {start + 1} never ends")


def _quoted_end(text: str, start: int, quote: str, what: str) -> int:
    i, n = start + 1, len(text)
    while i < n:
        if text[i] == quote:
            if i + 1 < n and text[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    raise WhereError(f"--where: {what} opened at character {start + 1} never ends")
