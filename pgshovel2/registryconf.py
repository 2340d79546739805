"""Schema registry client settings: URL, basic auth and TLS, for every registry client of pgshovel2
(the relay's, the consumers' decoders, the Spark jobs' executors). docs/security.rst documents them.

- ``--schema-registry URL`` / ``PGSHOVEL_SCHEMA_REGISTRY``: one URL or several, comma-separated.
  User info in a URL (``https://user:password@host``) is accepted and taken out of it at once:
  the URL kept, printed and logged (str() of the settings) never holds credentials.
- ``--schema-registry-user-info`` / ``PGSHOVEL_SCHEMA_REGISTRY_USER_INFO``: ``USER:PASSWORD`` for
  basic auth, as a reference (``env:NAME``, ``file:PATH``: pgshovel2.secretref) or, in the
  variable only, the value itself.
- ``--schema-registry-ca``, ``--schema-registry-cert``, ``--schema-registry-key`` (and their
  PGSHOVEL_ variables): PEM files of the CA bundle to verify the registry with (default: the
  system's), and of a client certificate and its unencrypted key (mutual TLS).

Functions that make registry clients take ``Registry``: a RegistrySettings, or a URL string that
:func:`settings` completes from this process's PGSHOVEL_SCHEMA_REGISTRY_* variables.
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pgshovel2 import secretref
from pgshovel2.errors import PgshovelError

VARIABLES = {"user_info": "PGSHOVEL_SCHEMA_REGISTRY_USER_INFO", "ca": "PGSHOVEL_SCHEMA_REGISTRY_CA",
             "cert": "PGSHOVEL_SCHEMA_REGISTRY_CERT", "key": "PGSHOVEL_SCHEMA_REGISTRY_KEY"}


class RegistrySettingsError(PgshovelError):
    """Schema registry settings are invalid or incomplete (never shows a credential)."""


@dataclass(frozen=True)
class RegistrySettings:
    """url: the registry's Confluent-compatible base URL(s), without credentials; user_info:
    ``USER:PASSWORD`` for basic auth (secret; None: none); user_info_origin: where it came from;
    ca, cert, key: PEM file paths (None: the system's CAs, no client certificate).
    str() is the URL: safe to print."""

    url: str
    user_info: str | None = field(default=None, repr=False)
    user_info_origin: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def __str__(self) -> str:
        return self.url

    @classmethod
    def load(cls, url: str, user_info: str | None = None, ca: str | None = None, cert: str | None = None,
             key: str | None = None, environ: Mapping[str, str] | None = None,
             origin: str = "--schema-registry-user-info") -> "RegistrySettings":
        """Settings of url (user info in it is taken out); user_info: a reference or the value
        (origin names where it came from, for errors); ca, cert, key: PEM files.

        Raises RegistrySettingsError for a malformed URL, user info both in the URL and given,
        user info without a colon, a certificate without its key (or the reverse), an
        unreadable file; SecretReferenceError for an unresolvable reference.
        """
        clean, in_url = _split_user_info(url)
        if in_url is not None and user_info:
            raise RegistrySettingsError(f"the schema registry URL {clean} carries user info and {origin} is set "
                                        "too: give the credentials one way")
        resolved = in_url
        if user_info:
            resolved = secretref.resolve(user_info, f"schema registry user info ({origin})", environ)
            origin = origin + (f", from {user_info}" if secretref.is_reference(user_info) else "")
        elif in_url is not None:
            origin = "the schema registry URL"
        if resolved is not None and ":" not in resolved:
            raise RegistrySettingsError(f"schema registry user info ({origin}) must be USER:PASSWORD")
        if (cert is None) != (key is None):
            raise RegistrySettingsError("a schema registry client certificate needs its key and the reverse: "
                                        "give both --schema-registry-cert and --schema-registry-key")
        for what, path in (("CA bundle", ca), ("client certificate", cert), ("client key", key)):
            if path is not None and not os.access(path, os.R_OK):
                raise RegistrySettingsError(f"schema registry {what} {path}: not a readable file")
        return cls(clean, resolved, origin if resolved is not None else None, ca, cert, key)

    def client_config(self) -> dict[str, Any]:
        """The confluent_kafka SchemaRegistryClient configuration of these settings."""
        conf: dict[str, Any] = {"url": self.url}
        if self.user_info is not None:
            conf["basic.auth.user.info"] = self.user_info
        for name, value in (("ssl.ca.location", self.ca), ("ssl.certificate.location", self.cert),
                            ("ssl.key.location", self.key)):
            if value is not None:
                conf[name] = value
        return conf

    def client(self) -> Any:
        """A confluent_kafka SchemaRegistryClient of these settings (imported here: ~0.3 s).
        Raises RegistrySettingsError when the client refuses them (e.g. an unusable certificate)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        try:
            return SchemaRegistryClient(self.client_config())
        except (ValueError, TypeError, OSError) as exc:  # ssl.SSLError is an OSError
            raise RegistrySettingsError(f"schema registry {self.url}: {_safe(str(exc), self.user_info)}") from None


Registry = RegistrySettings | str


def settings(registry: Registry | None, environ: Mapping[str, str] | None = None) -> RegistrySettings | None:
    """registry itself; for a URL string, its settings with this process's
    PGSHOVEL_SCHEMA_REGISTRY_USER_INFO / _CA / _CERT / _KEY variables (environ, default
    os.environ); None for None or an empty string. Raises what RegistrySettings.load raises."""
    if registry is None or isinstance(registry, RegistrySettings):
        return registry
    if not registry:
        return None
    env = os.environ if environ is None else environ
    values = {name: env.get(variable) or None for name, variable in VARIABLES.items()}
    return RegistrySettings.load(registry, environ=env, origin=f"variable {VARIABLES['user_info']}", **values)


def failure(exc: BaseException, registry: RegistrySettings | str | None) -> str:
    """What a failed registry request exc says, for an error message: for a refusal (HTTP 401,
    403) or a TLS failure, what to set; never a credential."""
    settings = registry if isinstance(registry, RegistrySettings) else None
    status = getattr(exc, "http_status_code", None)
    text = _safe(str(getattr(exc, "error_message", None) or exc), settings.user_info if settings else None)
    title = re.search(r"<title>([^<]*)</title>", text)  # a proxy's HTML page: its title says it
    text = title.group(1).strip() if title else text
    given = settings is not None and settings.user_info is not None
    if status == 401:
        return (f"the registry refused the credentials (HTTP 401; user info from {settings.user_info_origin})"
                if given else "the registry wants credentials (HTTP 401): set --schema-registry-user-info or "
                f"{VARIABLES['user_info']} (USER:PASSWORD, env:NAME or file:PATH)")
    if status == 403:
        origin = f" (user info from {settings.user_info_origin})" if given else ""
        return f"the registry denied the request (HTTP 403): the registry user lacks the right{origin}"
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in type(exc).__name__ or "SSL:" in text:
        return f"TLS failed ({text}): check --schema-registry-ca / -cert / -key"
    if status == 400 and "certificate" in text.lower():
        return (f"the registry wants a client certificate (HTTP {text}): set --schema-registry-cert "
                "and --schema-registry-key")
    return text


def redact_url(url: str) -> str:
    """url (or comma-separated URLs) with any user info replaced by ``***``: for errors about a
    URL that could not be parsed into settings."""
    return ",".join(_redact_one(u) for u in url.split(","))


def _redact_one(url: str) -> str:
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        return url.strip()
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}"


def _split_user_info(url: str) -> tuple[str, str | None]:
    """(url without user info, "user:password" of the first URL that has it, or None)."""
    clean, found = [], None
    for one in url.split(","):
        try:
            parts = urlsplit(one.strip())
            user, password, host = parts.username, parts.password, parts.hostname
            port = parts.port
        except ValueError as exc:
            raise RegistrySettingsError(f"schema registry URL {redact_url(one)}: {exc}") from None
        if parts.scheme not in ("http", "https") or not host:
            raise RegistrySettingsError(f"schema registry URL {redact_url(one)}: expected http(s)://HOST[:PORT]/PATH")
        if user is not None or password is not None:
            found = found or f"{unquote(user or '')}:{unquote(password or '')}"
            netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
            parts = parts._replace(netloc=netloc)
        clean.append(urlunsplit(parts))
    return ",".join(clean), found


def _safe(text: str, user_info: str | None) -> str:
    """text without the password of user_info (a library's message should not hold it; in case)."""
    if user_info and ":" in user_info:
        password = user_info.split(":", 1)[1]
        if password:
            text = text.replace(password, "***")
    return text
