"""Secret references: where a password comes from, resolved where the process runs.

A secret is never given (nor stored) as itself but as a reference::

    env:VAR      the value of environment variable VAR
    file:PATH    the content of file PATH, without its trailing newline

The reference is what ZooKeeper, set records, logs and ``ps`` may show; the secret is read
only when a connection is made (:func:`resolve`), and never appears in an error.
"""

import os
import re
from pathlib import Path

from pgshovel2.errors import ConfigError

_REFERENCE = re.compile(r"(env|file):(.+)", re.DOTALL)
FORMS = "env:VAR or file:PATH"


def is_reference(value: str) -> bool:
    """True when value is a reference (``env:VAR`` or ``file:PATH``), not a secret itself."""
    return bool(_REFERENCE.fullmatch(value or ""))


def resolve(reference: str, what: str) -> str:
    """The secret reference points at. what names the setting in errors (e.g. ``--zookeeper-auth``).

    Raises ConfigError naming what and the reference (never a secret) when reference is not one
    of the two forms, the variable is unset or empty, or the file cannot be read or is empty.
    """
    match = _REFERENCE.fullmatch(reference or "")
    if match is None:
        raise ConfigError(what, "password", "(not shown)",
                          f"must be a reference ({FORMS}), not the secret itself")
    kind, target = match.groups()
    if kind == "env":
        value = os.environ.get(target)
        if not value:
            raise ConfigError(what, "password", reference, f"environment variable {target} is not set or empty")
        return value
    try:
        value = Path(target).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(what, "password", reference, f"cannot read the file: {exc.strerror}") from exc
    if not value:
        raise ConfigError(what, "password", reference, "the file is empty")
    return value
