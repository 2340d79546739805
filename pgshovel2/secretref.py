"""Secret references: where a secret comes from, resolved where the process runs (docs/security.rst).

A setting that holds a secret (a Kafka or ZooKeeper password, a DSN's password, the schema
registry's user info, the metrics endpoint's credentials) is written as a reference::

    env:NAME     the value of environment variable NAME
    file:PATH    the content of file PATH, without its trailing line break

The reference is what ZooKeeper, set records, logs and ``ps`` may show; the secret is read only
when the process needs it and never written anywhere: errors name the reference, never a value.
"""

import os
import re
from collections.abc import Mapping

from pgshovel2.errors import PgshovelError

_REFERENCE = re.compile(r"(env|file):(.+)", re.DOTALL)
FORMS = "env:VAR or file:PATH"


class SecretReferenceError(PgshovelError):
    """A secret reference cannot be resolved (variable unset or empty, file unreadable or empty),
    or a secret was given itself where only a reference is accepted."""


def is_reference(value: str | None) -> bool:
    """True when value is a reference (``env:NAME`` or ``file:PATH``), not a secret itself."""
    return bool(_REFERENCE.fullmatch(value or ""))


def resolve(value: str, what: str, environ: Mapping[str, str] | None = None) -> str:
    """value itself, or the secret the reference value points to.

    what names the setting for errors (e.g. "Kafka property sasl.password (file
    /etc/pgshovel/kafka.properties, line 4)"). environ: the variables (default os.environ).
    Raises SecretReferenceError naming what and the reference (never a value) when the
    variable is unset or empty, or the file cannot be read or is empty.
    """
    match = _REFERENCE.fullmatch(value or "")
    if match is None:
        return value
    kind, target = match.groups()
    if kind == "env":
        found = (os.environ if environ is None else environ).get(target)
        if not found:
            raise SecretReferenceError(f"{what}: {value}: environment variable {target} is "
                                       f"{'empty' if found == '' else 'not set'}")
        return found
    return _read(target, value, what)


def required(reference: str, what: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret reference points to, where only a reference is accepted (a ZooKeeper password,
    a DSN's password). Raises SecretReferenceError naming what when reference is the secret
    itself (never showing it) or cannot be resolved (see resolve)."""
    if not is_reference(reference):
        raise SecretReferenceError(f"{what}: must be a reference ({FORMS}), not the secret itself")
    return resolve(reference, what, environ)


def _read(path: str, reference: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise SecretReferenceError(f"{what}: {reference}: cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SecretReferenceError(f"{what}: {reference}: the file is not UTF-8 text") from None
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    if not text:
        raise SecretReferenceError(f"{what}: {reference}: the file is empty")
    return text
