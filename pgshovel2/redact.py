"""The one redaction of secrets, for everything pgshovel2 prints, logs, raises, stores or reports.

- :func:`dsn`: a libpq DSN (``key=value`` pairs or a ``postgresql://`` URI) with the value of
  every secret key (SECRET_DSN_KEYS; ``sslkey`` when it holds key material instead of a path)
  masked; a reference (``password=env:VAR``, pgshovel2.secretref) is not a secret and stays.
  A DSN libpq cannot parse is masked from the first secret key on, so that no part of a
  password shows (libpq's own parse errors quote pieces of it: never print them).
- :func:`strip_dsn`: the DSN to store (ZooKeeper, manifests): literal secrets left out.
- :func:`url`: a URL with the password of its user info masked.
- :func:`properties`: a client property map (Kafka, the schema registry) with every secret-looking
  key's value masked.
- :func:`text`: free text (messages, log lines, Sentry events) with all of the above masked.
- :func:`deep`: :func:`text` over every string of a nested structure (a Sentry event).
"""

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pgshovel2 import secretref

MASK = "***"
SECRET_DSN_KEYS = frozenset({"password", "sslpassword"})  # libpq keys whose value is a secret
_URI_SCHEMES = ("postgresql://", "postgres://")
_KEY_MATERIAL = "-----BEGIN"
_SECRET_KEY = re.compile(r"pass(word|wd|phrase)?|secret|token|credential|jaas|user[._-]?info|private|api[._-]?key"
                         r"|(^|[._-])key([._-]?(pem|material|data))?$|\.pem$", re.IGNORECASE)
# key=value with a secret-looking key, in a DSN or a property list; the value up to whitespace
# (or a quoted value with its quotes): masking too much is harmless, too little is not.
_PAIR = re.compile(r"""(?P<key>\b[\w.-]*(?:password|passwd|secret|token|user\.info)[\w.-]*)(?P<eq>\s*=\s*)"""
                   r"""(?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|\S+)""", re.IGNORECASE)
# "key": "value" / 'key': 'value' (JSON, Python reprs) with a secret-looking key
_QUOTED = re.compile(r"""(?P<key>(?P<q>["'])[\w.-]*(?:password|passwd|secret|token|user\.info)[\w.-]*(?P=q))"""
                     r"""(?P<eq>\s*:\s*)(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""", re.IGNORECASE)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):(?P<password>[^@\s/]*)@")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL)


def secret_key(key: str) -> bool:
    """True when a property or field named key holds a secret (password, secret, token, JAAS
    config, user info, key material...)."""
    return bool(_SECRET_KEY.search(key))


def _secret_value(key: str, value: str) -> bool:
    if key in SECRET_DSN_KEYS:
        return not secretref.is_reference(value)
    return key == "sslkey" and _KEY_MATERIAL in value


def parse_conninfo(text: str) -> dict[str, str] | None:
    """The pairs of a libpq ``key=value`` connection string as libpq reads them (values in single
    quotes, backslash escapes), None when libpq would refuse its syntax. (Not for URIs.)"""
    out, i, n = {}, 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] != "=" or not key:
            return None
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value, quoted = [], i < n and text[i] == "'"
        i += quoted
        while i < n and (quoted or not text[i].isspace()):
            if text[i] == "\\" and i + 1 < n:
                i += 1
            elif quoted and text[i] == "'":
                break
            value.append(text[i])
            i += 1
        if quoted:
            if i >= n:
                return None
            i += 1
        out[key] = "".join(value)


def _quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _uri(text: str, strip: bool) -> str:
    """A postgresql:// URI with its literal secrets masked (strip: left out)."""
    parts = urlsplit(text)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_password, password = userinfo.partition(":")
        if has_password and _secret_value("password", unquote(password)):
            userinfo = user if strip else f"{user}:{MASK}"
        netloc = f"{userinfo}@{host}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not (strip and _secret_value(k, v))]
    query = [(k, MASK if _secret_value(k, v) else v) for k, v in query]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe=":/*", quote_via=quote)))


def _uri_secrets(text: str) -> list[str]:
    parts = urlsplit(text)
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    _, has_password, password = userinfo.partition(":")
    keys = ["password"] if has_password and _secret_value("password", unquote(password)) else []
    return keys + [k for k, v in parse_qsl(parts.query, keep_blank_values=True) if _secret_value(k, v)]


def dsn(text: str | None) -> str:
    """The DSN for display: every literal secret masked, references kept. Never raises."""
    if not text:
        return ""
    if text.strip().startswith(_URI_SCHEMES):
        try:
            return _uri(text.strip(), strip=False)
        except ValueError:
            return _unparsable(text)
    params = parse_conninfo(text)
    if params is None:
        return _unparsable(text)
    return " ".join(f"{k}={MASK if _secret_value(k, v) else _quote(v)}" for k, v in params.items())


def strip_dsn(text: str) -> str:
    """The DSN to store: literal secrets (and inline key material) left out, references kept.
    A DSN libpq cannot parse comes back masked as :func:`dsn` masks it."""
    if text.strip().startswith(_URI_SCHEMES):
        try:
            return _uri(text.strip(), strip=True)
        except ValueError:
            return _unparsable(text)
    params = parse_conninfo(text)
    if params is None:
        return _unparsable(text)
    return " ".join(f"{k}={_quote(v)}" for k, v in params.items() if not _secret_value(k, v))


def literal_secrets(text: str) -> list[str]:
    """The keys of text (a DSN) that hold a secret itself rather than a reference; [] when none
    (or when it cannot be parsed: connecting reports that, redacted)."""
    if text.strip().startswith(_URI_SCHEMES):
        try:
            return _uri_secrets(text.strip())
        except ValueError:
            return []
    params = parse_conninfo(text)
    return [] if params is None else [k for k, v in params.items() if _secret_value(k, v)]


def _unparsable(text: str) -> str:
    """A DSN that cannot be parsed: a URI with its user info masked, or key=value text cut at the
    first secret key (what follows may be the rest of a password with spaces in it)."""
    if "://" in text:
        return text_only(text.split()[0]) + (" ..." if len(text.split()) > 1 else "")
    match = re.search(r"\b(" + "|".join(sorted(SECRET_DSN_KEYS)) + r"|sslkey)\s*=", text)
    head = text if match is None else text[:match.start()] + f"{match.group(1)}={MASK} ..."
    return text_only(head)


def url(text: str) -> str:
    """text (a URL) with the password of its user info masked (``https://user:***@host/``);
    anything that is not a URL with one comes back as it is."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    if parts.password is None:
        return text
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{MASK}@{host}"))


def properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of props (client properties) with the value of every secret-looking key masked
    and URLs' passwords masked in the others."""
    return {k: (MASK if secret_key(str(k)) and v not in (None, "") else text(v) if isinstance(v, str) else v)
            for k, v in props.items()}


def text_only(text: str) -> str:
    """:func:`text` without DSN parsing (the fallback's own scrub)."""
    out = _PEM.sub(MASK, text)
    out = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", out)
    out = _QUOTED.sub(lambda m: f"{m['key']}{m['eq']}{m['value'][0]}{MASK}{m['value'][0]}", out)
    return _PAIR.sub(_mask_pair, out)


def _mask_pair(m: re.Match) -> str:
    value = m["value"].strip("'\"")
    if secretref.is_reference(value):
        return m.group(0)
    return f"{m['key']}{m['eq']}{MASK}"


def text(value: str) -> str:
    """Free text (a message, a log line, an exception's text) with every secret it may hold
    masked: ``password=...`` and other secret-looking ``key=value`` pairs, ``"key": "value"``
    pairs, URLs' user info passwords, PEM private keys. References are kept."""
    if not value:
        return value
    return text_only(value)


def deep(obj: Any) -> Any:
    """obj (nested dicts, lists, tuples, strings: a Sentry event) with :func:`text` applied to
    every string and the value of every secret-looking key masked."""
    if isinstance(obj, str):
        return text(obj)
    if isinstance(obj, Mapping):
        return {k: (MASK if isinstance(k, str) and secret_key(k) and isinstance(v, str) and v
                    and not secretref.is_reference(v) else deep(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [deep(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(deep(v) for v in obj)
    return obj
