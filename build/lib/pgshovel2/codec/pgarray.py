"""Parse PostgreSQL array literals (array_out text) into nested lists."""

from pgshovel2.errors import EncodeError


def parse_array(text: str) -> list:
    """Parse e.g. ``{1,NULL,"a \\"b\\""}`` into ``['1', None, 'a "b"']``.

    Elements stay text (None for NULL); nested arrays become nested lists. A
    leading dimension decoration (``[0:2]=``) is ignored. Raises EncodeError.
    """
    if text.startswith("["):
        text = text[text.index("=") + 1:]
    value, pos = _parse(text, 0)
    if pos != len(text):
        raise EncodeError(f"trailing text in array literal {text[:80]!r}")
    return value


def _parse(text: str, pos: int) -> tuple[list, int]:
    if text[pos:pos + 1] != "{":
        raise EncodeError(f"bad array literal {text[:80]!r}")
    out: list = []
    pos += 1
    if text[pos:pos + 1] == "}":
        return out, pos + 1
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
