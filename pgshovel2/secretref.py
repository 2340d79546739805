"""Secrets given by reference, resolved where the process runs (docs/security.rst).

A setting that holds a secret (a Kafka password, the schema registry's user info, the metrics
endpoint's credentials) may be written as a reference instead of the secret itself:

- ``env:NAME``: the value of environment variable NAME;
- ``file:PATH``: the contents of file PATH, without its trailing line break.

The secret is read when the process needs it and never written anywhere (ZooKeeper, logs,
errors): errors name the reference, never the value.
"""

import os
from collections.abc import Mapping

from pgshovel2.errors import PgshovelError

PREFIXES = ("env:", "file:")


class SecretReferenceError(PgshovelError):
    """A secret reference cannot be resolved (variable unset, file unreadable or empty)."""


def is_reference(value: str) -> bool:
    """True when value is an ``env:`` or ``file:`` reference."""
    return value.startswith(PREFIXES)


def resolve(value: str, what: str, environ: Mapping[str, str] | None = None) -> str:
    """value itself, or what the reference value points to (``env:NAME``, ``file:PATH``).

    what names the setting for errors (e.g. "Kafka property sasl.password (file
    /etc/pgshovel/kafka.properties, line 4)"). environ: the variables (default os.environ).
    Raises SecretReferenceError naming what and the reference (never a value) when the
    variable is unset or empty, or the file cannot be read or is empty.
    """
    environ = os.environ if environ is None else environ
    if value.startswith("env:"):
        name = value[4:]
        found = environ.get(name)
        if not found:
            raise SecretReferenceError(f"{what}: {value}: environment variable {name} is "
                                       f"{'empty' if found == '' else 'not set'}")
        return found
    if value.startswith("file:"):
        path = value[5:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise SecretReferenceError(f"{what}: {value}: cannot read the file ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise SecretReferenceError(f"{what}: {value}: the file is not UTF-8 text") from None
        text = text[:-1] if text.endswith("\n") else text
        text = text[:-1] if text.endswith("\r") else text
        if not text:
            raise SecretReferenceError(f"{what}: {value}: the file is empty")
        return text
    return value
